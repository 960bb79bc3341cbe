"""The simulator's JSON meter format, read for the Bumble meter, and the Glucose Profile encodings it needs.

The Bumble meter takes the same meter files as `glucose-gateway-simulator --meter FILE`: a meter written out in full
(what the simulator's `Describe` gives, see guest/describe_meter.py, which also resolves a built-in
`"profile"`), or a file in the same format written by hand. Keys this meter cannot play are refused with
one line naming the key, as the simulator refuses unknown keys: a misspelt or unsupported fault never
silently does nothing.
"""
import datetime
import json
import re

METER_KEYS = {
    "address", "addressType", "name", "pin", "bonding", "rssi", "deviceInformation", "features",
    "contextCharacteristic", "timeFilter", "unit", "records", "generate", "newRecords", "advertising", "faults",
    "clock", "profile", "quirks", "pairing",
}
# The "pairing" key: how the meter pairs, named as the simulator names it.
PAIRING_METHODS = {"passkey-entry": "sc-passkey", "legacy-passkey-entry": "legacy-passkey",
                   "just-works": "just-works", "numeric-comparison": "numeric-comparison"}
PAIRING_ANSWERS = {"completes": None, "cancels": "cancel", "never-answers": "silent"}
# Keys of the format this meter does not play (yet): the simulator resolves them before a run
# (describe_meter.py turns "profile" and "generate" into records).
UNPLAYED = {"generate", "newRecords", "profile"}
RECORD_KEYS = {"sequence", "time", "timeOffset", "mgdl", "mmol", "sfloat", "result", "unit", "type", "location",
               "control", "status", "context", "hex"}
FAULT_KEYS = {"dropLinkAfter", "dropLinkTimes", "failProcedureAfter", "notificationDelayMs", "contextOrder",
              "malformed", "zeroCountAsNoRecords"}


class MeterFileError(Exception):
    pass


class Meter:
    """One meter: identity, PIN, GATT options, records (already encoded), advertising, faults, clock."""

    def __init__(self):
        self.address = "C0:26:DA:01:02:03"
        self.address_type = "public"
        self.name = "meter"
        self.pin = 123456
        self.bonding = True
        self.info = {}
        self.features = 0x0020 | 0x0400
        self.context_characteristic = True
        self.time_filter = True
        self.records = []  # (sequence, user-facing datetime, measurement bytes, context bytes or None)
        self.advertising = ("always", 0.0, 0.0)
        self.drop_link_after = None
        self.drop_link_times = 1
        self.fail_procedure_after = None
        self.notification_delay = 0.0
        self.context_before = False
        self.zero_count_as_no_records = False
        self.clock_kind = "none"
        self.clock_writable = True
        self.clock_skew = 0.0
        self.clock_utc_offset = 0
        self.newest_first = False
        self.pairing = None  # (method, starts pairing, fault) when the file says


def _only(obj, keys, where):
    if not isinstance(obj, dict):
        raise MeterFileError(f"{where or 'the meter'}: must be an object")
    for k in obj:
        if k not in keys:
            raise MeterFileError(f"{where + '.' if where else ''}{k}: unknown key")


def load(path):
    try:
        with open(path) as f:
            o = json.load(f)
    except (OSError, ValueError) as e:
        raise MeterFileError(f"{path}: {e}")
    return parse(o)


def parse(o):
    _only(o, METER_KEYS, "")
    for k in UNPLAYED:
        if k in o:
            raise MeterFileError(f"{k}: resolve it with the simulator first (guest/describe_meter.py)")
    m = Meter()
    address = o.get("address", m.address)
    if re.fullmatch(r"([0-9A-Fa-f]{2}:){5}[0-9A-Fa-f]{2}", address or ""):
        m.address = address.upper()
    m.address_type = o.get("addressType", "public")
    if m.address_type not in ("public", "random"):
        raise MeterFileError('addressType: must be "public" or "random"')
    m.name = str(o.get("name", m.name))
    pin = str(o.get("pin", "123456"))
    if not re.fullmatch(r"[0-9]{6}", pin):
        raise MeterFileError("pin: must be six digits")
    m.pin = int(pin)
    m.bonding = bool(o.get("bonding", True))
    info = o.get("deviceInformation", {})
    _only(info, {"manufacturer", "model", "serial", "firmware", "software"}, "deviceInformation")
    m.info = {k: str(v) for k, v in info.items()}
    if "features" in o:
        f = o["features"]
        if not isinstance(f, int) or not 0 <= f <= 0xFFFF:
            raise MeterFileError("features: must be a 16-bit number")
        m.features = f
    m.context_characteristic = bool(o.get("contextCharacteristic", True))
    m.time_filter = bool(o.get("timeFilter", True))
    unit = o.get("unit", "kg/L")
    quirks = o.get("quirks", {})
    _only(quirks, {"numbering", "racpWithoutIndications"}, "quirks")
    m.newest_first = quirks.get("numbering") == "newest-first"
    seen = set()
    for i, r in enumerate(o.get("records", [])):
        rec = record(r, f"records[{i}]", unit)
        if rec[0] in seen:
            raise MeterFileError(f"records: sequence number {rec[0]} appears twice")
        seen.add(rec[0])
        m.records.append(rec)
    adv = o.get("advertising", "always")
    if adv in ("always", "off"):
        m.advertising = (adv, 0.0, 0.0)
    elif isinstance(adv, dict):
        _only(adv, {"onSeconds", "offSeconds"}, "advertising")
        m.advertising = ("bursts", float(adv["onSeconds"]), float(adv["offSeconds"]))
    else:
        raise MeterFileError('advertising: "always", "off" or {"onSeconds": S, "offSeconds": S}')
    faults = o.get("faults", {})
    _only(faults, FAULT_KEYS, "faults")
    m.drop_link_after = faults.get("dropLinkAfter")
    m.drop_link_times = faults.get("dropLinkTimes", 1)
    m.fail_procedure_after = faults.get("failProcedureAfter")
    m.notification_delay = float(faults.get("notificationDelayMs", 0)) / 1000
    m.context_before = faults.get("contextOrder", "after") == "before"
    m.zero_count_as_no_records = bool(faults.get("zeroCountAsNoRecords", False))
    if faults.get("malformed"):
        raise MeterFileError("faults.malformed: not played by the Bumble meter")
    if "pairing" in o:
        p = o["pairing"]
        if isinstance(p, str):
            p = {"method": p}
        _only(p, {"method", "startsPairing", "answer"}, "pairing")
        method = PAIRING_METHODS.get(p.get("method", "passkey-entry"))
        if method is None or p.get("answer", "completes") not in PAIRING_ANSWERS:
            raise MeterFileError(f"pairing: method one of {', '.join(PAIRING_METHODS)}, answer one of {', '.join(PAIRING_ANSWERS)}")
        m.pairing = (method, bool(p.get("startsPairing", False)), PAIRING_ANSWERS[p.get("answer", "completes")])
    clock = o.get("clock", {"kind": "none"})
    _only(clock, {"kind", "writable", "skewSeconds", "utcOffsetMinutes", "driftSecondsPerDay"}, "clock")
    m.clock_kind = clock.get("kind", "none")
    if m.clock_kind not in ("cts", "gls-date-time", "none"):
        raise MeterFileError(f'clock.kind: "{m.clock_kind}" is not played by the Bumble meter (cts, gls-date-time, none)')
    m.clock_writable = bool(clock.get("writable", True))
    m.clock_skew = float(clock.get("skewSeconds", 0))
    m.clock_utc_offset = int(clock.get("utcOffsetMinutes", 0))
    return m


# --- encodings ---------------------------------------------------------------------------------------------

def sfloat(mantissa, exponent):
    """The 16-bit IEEE 11073 SFLOAT of mantissa x 10^exponent (4-bit exponent, 12-bit mantissa)."""
    return ((exponent & 0x0F) << 12) | (mantissa & 0x0FFF)


SFLOAT_PLUS_INFINITY = 0x07FE
SFLOAT_MINUS_INFINITY = 0x0802


def encode_value(value, base_exponent, rounding_digits=2):
    """value (in the everyday unit, one step = 10^base_exponent SI) as an exact SFLOAT, finest exponent first."""
    rounded = round(value * 10 ** rounding_digits) / 10 ** rounding_digits
    for decimals in range(rounding_digits, -4, -1):
        m = round(rounded * 10 ** decimals)
        if abs(m) > 2045:
            continue
        if decimals > 0 and abs(m / 10 ** decimals - rounded) > 1e-9:
            continue
        e = base_exponent - decimals
        if not -8 <= e <= 7:
            continue
        while e < base_exponent and m % 10 == 0 and m != 0:
            m //= 10
            e += 1
        return sfloat(int(m), e)
    raise MeterFileError(f"{value} cannot be sent as an SFLOAT")


def parse_time(text, where):
    m = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2}))?", str(text))
    if not m:
        raise MeterFileError(f"{where}: must be a date-time like 2024-03-05T14:30:00")
    return tuple(int(x or 0) for x in m.groups())


def date_time_bytes(t):
    y, mo, d, h, mi, s = t
    return bytes([y & 0xFF, y >> 8, mo, d, h, mi, s])


def record(r, where, default_unit):
    _only(r, RECORD_KEYS, where)
    seq = r.get("sequence")
    if not isinstance(seq, int) or not 0 <= seq <= 0xFFFF:
        raise MeterFileError(f"{where}.sequence: must be 0-65535")
    t = parse_time(r.get("time"), f"{where}.time")
    offset = r.get("timeOffset")
    unit = r.get("unit", default_unit)
    mol = unit == "mol/L"
    status = r.get("status")
    value = None
    if "mgdl" in r:
        v = float(r["mgdl"])
        value = encode_value(v / 18.0156, -3, 1) if mol else encode_value(v, -5)
    elif "mmol" in r:
        v = float(r["mmol"])
        value = encode_value(v, -3) if mol else encode_value(v * 18.0156, -5, 0)
    elif "sfloat" in r:
        value = int(str(r["sfloat"]), 16)
    elif r.get("result") == "high":
        value, status = SFLOAT_PLUS_INFINITY, (status or 0) | 0x0020
    elif r.get("result") == "low":
        value, status = SFLOAT_MINUS_INFINITY, (status or 0) | 0x0040
    elif r.get("result") != "none":
        raise MeterFileError(f"{where}: one of mgdl, mmol, sfloat or result is required")
    context = r.get("context")
    ctx = context_bytes(context, seq, f"{where}.context") if context is not None else None
    if "hex" in r:
        measurement = bytes.fromhex(str(r["hex"]).replace(" ", ""))
    else:
        flags = (0x01 if offset is not None else 0) | (0x02 if value is not None else 0) | (0x04 if mol else 0) \
            | (0x08 if status is not None else 0) | (0x10 if ctx is not None else 0)
        measurement = bytes([flags, seq & 0xFF, seq >> 8]) + date_time_bytes(t)
        if offset is not None:
            measurement += (int(offset) & 0xFFFF).to_bytes(2, "little")
        if value is not None:
            measurement += value.to_bytes(2, "little")
            measurement += bytes([(int(r.get("type", 1)) & 0x0F) | ((int(r.get("location", 1)) & 0x0F) << 4)])
        if status is not None:
            measurement += int(status).to_bytes(2, "little")
    try:
        user_time = datetime.datetime(*t) + datetime.timedelta(minutes=int(offset or 0))
    except ValueError:
        raise MeterFileError(f"{where}.time: is not a valid date-time")
    return (seq, user_time, measurement, ctx)


CONTEXT_KEYS = {"meal", "tester", "health", "extendedFlags", "carbohydrateID", "carbohydrateGrams",
                "exerciseSeconds", "exerciseIntensity", "medicationID", "medicationMilligrams",
                "medicationMillilitres", "hba1c"}


def context_bytes(c, seq, where):
    """A Glucose Measurement Context (0x2A34) for record `seq`."""
    _only(c, CONTEXT_KEYS, where)
    flags = 0
    body = b""
    if "extendedFlags" in c:
        flags |= 0x80
        body += bytes([int(c["extendedFlags"]) & 0xFF])
    if "carbohydrateGrams" in c:
        flags |= 0x01
        body += bytes([int(c.get("carbohydrateID", 1))]) + encode_value(float(c["carbohydrateGrams"]), -3).to_bytes(2, "little")
    if "meal" in c:
        flags |= 0x02
        body += bytes([int(c["meal"])])
    if "tester" in c or "health" in c:
        flags |= 0x04
        body += bytes([(int(c.get("tester", 15)) & 0x0F) | ((int(c.get("health", 15)) & 0x0F) << 4)])
    if "exerciseSeconds" in c:
        flags |= 0x08
        body += int(c["exerciseSeconds"]).to_bytes(2, "little") + bytes([int(c.get("exerciseIntensity", 0))])
    if "medicationMilligrams" in c:
        flags |= 0x10
        body += bytes([int(c.get("medicationID", 1))]) + encode_value(float(c["medicationMilligrams"]), -6).to_bytes(2, "little")
    elif "medicationMillilitres" in c:
        flags |= 0x10 | 0x20
        body += bytes([int(c.get("medicationID", 1))]) + encode_value(float(c["medicationMillilitres"]), -3).to_bytes(2, "little")
    if "hba1c" in c:
        flags |= 0x40
        body += encode_value(float(c["hba1c"]), 0, 1).to_bytes(2, "little")
    return bytes([flags, seq & 0xFF, seq >> 8]) + body

