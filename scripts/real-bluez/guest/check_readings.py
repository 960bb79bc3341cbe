#!/usr/bin/python3
"""check_readings.py EXPECTED.json ACTUAL.json [--extra N --extra-mgdl V --extra-step-minutes M]

Compares `glucose-gateway readings --json` (ACTUAL) with the meter's records (EXPECTED: sequence, UTC time,
local time, mg/dL): every expected record stored exactly once with exactly these values, and nothing else
but N extra records: new records the meter made while the test ran (sequences following the last
expected one, each V mg/dL), which the simulator times M minutes after its newest one (its new-record
interval in minutes, at least 1; default 1). Prints every difference; exit 1 when any.
"""
import argparse
import collections
import datetime
import json
import sys

p = argparse.ArgumentParser()
p.add_argument("expected")
p.add_argument("actual")
p.add_argument("--extra", type=int, default=0)
p.add_argument("--extra-mgdl", type=float)
p.add_argument("--extra-step-minutes", type=int, default=1)
a = p.parse_args()
expected = json.load(open(a.expected))
try:
    actual = json.load(open(a.actual))
except ValueError as e:
    print(f"readings --json is not JSON: {e}")
    sys.exit(1)
bad = []
counts = collections.Counter(r.get("sequence") for r in actual)
for seq, n in counts.items():
    if n != 1:
        bad.append(f"sequence {seq} stored {n} times")
by_seq = {r.get("sequence"): r for r in actual}
for e in expected:
    r = by_seq.get(e["sequence"])
    if r is None:
        bad.append(f"sequence {e['sequence']} missing")
        continue
    for key, want in (("time", e["time"]), ("meter_time", e["time"]), ("local_time", e["localTime"])):
        if r.get(key) != want:
            bad.append(f"sequence {e['sequence']}: {key} {r.get(key)!r}, want {want!r}")
    if r.get("mgdl") is None or abs(float(r["mgdl"]) - e["mgdl"]) > 1e-9:
        bad.append(f"sequence {e['sequence']}: mgdl {r.get('mgdl')!r}, want {e['mgdl']}")
last = max(e["sequence"] for e in expected)
extra = sorted(s for s in counts if s not in {e["sequence"] for e in expected})
if extra != list(range(last + 1, last + 1 + a.extra)):
    bad.append(f"records beyond the expected ones: sequences {extra}, want {list(range(last + 1, last + 1 + a.extra))}")
newest = max(expected, key=lambda e: e["sequence"])
utc0 = datetime.datetime.strptime(newest["time"], "%Y-%m-%dT%H:%M:%SZ")
local0 = datetime.datetime.strptime(newest["localTime"], "%Y-%m-%dT%H:%M:%S")
for s in extra:
    r = by_seq[s]
    k = s - last
    want_utc = (utc0 + datetime.timedelta(minutes=a.extra_step_minutes * k)).strftime("%Y-%m-%dT%H:%M:%SZ")
    want_local = (local0 + datetime.timedelta(minutes=a.extra_step_minutes * k)).strftime("%Y-%m-%dT%H:%M:%S")
    if a.extra_mgdl is not None and (r.get("mgdl") is None or abs(float(r["mgdl"]) - a.extra_mgdl) > 1e-9):
        bad.append(f"new record {s}: mgdl {r.get('mgdl')!r}, want {a.extra_mgdl}")
    for key, want in (("time", want_utc), ("meter_time", want_utc), ("local_time", want_local)):
        if r.get(key) != want:
            bad.append(f"new record {s}: {key} {r.get(key)!r}, want {want!r}")
for line in bad:
    print("  mismatch:", line)
print(f"  {len(actual)} readings stored, {len(bad)} mismatch(es)")
sys.exit(1 if bad else 0)
