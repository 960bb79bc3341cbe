#!/usr/bin/env python3
"""A loopback server that behaves like Nightscout's v1 entries API, with fault injection.

Standard library only (the README demo runs it without a virtual environment).

What it reproduces (cgm-remote-monitor lib/server/entries.js, lib/authorization):
  * POST /api/v1/entries[.json]: a JSON array (or one object with `date`) upserted on {sysTime, type};
    sysTime comes from dateString when present, else from date. The answer is the array of stored
    documents with `_id` only on newly inserted ones. One object without `date` answers `200 []`.
  * `api-secret` header: SHA-1 hex of the API secret, or an access token. A failed authentication is
    answered 401 only after a delay (--delay-401 seconds per recent failure from that address;
    Nightscout uses 5 s).
  * GET /api/v1/verifyauth: always 200, message OK or UNAUTHORIZED (after the same delay).
  * GET /api/v1/status.json, with `careportalEnabled` (on unless --no-careportal or the control says so).
  * POST /api/v1/treatments: a JSON array (or one object), only when careportal is enabled (404 otherwise,
    as lib/api/treatments/index.js). Each document is prepared as lib/server/treatments.js does:
    `created_at` is parsed with its offset and rewritten in UTC with milliseconds (the server's "now"
    when missing), `utcOffset` is kept, and a `glucose` of 0 or NaN drops glucose, glucoseType and units.
    It is then upserted on {created_at, eventType} (15.0.6), or, with "treatments_dedupe": "15.0.7" on the
    control channel, on its `identifier` first and {created_at, eventType} only for a document without one.
    The answer is the array of documents as sent, with `_id` only on newly inserted ones.
  * GET /api/v1/treatments[.json]: the stored treatments, newest `created_at` first (`count`, default 10).
  * POST /api/v1/devicestatus: a JSON object (or an array of them) inserted as sent, with `_id` and, when
    missing, `created_at` (lib/server/devicestatus.js); the answer is the array of stored documents.
    GET /__devicestatus on the control channel lists them.
  * API v3 and the v2 token exchange: see fake_nightscout_v3.py.

The API port speaks HTTP/1.1 with keep-alive, as Nightscout does, and closes a connection idle for 5 s.

Control channel (on the API port while it listens, and always on the control port):
  POST /__control  {"mode": "ok"|"hang"|"slow"|"status"|"commit_drop"|"empty"|"answer"|"huge"|"down"|"up",
                    "status": 500, "retry_after": 1, "delay_ms": 500, "times": N,
                    "poison": ["<identifier>", ...], "health": "up"|"down",
                    "secret": "...", "token": "...", "careportal": true|false,
                    "collection": "entries"|"treatments"|"all"}
      `collection`: which uploads the fault applies to (default entries); the others go on normally.
      `times`: the fault applies to the next N uploads, then the mode returns to ok;
      `after`: that many uploads succeed first (a fault in the middle of a replay).
      `down` closes the API listener (connection refused) and drops open connections; `up` reopens it.
      `health` opens or closes the health-check port (answers 204 to anything).
      "answer" (a proxy or a broken server answering 200): "answer": "non_entries" (one non-entry per
      element sent: strings, numbers, nulls, empty objects; nothing stored), "fewer" (stored, but the last
      element missing from the answer), "foreign" (nothing stored; documents that match nothing sent),
      "no_identifier" (stored; the answer drops `identifier`, as a server that keeps only known fields).
      "huge": 200 with a body of `size` bytes (default 100 MB), streamed; nothing stored.
      "error_body": the status `status` with the text `body` as the answer (`{secret}` and `{hash}` in it
      become the secret and its SHA-1 hex, as a server that reflects the request's headers).
  GET /__entries   stored documents, in insertion order
  GET /__treatments stored treatments, in insertion order
  GET /__stats     counters: uploads, inserted, updated, max_in_flight, auth_failures, requests by mode,
                   connections (API connections accepted)
  POST /__reset    forget entries and counters

Usage: fake_nightscout.py [--port N] [--control-port N] [--health-port N] [--secret S] [--token T]
                          [--delay-401 SECONDS] [--no-careportal]
Prints one JSON line with the ports once listening, then serves until SIGTERM/SIGINT.
"""
import argparse
import select
import datetime
import hashlib
import json
import signal
import socket
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import fake_nightscout_v3 as v3


class State:
    def __init__(self, secret, token, delay_401, careportal=True):
        self.lock = threading.Lock()
        self.careportal = careportal
        self.treatments_dedupe = "15.0.6"
        self.treatments = {}    # (created_at, eventType) -> doc
        self.treatment_order = []
        self.devicestatus = []
        self.secret = secret
        self.token = token
        self.delay_401 = delay_401
        self.mode = {"mode": "ok"}
        self.poison = set()
        self.docs = {}          # (sysTime, type) -> doc
        self.order = []         # keys in insertion order
        self.next_id = 1
        self.fail_times = {}    # ip -> [times]
        self.in_flight = 0
        self.active = set()
        self.stats = {"uploads": 0, "inserted": 0, "updated": 0, "max_in_flight": 0,
                      "auth_failures": 0, "faults": {}, "elements_received": 0, "connections": 0}
        self.mode_changed = threading.Condition(self.lock)

    def reset(self):
        with self.lock:
            self.docs.clear()
            self.order.clear()
            self.treatments.clear()
            self.treatment_order.clear()
            self.devicestatus.clear()
            self.fail_times.clear()
            self.stats = {"uploads": 0, "inserted": 0, "updated": 0, "max_in_flight": 0,
                          "auth_failures": 0, "faults": {}, "elements_received": 0, "connections": 0}

    def authorized(self, headers, query):
        given = headers.get("api-secret") or (query.get("token", [None])[0])
        if given is None:
            return False
        if self.secret and given.lower() == hashlib.sha1(self.secret.encode()).hexdigest():
            return True
        return bool(self.token) and given == self.token

    def auth_delay(self, ip):
        """Record a failure from ip; the delay grows with the failures of the last minute."""
        now = time.monotonic()
        with self.lock:
            recent = [t for t in self.fail_times.get(ip, []) if now - t < 60] + [now]
            self.fail_times[ip] = recent
            self.stats["auth_failures"] += 1
            return self.delay_401 * len(recent)

    def take_fault(self, collection="entries"):
        """The fault for this upload, consuming one of `times`; none for uploads of another collection."""
        with self.lock:
            if self.mode.get("collection", "entries") not in (collection, "all"):
                return {"mode": "ok"}
            if self.mode.get("after", 0) > 0:
                self.mode["after"] -= 1
                return {"mode": "ok"}
            m = dict(self.mode)
            if m["mode"] not in ("ok", "down", "up"):
                self.stats["faults"][m["mode"]] = self.stats["faults"].get(m["mode"], 0) + 1
                if "times" in self.mode:
                    self.mode["times"] -= 1
                    if self.mode["times"] <= 0:
                        self.mode = {"mode": "ok"}
                        self.mode_changed.notify_all()
            return m


def prepare_treatment(doc):
    """lib/server/treatments.js prepareData: created_at in UTC with ms (now when missing or unreadable),
    utcOffset from its offset, and no glucose fields when glucose is 0 or not a number."""
    text = doc.get("created_at")
    t = None
    if isinstance(text, str):
        try:
            t = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
            if t.tzinfo is None:
                t = t.replace(tzinfo=datetime.timezone.utc)
        except ValueError:
            t = None
    if t is None:
        t = datetime.datetime.now(datetime.timezone.utc)
    doc["utcOffset"] = int(t.utcoffset().total_seconds() // 60)
    utc = t.astimezone(datetime.timezone.utc)
    doc["created_at"] = utc.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (utc.microsecond // 1000)
    if "glucose" in doc:
        g = doc["glucose"]
        try:
            number = float(g)
        except (TypeError, ValueError):
            number = float("nan")
        if number != number or number == 0:
            for k in ("glucose", "glucoseType", "units"):
                doc.pop(k, None)
    return doc


def parse_sys_time(doc):
    """sysTime as Nightscout derives it: dateString (any offset) first, else date (ms)."""
    ds = doc.get("dateString")
    if isinstance(ds, str):
        text = ds.replace("Z", "+00:00")
        try:
            t = datetime.datetime.fromisoformat(text)
            if t.tzinfo is None:
                t = t.replace(tzinfo=datetime.timezone.utc)
            offset = int(t.utcoffset().total_seconds() // 60)
            utc = t.astimezone(datetime.timezone.utc)
            return utc.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (utc.microsecond // 1000), offset
        except ValueError:
            pass
    if isinstance(doc.get("date"), (int, float)):
        utc = datetime.datetime.fromtimestamp(doc["date"] / 1000, tz=datetime.timezone.utc)
        return utc.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (utc.microsecond // 1000), 0
    utc = datetime.datetime.now(datetime.timezone.utc)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (utc.microsecond // 1000), 0


class Servers:
    """The API listener (which can be closed and reopened), the control and the health listeners."""

    def __init__(self, state, host, port, control_port, health_port):
        self.state = state
        self.host = host
        self.api = None
        self.api_port = port
        self.health = None
        self.health_port = health_port
        self.open_connections = set()
        self.conn_lock = threading.Lock()
        self.control = self._serve(control_port, ControlOnlyHandler)
        self.open_api()
        self.open_health()

    def _serve(self, port, handler):
        server = ThreadingHTTPServer((self.host, port), handler)
        server.daemon_threads = True
        server.app = self
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server

    def open_api(self):
        if self.api is None:
            self.api = self._serve(self.api_port, ApiHandler)
            self.api_port = self.api.server_address[1]

    def close_api(self):
        if self.api is not None:
            server, self.api = self.api, None
            server.shutdown()
            server.server_close()
        with self.conn_lock:
            conns = list(self.open_connections)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def open_health(self):
        if self.health is None:
            self.health = self._serve(self.health_port, HealthHandler)
            self.health_port = self.health.server_address[1]

    def close_health(self):
        if self.health is not None:
            server, self.health = self.health, None
            server.shutdown()
            server.server_close()


class BaseHandler(BaseHTTPRequestHandler):
    server_version = "fake-nightscout/1"

    def log_message(self, fmt, *args):
        pass

    @property
    def app(self):
        return self.server.app

    def body(self):
        self.body_read = True
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def handle_one_request(self):
        self.body_read = False
        super().handle_one_request()
        # Answered without reading a body: its bytes would be taken for the next request.
        if not self.body_read and int(getattr(self, "headers", None) and self.headers.get("Content-Length") or 0) > 0:
            self.close_connection = True

    def reply(self, status, payload, headers=None):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, str(v))
        self.end_headers()
        self.wfile.write(data)

    def control(self):
        path = urllib.parse.urlsplit(self.path).path
        st = self.app.state
        if self.command == "POST" and path == "/__control":
            try:
                req = json.loads(self.body() or b"{}")
            except ValueError:
                self.reply(400, {"error": "bad json"})
                return True
            mode = req.get("mode")
            v3.handle_control(self, path, req)
            if mode == "down":
                self.app.close_api()
            elif mode == "up":
                self.app.open_api()
            if req.get("health") == "down":
                self.app.close_health()
            elif req.get("health") == "up":
                self.app.open_health()
            with st.lock:
                if "poison" in req:
                    st.poison = set(req["poison"])
                if "secret" in req:
                    st.secret = req["secret"]
                    st.fail_times.clear()
                if "token" in req:
                    st.token = req["token"]
                if "careportal" in req:
                    st.careportal = bool(req["careportal"])
                if "treatments_dedupe" in req:
                    st.treatments_dedupe = req["treatments_dedupe"]
                if mode is not None:
                    st.mode = {k: v for k, v in req.items() if k not in ("poison", "health", "secret", "token", "careportal",
                                                                        "treatments_dedupe")}
                    if mode in ("down", "up"):
                        st.mode = {"mode": "ok"}
                    st.mode_changed.notify_all()
                current = dict(st.mode)
            self.reply(200, {"mode": current, "api_port": self.app.api_port, "api_listening": self.app.api is not None,
                             "health_listening": self.app.health is not None})
            return True
        if v3.handle_control(self, path):
            return True
        if self.command == "GET" and path == "/__entries":
            with st.lock:
                docs = [st.docs[k] for k in st.order]
            self.reply(200, docs)
            return True
        if self.command == "GET" and path == "/__treatments":
            with st.lock:
                docs = [st.treatments[k] for k in st.treatment_order]
            self.reply(200, docs)
            return True
        if self.command == "GET" and path == "/__devicestatus":
            with st.lock:
                docs = list(st.devicestatus)
            self.reply(200, docs)
            return True
        if self.command == "GET" and path == "/__stats":
            with st.lock:
                self.reply(200, dict(st.stats, count=len(st.order), treatments=len(st.treatment_order)))
            return True
        if self.command == "POST" and path == "/__reset":
            st.reset()
            st.v3.reset()
            self.reply(200, {"ok": True})
            return True
        return False


class ControlOnlyHandler(BaseHandler):
    def do_GET(self):
        if not self.control():
            self.reply(404, {"status": 404})

    do_POST = do_GET


class HealthHandler(BaseHandler):
    def do_GET(self):
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_GET
    do_HEAD = do_GET


class ApiHandler(BaseHandler):
    # As Nightscout (Express on Node's http server): HTTP/1.1 answers with keep-alive, and a connection idle
    # for 5 s (Node's default keepAliveTimeout) closed by the server. Node disables Nagle's algorithm on
    # every connection it accepts (`noDelay`, default true): without that, an answer written as head and
    # body waits for the client's delayed ACK, some 40 ms, once a connection is kept.
    protocol_version = "HTTP/1.1"
    timeout = 5
    disable_nagle_algorithm = True

    def setup(self):
        super().setup()
        with self.app.conn_lock:
            self.app.open_connections.add(self.connection)
        with self.app.state.lock:
            self.app.state.stats["connections"] += 1

    def finish(self):
        try:
            super().finish()
        finally:
            with self.app.conn_lock:
                self.app.open_connections.discard(self.connection)

    def unauthorized(self):
        time.sleep(self.app.state.auth_delay(self.client_address[0]))
        self.reply(401, {"status": 401, "message": "Unauthorized", "description": "Invalid/Missing"})

    def do_GET(self):
        if self.control():
            return
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        st = self.app.state
        if url.path == "/api/v1/verifyauth":
            ok = st.authorized(self.headers, query)
            if not ok:
                time.sleep(st.auth_delay(self.client_address[0]))
            self.reply(200, {"status": 200, "message": {
                "canRead": ok, "canWrite": ok, "isAdmin": ok, "message": "OK" if ok else "UNAUTHORIZED",
                "rolefound": "FOUND" if ok else "NOTFOUND", "permissions": "ROLE" if ok else "DEFAULT"}})
            return
        if url.path in ("/api/v1/status.json", "/api/v1/status"):
            enable = ["careportal"] if st.careportal else []
            self.reply(200, {"status": "ok", "name": "nightscout", "version": "15.0.7-fake",
                             "serverTimeEpoch": int(time.time() * 1000), "apiEnabled": True,
                             "careportalEnabled": st.careportal, "settings": {"enable": enable}})
            return
        if url.path in ("/api/v1/treatments", "/api/v1/treatments.json") and st.careportal:
            if not st.authorized(self.headers, query):
                self.unauthorized()
                return
            with st.lock:
                docs = sorted((st.treatments[k] for k in st.treatment_order), key=lambda d: d["created_at"], reverse=True)
            count = int(query.get("count", ["10"])[0])
            self.reply(200, docs[:count])
            return
        if v3.handle_get(self):
            return
        self.reply(404, {"status": 404, "message": "Not found"})

    def do_POST(self):
        if self.control():
            return
        url = urllib.parse.urlsplit(self.path)
        if url.path.startswith("/api/v3/"):
            v3.handle_post(self, self.body())
            return
        st = self.app.state
        if url.path == "/api/v1/devicestatus":
            self.post_devicestatus(url)
            return
        treatments = url.path in ("/api/v1/treatments", "/api/v1/treatments.json")
        if treatments and not st.careportal:
            # The route is mounted only with ENABLE=careportal.
            self.reply(404, {"status": 404, "message": "Not found"})
            return
        if not treatments and url.path not in ("/api/v1/entries", "/api/v1/entries.json"):
            self.reply(404, {"status": 404, "message": "Not found"})
            return
        raw = self.body()
        if not st.authorized(self.headers, urllib.parse.parse_qs(url.query)):
            self.unauthorized()
            return
        # A client that gave up on an earlier request closed it before sending this one: settle those first,
        # so in_flight counts requests the client still waits for, not server threads still busy.
        with st.lock:
            others = list(st.active)
        for other in others:
            if other.client_gone():
                other.leave()
        with st.lock:
            st.in_flight += 1
            st.stats["max_in_flight"] = max(st.stats["max_in_flight"], st.in_flight)
            st.stats["uploads"] += 1
            st.active.add(self)
            self.counted = True
        try:
            self.upload(raw, "treatments" if treatments else "entries")
        finally:
            self.leave()

    def post_devicestatus(self, url):
        st = self.app.state
        raw = self.body()
        if not st.authorized(self.headers, urllib.parse.parse_qs(url.query)):
            self.unauthorized()
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self.reply(400, {"status": 400, "message": "bad JSON"})
            return
        docs = body if isinstance(body, list) else [body]
        if not all(isinstance(d, dict) for d in docs):
            self.reply(400, {"status": 400, "message": "expected objects"})
            return
        stored = []
        with st.lock:
            for doc in docs:
                doc = dict(doc)
                doc.setdefault("created_at", time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime()))
                doc["_id"] = "%024x" % st.next_id
                st.next_id += 1
                st.devicestatus.append(doc)
                stored.append(doc)
        self.reply(200, stored)

    def leave(self):
        """This request stops counting as in flight: answered, dropped, or abandoned by the client."""
        with self.app.state.lock:
            if getattr(self, "counted", False):
                self.counted = False
                self.app.state.in_flight -= 1
                self.app.state.active.discard(self)

    def client_gone(self):
        try:
            readable, _, _ = select.select([self.connection], [], [], 0)
            return bool(readable) and self.connection.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True

    def wait(self, seconds, until=None):
        """Sleeps in small steps; a client that gives up stops counting as in flight (the server goes on,
        as a real one would, so a slow answer still commits after the client's timeout)."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if until is not None and until():
                return
            if self.client_gone():
                self.leave()
            time.sleep(0.01)

    def drop(self):
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.close_connection = True

    def upload(self, raw, collection):
        st = self.app.state
        fault = st.take_fault(collection)
        mode = fault.get("mode", "ok")
        if mode == "hang":
            self.wait(fault.get("hang_s", 30), until=lambda: st.mode.get("mode") != "hang" and "times" not in fault)
            self.drop()
            return
        if mode == "slow":
            self.wait(fault.get("delay_ms", 500) / 1000)
        if mode == "huge":
            self.stream_filler(int(fault.get("size", 100 * 1000 * 1000)))
            return
        if mode == "error_body":
            text = str(fault.get("body", "")).replace("{hash}", hashlib.sha1(st.secret.encode()).hexdigest())
            text = text.replace("{secret}", st.secret)
            data = text.encode()
            self.send_response(int(fault.get("status", 500)))
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        if mode == "status":
            headers = {"Retry-After": fault["retry_after"]} if "retry_after" in fault else None
            self.reply(int(fault.get("status", 500)), {"status": int(fault.get("status", 500)), "message": "injected"}, headers)
            return
        try:
            body = json.loads(raw)
        except ValueError:
            self.reply(400, {"status": 400, "message": "Bad JSON"})
            return
        if isinstance(body, dict):
            body = [body] if "date" in body or collection == "treatments" else []
        if not isinstance(body, list) or mode == "empty":
            self.reply(200, [])
            return
        kind = fault.get("answer") if mode == "answer" else None
        if kind == "non_entries":
            junk = ["error: not stored", 0, None, {}]
            self.reply(200, [junk[i % len(junk)] for i in range(len(body))])
            return
        if kind == "foreign":
            self.reply(200, [dict(d, identifier="f" + str(d.get("identifier")), date=d.get("date", 0) + 1, _id="%024x" % (i + 1))
                             for i, d in enumerate(body) if isinstance(d, dict)])
            return
        with st.lock:
            st.stats["elements_received"] += len(body)
            if any(isinstance(d, dict) and d.get("identifier") in st.poison for d in body):
                bad = True
            else:
                bad = False
        if bad:
            self.reply(400, {"status": 400, "message": "Bad Request", "description": "poison element"})
            return
        if collection == "treatments":
            answer = self.store_treatments(body)
            if mode == "commit_drop":
                self.drop()
                return
            if kind == "fewer":
                answer = answer[:-1]
            elif kind == "no_identifier":
                answer = [{k: v for k, v in d.items() if k != "identifier"} for d in answer]
            self.reply(200, answer)
            return
        answer = []
        with st.lock:
            for doc in body:
                if not isinstance(doc, dict):
                    continue
                doc = dict(doc)
                sys_time, offset = parse_sys_time(doc)
                doc["sysTime"] = sys_time
                doc["utcOffset"] = offset
                if "dateString" in doc:
                    doc["dateString"] = sys_time
                key = (sys_time, doc.get("type"))
                out = dict(doc)
                if key in st.docs:
                    stored = st.docs[key]
                    doc["_id"] = stored["_id"]
                    st.docs[key] = doc
                    st.stats["updated"] += 1
                else:
                    doc["_id"] = "%024x" % st.next_id
                    st.next_id += 1
                    st.docs[key] = doc
                    st.order.append(key)
                    st.stats["inserted"] += 1
                    out["_id"] = doc["_id"]
                answer.append(out)
        if mode == "commit_drop":
            self.drop()
            return
        if kind == "fewer":
            answer = answer[:-1]
        elif kind == "no_identifier":
            answer = [{k: v for k, v in d.items() if k != "identifier"} for d in answer]
        self.reply(200, answer)

    def store_treatments(self, body):
        """Upserts one document after the other: on {created_at, eventType} (15.0.6), or on `identifier`
        first (15.0.7)."""
        st = self.app.state
        answer = []
        with st.lock:
            st.stats["treatments_received"] = st.stats.get("treatments_received", 0) + len(body)
            for doc in body:
                if not isinstance(doc, dict):
                    continue
                doc = prepare_treatment(dict(doc))
                key = (doc["created_at"], doc.get("eventType"))
                if st.treatments_dedupe == "15.0.7" and doc.get("identifier") is not None:
                    same = [k for k, d in st.treatments.items() if d.get("identifier") == doc["identifier"]]
                    if same:
                        key = same[0]
                out = dict(doc)
                if key in st.treatments:
                    doc["_id"] = st.treatments[key]["_id"]
                    st.treatments[key] = doc
                    st.stats["treatments_updated"] = st.stats.get("treatments_updated", 0) + 1
                else:
                    doc["_id"] = "%024x" % st.next_id
                    st.next_id += 1
                    st.treatments[key] = doc
                    st.treatment_order.append(key)
                    st.stats["treatments_inserted"] = st.stats.get("treatments_inserted", 0) + 1
                    out["_id"] = doc["_id"]
                answer.append(out)
        return answer

    def stream_filler(self, size):
        """A 200 whose body is `size` bytes of one JSON array, written in 64 KiB pieces."""
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(size))
        self.end_headers()
        piece = b"0," * 32768
        try:
            self.wfile.write(b"[")
            left = size - 2
            while left > 0:
                chunk = piece[:left]
                self.wfile.write(chunk)
                left -= len(chunk)
            self.wfile.write(b"]")
        except OSError:
            pass  # the client stopped reading: what a capped client does


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--control-port", type=int, default=0)
    parser.add_argument("--health-port", type=int, default=0)
    parser.add_argument("--secret", default="correct-horse-battery")
    parser.add_argument("--token", default=None)
    parser.add_argument("--delay-401", type=float, default=5.0, help="seconds per recent failed authentication")
    v3.add_arguments(parser)
    parser.add_argument("--no-careportal", action="store_true", help="start with careportal disabled")
    args = parser.parse_args()
    state = State(args.secret, args.token, args.delay_401, careportal=not args.no_careportal)
    state.v3 = v3.V3State(args)
    servers = Servers(state, args.host, args.port, args.control_port, args.health_port)
    print(json.dumps({"port": servers.api_port, "control_port": servers.control.server_address[1],
                      "health_port": servers.health_port}), flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    while not stop.wait(0.5):
        pass
    servers.close_api()
    sys.exit(0)


if __name__ == "__main__":
    main()
