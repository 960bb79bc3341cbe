"""What the gateway must make of a simulated meter's records, worked out from the meter's own record list
(the stand-in's control interface `Describe`, a meter file) by the rules docs/uploads.md states, not by the
gateway's code: the user-facing time (base time + offset) read in the meter's zone and stored in UTC, less
the measured clock skew when it exceeds the threshold; the value as recorded; and the reason a reading is
kept out of the upload. A record the rules here do not cover fails the test loudly instead of being guessed.
"""
import datetime
from zoneinfo import ZoneInfo

# Sensor status bits 1-10: a measurement fault (battery low and time fault alone exclude nothing).
MEASUREMENT_FAULTS = 0x07FE
KETONE_MEAL = 6


class Unsupported(AssertionError):
    """The meter has a record these expectations do not know how to judge."""


def parse_local(text):
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S")


def iso_utc(instant):
    return instant.strftime("%Y-%m-%dT%H:%M:%SZ")


def to_utc(local, zone):
    """A wall-clock time of `zone` as UTC; refuses a time the zone skips or repeats (its rule is the
    gateway's own choice, tested elsewhere)."""
    tz = ZoneInfo(zone)
    first = local.replace(tzinfo=tz, fold=0)
    second = local.replace(tzinfo=tz, fold=1)
    if first.utcoffset() != second.utcoffset():
        raise Unsupported("%s is repeated or skipped in %s" % (local, zone))
    back = first.astimezone(datetime.timezone.utc).astimezone(tz).replace(tzinfo=None)
    if back != local:
        raise Unsupported("%s does not exist in %s" % (local, zone))
    return first.astimezone(datetime.timezone.utc).replace(tzinfo=None)


def simulated_skew(meter, zone, now=None):
    """The skew the gateway must measure, in seconds: the meter's clock minus the true time. The meter
    shows the local time of a fixed UTC offset (it does not follow DST) and the gateway reads it in the
    meter's zone, so the offset's difference to the zone's offset now adds to the clock's own skew. None
    for a meter without a clock a central can read."""
    clock = meter.get("clock", {"kind": "none"})
    if clock["kind"] == "none":
        return None
    now = now or datetime.datetime.now(datetime.timezone.utc)
    zone_offset = now.astimezone(ZoneInfo(zone)).utcoffset().total_seconds()
    return clock["skewSeconds"] + clock["utcOffsetMinutes"] * 60 - zone_offset


def check_clock(meter, zone, listed, threshold=120):
    """Compares `meters --json` (the meter's entry) with the simulated clock. Returns (problems, the
    correction the gateway must have applied to reading times)."""
    skew = simulated_skew(meter, zone)
    if skew is None:
        if "clock_skew_seconds" in listed:
            return ["clock_skew_seconds %r for a meter without a readable clock" % listed["clock_skew_seconds"]], 0
        return [], 0
    measured = listed.get("clock_skew_seconds")
    if measured is None:
        return ["no clock_skew_seconds; the meter's clock is off by %.0f s" % skew], 0
    problems = [] if abs(measured - skew) <= 2 else ["clock_skew_seconds %r, want %.0f" % (measured, skew)]
    # Reading times are corrected by the skew the gateway measured, when it is beyond the threshold.
    return problems, (measured if abs(measured) > threshold else 0)


def clock_offset(zone, listed, at):
    """F, the meter's clock read as a civil time minus UTC, in seconds: the skew `meters --json` lists (the
    clock against the zone's time when it was measured, about `at`, naive UTC) plus the zone's offset then.
    None for a meter without a readable clock."""
    skew = listed.get("clock_skew_seconds")
    if skew is None:
        return None
    return skew + at.replace(tzinfo=datetime.timezone.utc).astimezone(ZoneInfo(zone)).utcoffset().total_seconds()


def following_dst(local, zone, offset_seconds, at):
    """The instants a record shown at `local` would have had on a clock that followed the zone's DST
    switches and showed F = `offset_seconds` at `at` (naive UTC): none for a time such a clock skipped, two
    for one it showed twice."""
    tz = ZoneInfo(zone)
    now_offset = at.replace(tzinfo=datetime.timezone.utc).astimezone(tz).utcoffset().total_seconds()
    shifted = local - datetime.timedelta(seconds=offset_seconds - now_offset)
    out = set()
    for fold in (0, 1):
        t = shifted.replace(tzinfo=tz, fold=fold)
        utc = t.astimezone(datetime.timezone.utc)
        if utc.astimezone(tz).replace(tzinfo=None) == shifted:
            out.add(utc.replace(tzinfo=None))
    return out


class Expected:
    """One record as the store must hold it."""

    def __init__(self, sequence, local_time, time, meter_time, mgdl, mmoll, special, exclusion, unit, analyte):
        self.sequence = sequence
        self.local_time = local_time
        self.time = time
        self.meter_time = meter_time
        self.mgdl = mgdl
        self.mmoll = mmoll
        self.special = special
        self.exclusion = exclusion
        self.unit = unit
        self.analyte = analyte

    @property
    def uploaded(self):
        return self.exclusion is None

    def __repr__(self):
        return "Expected(%r)" % self.__dict__


def expected_readings(meter, zone, correction_seconds=0, received_at=None, future_tolerance_s=600, clock_offset_seconds=None,
                      first_sync=False, threshold=120):
    """Every record of `meter` (a meter-file dict) as an `Expected`, by sequence number.

    `correction_seconds`: the skew the gateway must subtract (0 when the meter has no readable clock or
    the skew is within the threshold). `received_at`: the gateway's clock at the download (naive UTC), for
    the time-in-future rule. `clock_offset_seconds`: F measured in that download (`clock_offset`), for a
    meter with a readable clock: a reading's time is then its local time minus F (the zone's reading of it
    where the two are within `threshold` seconds), and on the meter's `first_sync` a reading whose time a
    clock following DST would put elsewhere is time-uncertain, with no time."""
    malformed = {m["sequence"]: m.get("kind", "truncated") for m in meter.get("faults", {}).get("malformed", [])}
    fora = is_fora_tng(meter)
    out = {}
    for r in meter["records"]:
        seq = r["sequence"]
        if "hex" in r:
            raise Unsupported("record %d is sent as verbatim bytes" % seq)
        kind = malformed.get(seq)
        if kind not in (None, "invalid-time"):
            raise Unsupported("record %d is malformed (%s)" % (seq, kind))
        unit = r.get("unit", meter.get("unit", "kg/L"))
        mgdl = mmoll = special = None
        exclusion = None
        if "mgdl" in r:
            if unit != "kg/L":
                raise Unsupported("record %d: mg/dL on a mol/L meter" % seq)
            mgdl = float(r["mgdl"])
        elif "mmol" in r:
            if unit != "mol/L":
                raise Unsupported("record %d: mmol/L on a kg/L meter" % seq)
            mmoll = float(r["mmol"])
        elif r.get("result") == "high":
            special, exclusion = "+inf", "hi"
        elif r.get("result") == "low":
            special, exclusion = "-inf", "lo"
        elif r.get("result") == "none":
            exclusion = "no-concentration"
        else:
            raise Unsupported("record %d: value %r" % (seq, {k: r[k] for k in r if k in ("sfloat", "result")}))
        analyte = "glucose"
        if r.get("context", {}).get("meal") == KETONE_MEAL:
            # i-SENS: a blood ketone result in the glucose field, mmol/L = the "mg/dL" value / 10.
            if unit != "kg/L":
                raise Unsupported("record %d: a ketone result on a mol/L meter" % seq)
            analyte = "ketone"
            if mgdl is not None:
                mmoll = round_half_away(mgdl / 10 * 100) / 100
            mgdl = None
        if exclusion is None and (r.get("type") == 10 or r.get("location") == 4 or r.get("control")):
            exclusion = "control-solution"
        status = r.get("status", 0)
        if not isinstance(status, int):
            raise Unsupported("record %d: status given by name" % seq)
        if exclusion is None and status & MEASUREMENT_FAULTS:
            exclusion = "sensor-fault"
        local = parse_local(r["time"]) + datetime.timedelta(minutes=r.get("timeOffset", 0))
        time = meter_time = None
        uncertain = False
        if kind == "invalid-time":
            # Sent with month 13: the gateway keeps the base time as sent and never guesses an instant.
            if exclusion is None:
                exclusion = "time-unresolved"
            local_text = None
        else:
            local_text = local.strftime("%Y-%m-%dT%H:%M:%S")
            meter_instant = to_utc(local, zone)
            instant = meter_instant - datetime.timedelta(seconds=correction_seconds)
            if clock_offset_seconds is not None:
                placed = local - datetime.timedelta(seconds=clock_offset_seconds)
                if first_sync and following_dst(local, zone, clock_offset_seconds, received_at) | {placed} != {placed}:
                    uncertain = True
                    instant = None
                elif abs((placed - meter_instant).total_seconds()) <= threshold:
                    instant = meter_instant
                else:
                    instant = placed
            meter_time, time = iso_utc(meter_instant), instant and iso_utc(instant)
        if exclusion is None and analyte == "ketone":
            exclusion = "ketone"
        if uncertain:
            exclusion = "time-uncertain"
        # Before every other reason, as docs/uploads.md says: a future HI must not become a note ahead of time.
        if time is not None and received_at is not None and (instant - received_at).total_seconds() > future_tolerance_s:
            exclusion = "time-in-future"
        # A ForaCare TN'G adds a HI dated 2037 when its memory is full: not a measurement, its own reason
        # (no skew correction may ever release it).
        if fora and special == "+inf" and parse_local(r["time"]).year >= FORA_MARKER_YEAR:
            exclusion = "memory-full-marker"
        out[seq] = Expected(seq, local_text, time, meter_time, mgdl, mmoll, special, exclusion, unit, analyte)
    return out


def carry_over(earlier, later, by_time=False):
    """The records of `later` (a download after `earlier`), where those already downloaded keep what the
    earlier download made of them: a stored reading keeps the skew correction of its own download."""
    key = (lambda e: e.local_time) if by_time else (lambda e: e.sequence)
    before = {key(e): e for e in earlier.values()}
    return {s: before.get(key(e), e) for s, e in later.items()}


FORA_MARKER_YEAR = 2037


def is_fora_tng(meter):
    """A ForaCare TN'G as the meter table in docs/meters.md tells it: advertised name "TNG...", and no manufacturer
    string or one starting "Fora"."""
    manufacturer = meter.get("deviceInformation", {}).get("manufacturer")
    return (meter.get("name", "").upper().startswith("TNG")
            and (manufacturer is None or manufacturer.strip("\x00 ").lower().startswith("fora")))


def newest_first(meter):
    """Whether the meter numbers its records backwards (0 = newest): its numbers move with every new
    record, so the store is matched to them by time, not by sequence number."""
    return meter.get("quirks", {}).get("numbering") == "newest-first"


def compare_store(expected, readings, by_time=False):
    """Differences between the expected records and `readings --json` (one meter): each record exactly
    once, with exactly its value, times and exclusion. `by_time`: match records by their local time
    (each must be unique) instead of their sequence number."""
    bad = []
    if by_time:
        if None in [e.local_time for e in expected.values()]:
            raise Unsupported("a record without a time on a meter matched by time")
        count = len(expected)
        expected = {e.local_time: e for e in expected.values()}
        if len(expected) != count:
            raise Unsupported("two records at the same time on a meter matched by time")
    key = (lambda r: r.get("local_time")) if by_time else (lambda r: r["sequence"])
    found = {}
    for r in readings:
        k = key(r)
        if k in found:
            bad.append("record %s stored twice" % (k,))
        found[k] = r
    for k in sorted(set(found) - set(expected)):
        bad.append("record %s stored but the meter has no such record" % (k,))
    for k, e in sorted(expected.items()):
        r = found.get(k)
        if r is None:
            bad.append("record %s missing" % (k,))
            continue
        want = {"time": e.time, "meter_time": e.meter_time, "special": e.special, "exclusion": e.exclusion,
                "analyte": e.analyte}
        if e.local_time is not None:
            want["local_time"] = e.local_time
        if e.analyte == "ketone" or e.unit == "kg/L":
            want["mgdl"] = e.mgdl        # a mol/L meter's glucose reading also carries mg/dL, converted
        if e.analyte == "ketone" or e.unit == "mol/L":
            want["mmoll"] = e.mmoll      # and a kg/L meter's mmol/L
        for field, w in want.items():
            g = r.get(field)
            if isinstance(w, float) and g is not None:
                g = float(g)
            if g != w:
                bad.append("record %s: %s %r, want %r" % (k, field, r.get(field), w))
    return bad


def compare_nightscout(expected, entries):
    """Differences between the uploadable records and the Nightscout double's entries: each exactly once,
    at the exact instant with the value rounded to whole mg/dL, none of the excluded ones."""
    bad = []
    want = sorted((e.time, round_half_away(e.mgdl if e.mgdl is not None else e.mmoll * 18.0156))
                  for e in expected.values() if e.uploaded)
    got = []
    for doc in entries:
        if doc.get("type") != "mbg":
            bad.append("entry of type %r" % doc.get("type"))
            continue
        when = datetime.datetime.fromtimestamp(doc["date"] / 1000, datetime.timezone.utc).replace(tzinfo=None)
        stated = datetime.datetime.fromisoformat(doc["dateString"].replace("Z", "+00:00"))
        if stated.astimezone(datetime.timezone.utc).replace(tzinfo=None) != when:
            bad.append("entry %s: dateString %s is another instant" % (iso_utc(when), doc["dateString"]))
        device = doc.get("device", "")
        if not device or any(ord(c) < 0x20 or ord(c) > 0x7E for c in device):
            bad.append("entry %s: device %r is not plain ASCII" % (iso_utc(when), device))
        got.append((iso_utc(when), doc["mbg"]))
    identifiers = [doc.get("identifier") for doc in entries]
    if len(set(identifiers)) != len(identifiers):
        bad.append("an identifier appears twice")
    if sorted(got) != want:
        bad.append("entries %s, want %s" % (sorted(got), want))
    return bad


def round_half_away(value):
    return int(value + 0.5) if value >= 0 else -int(-value + 0.5)
