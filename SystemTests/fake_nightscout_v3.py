"""Nightscout API v3 and the v2 token exchange for fake_nightscout.py (standard library only).

What it reproduces (cgm-remote-monitor 15.0.x lib/authorization, lib/api3):
  * GET /api/v2/authorization/request/<access token>: 200 {"token": JWT, "sub", "permissionGroups", "iat", "exp"}
    for a known token (no delay), else 401 {"status": 401, "message": "Unauthorized", "description": "Invalid/Missing"}.
    JWTs live --jwt-lifetime seconds (Nightscout: 8 h).
  * Every /api/v3 request needs `Authorization: Bearer <JWT>`: none gives 401 "Missing or bad access token or
    JWT"; an unknown or expired JWT gives 401 "Bad access token or JWT" after the failed-authentication delay.
  * POST /api/v3/{entries,treatments}: one document; `date` from `date` or `created_at`, `utcOffset` from the
    latter's offset when missing, `created_at` rewritten in UTC (the server's parseDate). Looked up by `identifier`; when found the server demands
    api:<col>:update (403 "Missing permission api:<col>:update"), checks the immutable fields (400 "Field X cannot
    be modified by the client") and answers 200 {"status", "identifier", "isDeduplication": true, "lastModified"};
    when not found it demands api:<col>:create (403), validates identifier, date, utcOffset and app (400) and
    answers 201 {"status", "identifier", "lastModified"}.
  * GET /api/v3/status: {"status": 200, "result": {"version", "apiVersion", "srvDate", "apiPermissions":
    {"entries": "crud", ...}}}, letters only for the permissions the JWT's subject has.
  The upload faults of the control channel (status, commit_drop, hang, slow) apply to v3 POSTs too.

Access tokens: --access-token TOKEN=PERMISSION,PERMISSION (repeatable), permissions in Nightscout's
shiro form (`api:entries:create`, `*:*:read`, `*`). Control: {"expire_jwts": true} makes every JWT issued so far
invalid (as if expired); {"expire_jwts_after": N} does that once N more documents have been posted;
{"jwt_lifetime": s} changes the lifetime of new ones; {"access_tokens": {TOKEN: [perms]}}.
GET /__v3 -> {"entries": [...], "treatments": [...], "devicestatus": [...], "exchanges": N, "jwt_refused": N, "posts": N}.
"""
import datetime
import json
import secrets
import threading
import time
import urllib.parse

API3_VERSION = "3.0.3-alpha"
MIN_TIMESTAMP = 946684800000
IMMUTABLE = ["identifier", "date", "utcOffset", "eventType", "device", "app", "srvCreated", "subject", "srvModified",
             "modifiedBy", "isValid"]
COLLECTIONS = ["devicestatus", "entries", "food", "profile", "settings", "treatments"]


def add_arguments(parser):
    parser.add_argument("--access-token", action="append", default=[], metavar="TOKEN=PERMS",
                        help="an access token and its permissions, comma-separated")
    parser.add_argument("--jwt-lifetime", type=float, default=8 * 3600.0)


def permitted(granted, permission):
    """Shiro-style check: each `:`-part matches literally or by `*`; a shorter grant covers the rest."""
    want = permission.split(":")
    for g in granted:
        parts = g.split(":")
        if len(parts) > len(want):
            continue
        if all(p == "*" or p == w for p, w in zip(parts, want)) and (len(parts) == len(want) or parts[-1] == "*"):
            return True
    return False


class V3State:
    def __init__(self, args):
        self.lock = threading.Lock()
        self.tokens = {}
        for spec in args.access_token:
            name, _, perms = spec.partition("=")
            self.tokens[name] = [p for p in perms.split(",") if p]
        self.jwt_lifetime = args.jwt_lifetime
        self.jwts = {}   # jwt -> (token, expires at, monotonic)
        self.docs = {c: {} for c in COLLECTIONS}
        self.order = {c: [] for c in COLLECTIONS}
        self.stats = {"exchanges": 0, "jwt_refused": 0, "posts": 0}
        self.expire_after = None

    def control(self, req):
        with self.lock:
            if req.get("expire_jwts"):
                self.jwts.clear()
            if "expire_jwts_after" in req:
                self.expire_after = int(req["expire_jwts_after"])
            if "jwt_lifetime" in req:
                self.jwt_lifetime = float(req["jwt_lifetime"])
            if "access_tokens" in req:
                self.tokens = {k: list(v) for k, v in req["access_tokens"].items()}

    def snapshot(self):
        with self.lock:
            out = {c: [self.docs[c][i] for i in self.order[c]] for c in ("entries", "treatments", "devicestatus")}
            out.update(self.stats)
            return out

    def reset(self):
        with self.lock:
            self.docs = {c: {} for c in COLLECTIONS}
            self.order = {c: [] for c in COLLECTIONS}
            self.stats = {"exchanges": 0, "jwt_refused": 0, "posts": 0}


def handle_control(handler, path, req=None):
    """The v3 part of the control channel; True when it answered."""
    v3 = handler.app.state.v3
    if req is not None:
        v3.control(req)
        return False   # the main control handler answers
    if handler.command == "GET" and path == "/__v3":
        handler.reply(200, v3.snapshot())
        return True
    return False


def subject_of(handler):
    """The permissions of the request's JWT, or None after answering 401."""
    st = handler.app.state
    v3 = st.v3
    header = handler.headers.get("Authorization") or ""
    parts = header.split(" ")
    if len(parts) != 2 or parts[0].lower() != "bearer":
        handler.reply(401, {"status": 401, "message": "Missing or bad access token or JWT"})
        return None
    with v3.lock:
        entry = v3.jwts.get(parts[1])
        valid = entry is not None and entry[1] > time.monotonic() and entry[0] in v3.tokens
        perms = list(v3.tokens.get(entry[0], [])) if valid else None
        if not valid:
            v3.stats["jwt_refused"] += 1
    if perms is None:
        time.sleep(st.auth_delay(handler.client_address[0]))
        handler.reply(401, {"status": 401, "message": "Bad access token or JWT"})
        return None
    return perms


def handle_get(handler):
    url = urllib.parse.urlsplit(handler.path)
    v3 = handler.app.state.v3
    prefix = "/api/v2/authorization/request/"
    if url.path.startswith(prefix):
        token = urllib.parse.unquote(url.path[len(prefix):])
        with v3.lock:
            perms = v3.tokens.get(token)
            if perms is not None:
                jwt = "eyJ" + secrets.token_hex(24)
                iat = int(time.time())
                v3.jwts[jwt] = (token, time.monotonic() + v3.jwt_lifetime)
                v3.stats["exchanges"] += 1
                lifetime = v3.jwt_lifetime
        if perms is None:
            handler.reply(401, {"status": 401, "message": "Unauthorized", "description": "Invalid/Missing"})
        else:
            handler.reply(200, {"token": jwt, "sub": token.split("-")[0], "permissionGroups": [perms],
                                "iat": iat, "exp": iat + max(1, int(lifetime))})
        return True
    if url.path == "/api/v3/status":
        perms = subject_of(handler)
        if perms is None:
            return True
        granted = {}
        for col in COLLECTIONS:
            letters = "".join(l for l, op in (("c", "create"), ("r", "read"), ("u", "update"), ("d", "delete"))
                              if permitted(perms, "api:%s:%s" % (col, op)))
            if letters:
                granted[col] = letters
        handler.reply(200, {"status": 200, "result": {"version": "15.0.7-fake", "apiVersion": API3_VERSION,
                                                      "srvDate": int(time.time() * 1000),
                                                      "storage": {"storage": "fake"}, "apiPermissions": granted}})
        return True
    return False


def parse_date(doc):
    """The server's parseDate: `date` (ms) or else `created_at` (ISO 8601) gives `date`; `utcOffset` comes from the
    parsed offset when the document has none; `created_at` is rewritten in UTC."""
    value = doc.get("date")
    moment = None
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        moment = datetime.datetime.fromtimestamp(value / 1000, tz=datetime.timezone.utc)
    elif isinstance(doc.get("created_at"), str):
        try:
            moment = datetime.datetime.fromisoformat(doc["created_at"].replace("Z", "+00:00"))
        except ValueError:
            moment = None
        if moment is not None and moment.tzinfo is None:
            moment = moment.replace(tzinfo=datetime.timezone.utc)
    if moment is None:
        return
    doc["date"] = int(moment.timestamp() * 1000)
    if "utcOffset" not in doc:
        doc["utcOffset"] = int(moment.utcoffset().total_seconds() // 60)
    utc = moment.astimezone(datetime.timezone.utc)
    doc["created_at"] = utc.strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (utc.microsecond // 1000)


def validate_common(doc):
    if not isinstance(doc.get("date"), (int, float)) or isinstance(doc.get("date"), bool) or doc["date"] <= MIN_TIMESTAMP:
        return "Bad or missing date field"
    off = doc.get("utcOffset")
    if not isinstance(off, (int, float)) or isinstance(off, bool) or off < -1440 or off > 1440:
        return "Bad or missing utcOffset field"
    if not isinstance(doc.get("app"), str) or not doc["app"].strip():
        return "Bad or missing app field"
    return None


def handle_post(handler, raw):
    url = urllib.parse.urlsplit(handler.path)
    if not url.path.startswith("/api/v3/"):
        return False
    col = url.path[len("/api/v3/"):].strip("/")
    st = handler.app.state
    v3 = st.v3
    if col not in COLLECTIONS:
        handler.reply(404, {"status": 404, "message": "Bad operation or collection"})
        return True
    perms = subject_of(handler)
    if perms is None:
        return True
    with st.lock:
        st.stats["uploads"] += 1
    with v3.lock:
        v3.stats["posts"] += 1
        if v3.expire_after is not None:
            v3.expire_after -= 1
            if v3.expire_after <= 0:
                v3.expire_after = None
                v3.jwts.clear()
    fault = st.take_fault()
    mode = fault.get("mode", "ok")
    if mode == "hang":
        handler.wait(fault.get("hang_s", 30), until=lambda: st.mode.get("mode") != "hang" and "times" not in fault)
        handler.drop()
        return True
    if mode == "slow":
        handler.wait(fault.get("delay_ms", 500) / 1000)
    if mode == "status":
        headers = {"Retry-After": fault["retry_after"]} if "retry_after" in fault else None
        handler.reply(int(fault.get("status", 500)), {"status": int(fault.get("status", 500)), "message": "injected"}, headers)
        return True
    try:
        doc = json.loads(raw)
    except ValueError:
        handler.reply(400, {"status": 400, "message": "Bad or missing request body"})
        return True
    if not isinstance(doc, dict) or not doc:
        handler.reply(400, {"status": 400, "message": "Bad or missing request body"})
        return True
    parse_date(doc)
    identifier = doc.get("identifier")
    with v3.lock:
        stored = v3.docs[col].get(identifier) if isinstance(identifier, str) else None
    now = int(time.time() * 1000)
    if stored is not None:
        if not permitted(perms, "api:%s:update" % col):
            handler.reply(403, {"status": 403, "message": "Missing permission api:%s:update" % col})
            return True
        for field in IMMUTABLE:
            if field == "identifier":
                continue
            if field in doc and doc[field] != stored.get(field) and stored.get("isValid") is not False:
                handler.reply(400, {"status": 400, "message": "Field %s cannot be modified by the client" % field})
                return True
        problem = validate_common(doc)
        if problem:
            handler.reply(400, {"status": 400, "message": problem})
            return True
        with v3.lock:
            v3.docs[col][identifier] = dict(doc, srvModified=now, srvCreated=stored.get("srvCreated", now))
        answer = (200, {"status": 200, "identifier": identifier, "isDeduplication": True, "lastModified": now})
    else:
        if not permitted(perms, "api:%s:create" % col):
            handler.reply(403, {"status": 403, "message": "Missing permission api:%s:create" % col})
            return True
        if not isinstance(identifier, str) or not identifier.strip():
            handler.reply(400, {"status": 400, "message": "Bad or missing identifier field"})
            return True
        problem = validate_common(doc)
        if problem:
            handler.reply(400, {"status": 400, "message": problem})
            return True
        with st.lock:
            poisoned = identifier in st.poison
        if poisoned:
            handler.reply(400, {"status": 400, "message": "poison document"})
            return True
        with v3.lock:
            v3.docs[col][identifier] = dict(doc, srvModified=now, srvCreated=now)
            v3.order[col].append(identifier)
        answer = (201, {"status": 201, "identifier": identifier, "lastModified": now})
    if mode == "commit_drop":
        handler.drop()
        return True
    handler.reply(*answer)
    return True
