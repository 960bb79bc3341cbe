#!/usr/bin/env python3
"""A loopback FHIR R4 server for batch Bundles of conditional creates, validating what it receives.

Every Bundle and every Observation is checked with `fhir.resources` (the R4B models, which match R4 for
Bundle, Observation and Device), a FHIR validator written outside this project; a resource that fails is
refused with 400 and an OperationOutcome, and counted.

  POST [base]        a `batch` Bundle; each POST entry with `ifNoneExist` is a conditional create:
                     no match -> 201 Created, one match -> 200 OK (nothing created), more -> 412.
  GET  [base]/metadata  a CapabilityStatement (401 without the bearer token when --token is set).
Control (same port): GET /__resources, GET /__stats, POST /__control {"poison": [identifier values],
"status": 500, "times": N, "answer": "no_status"|"not_objects"|"accepted"|"reflect"}.
  "answer" changes the next batch-responses (`times`, default 1): entries without a status, entries that
  are not objects (nothing stored for either), "202 Accepted" for each entry (stored), or each entry
  refused 422 with diagnostics that reflect the request's Authorization header (and 1,000 more characters).

Usage: fake_fhir.py [--port N] [--base /fhir] [--token T]; prints {"port": N} once listening.
"""
import argparse
import json
import signal
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from fhir.resources.R4B.bundle import Bundle
from fhir.resources.R4B.observation import Observation


class State:
    def __init__(self, token):
        self.lock = threading.RLock()
        self.token = token
        self.resources = []
        self.poison = set()
        self.fault = None
        self.answer = None
        self.stats = {"bundles": 0, "created": 0, "found": 0, "invalid": 0, "errors": [], "max_in_flight": 0}
        self.in_flight = 0


def outcome(text):
    return {"resourceType": "OperationOutcome", "issue": [{"severity": "error", "code": "invalid", "diagnostics": text}]}


class Handler(BaseHTTPRequestHandler):
    server_version = "fake-fhir/1"

    def log_message(self, fmt, *args):
        pass

    @property
    def state(self):
        return self.server.state

    def reply(self, status, payload):
        data = json.dumps(payload).encode()
        # The answer is decided: stop counting this request as in flight before the client can read it and
        # send its next one, so max_in_flight measures the client, not this server's thread scheduling.
        self.settle()
        self.send_response(status)
        self.send_header("Content-Type", "application/fhir+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def settle(self):
        if getattr(self, "counted", False):
            self.counted = False
            with self.state.lock:
                self.state.in_flight -= 1

    def authorized(self):
        return not self.state.token or self.headers.get("Authorization") == "Bearer " + self.state.token

    def do_GET(self):
        path = urllib.parse.urlsplit(self.path).path
        if path == "/__resources":
            with self.state.lock:
                self.reply(200, list(self.state.resources))
            return
        if path == "/__stats":
            with self.state.lock:
                self.reply(200, dict(self.state.stats, count=len(self.state.resources)))
            return
        if path == self.server.base + "/metadata":
            if not self.authorized():
                self.reply(401, outcome("bearer token required"))
                return
            self.reply(200, {"resourceType": "CapabilityStatement", "status": "active", "kind": "instance",
                             "fhirVersion": "4.0.1", "format": ["json"], "date": "2026-01-01"})
            return
        self.reply(404, outcome("not found"))

    def do_POST(self):
        path = urllib.parse.urlsplit(self.path).path
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        st = self.state
        if path == "/__control":
            req = json.loads(raw or b"{}")
            with st.lock:
                if "poison" in req:
                    st.poison = set(req["poison"])
                if "status" in req:
                    st.fault = {"status": req["status"], "times": req.get("times", 1)}
                if "answer" in req:
                    st.answer = {"kind": req["answer"], "times": req.get("times", 1)}
            self.reply(200, {"ok": True})
            return
        if path not in (self.server.base, self.server.base + "/"):
            self.reply(404, outcome("not found"))
            return
        if not self.authorized():
            self.reply(401, outcome("bearer token required"))
            return
        with st.lock:
            st.in_flight += 1
            st.stats["max_in_flight"] = max(st.stats["max_in_flight"], st.in_flight)
            self.counted = True
            fault = st.fault
            if fault:
                fault["times"] -= 1
                if fault["times"] <= 0:
                    st.fault = None
        try:
            if fault:
                self.reply(fault["status"], outcome("injected"))
                return
            self.batch(raw)
        finally:
            self.settle()

    def invalid(self, text):
        with self.state.lock:
            self.state.stats["invalid"] += 1
            self.state.stats["errors"].append(text[:500])

    def batch(self, raw):
        st = self.state
        try:
            doc = json.loads(raw)
            Bundle.model_validate(doc)
        except Exception as e:  # the validator's verdict, whatever its exception type
            self.invalid("Bundle: %s" % e)
            self.reply(400, outcome("invalid Bundle: %s" % str(e)[:300]))
            return
        if doc.get("type") != "batch":
            self.reply(400, outcome("only batch Bundles are accepted"))
            return
        entries = []
        with st.lock:
            st.stats["bundles"] += 1
            answer = st.answer
            if answer:
                answer["times"] -= 1
                if answer["times"] <= 0:
                    st.answer = None
        kind = answer["kind"] if answer else None
        if kind in ("no_status", "not_objects"):
            n = len(doc.get("entry", []))
            junk = [{"response": {}}, {}] if kind == "no_status" else ["201 Created", None]
            self.reply(200, {"resourceType": "Bundle", "type": "batch-response", "entry": [junk[i % 2] for i in range(n)]})
            return
        if kind == "reflect":
            said = (self.headers.get("Authorization") or "") + " " + "x" * 1000
            self.reply(200, {"resourceType": "Bundle", "type": "batch-response", "entry": [
                {"response": {"status": "422 Unprocessable Entity", "outcome": outcome("refused; you sent " + said)}}
                for _ in doc.get("entry", [])]})
            return
        for entry in doc.get("entry", []):
            resource = entry.get("resource") or {}
            request = entry.get("request") or {}
            ident = (resource.get("identifier") or [{}])[0].get("value")
            try:
                Observation.model_validate(resource)
            except Exception as e:
                self.invalid("Observation: %s" % e)
                entries.append({"response": {"status": "400 Bad Request", "outcome": outcome(str(e)[:300])}})
                continue
            if ident in st.poison:
                entries.append({"response": {"status": "422 Unprocessable Entity", "outcome": outcome("poison reading")}})
                continue
            if request.get("method") != "POST" or request.get("url") != "Observation" or "ifNoneExist" not in request:
                entries.append({"response": {"status": "400 Bad Request", "outcome": outcome("expected a conditional create")}})
                continue
            query = urllib.parse.parse_qs(request["ifNoneExist"])
            wanted = query.get("identifier", [""])[0]
            system, _, value = wanted.partition("|")
            with st.lock:
                matches = [r for r in st.resources
                           if any(i.get("system") == system and i.get("value") == value for i in r.get("identifier", []))]
                if len(matches) > 1:
                    entries.append({"response": {"status": "412 Precondition Failed"}})
                elif matches:
                    st.stats["found"] += 1
                    entries.append({"response": {"status": "200 OK", "location": "Observation/%s" % matches[0]["id"]}})
                else:
                    stored = dict(resource, id=str(len(st.resources) + 1))
                    st.resources.append(stored)
                    st.stats["created"] += 1
                    entries.append({"response": {"status": "202 Accepted" if kind == "accepted" else "201 Created",
                                                 "location": "Observation/%s/_history/1" % stored["id"]}})
        self.reply(200, {"resourceType": "Bundle", "type": "batch-response", "entry": entries})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--base", default="/fhir")
    parser.add_argument("--token", default=None)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    server.state = State(args.token)
    server.base = args.base.rstrip("/")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(json.dumps({"port": server.server_address[1]}), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    while not stop.wait(0.5):
        pass
    server.shutdown()
    sys.exit(0)


if __name__ == "__main__":
    main()
