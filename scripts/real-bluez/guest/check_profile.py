#!/usr/bin/python3
"""check_profile.py METER.json READINGS.json METERS.json --address A --zone Area/City [--sync-output FILE]
                                                                                 [--clock-only [--clock-set]]

Compares what the gateway stored (`readings --json`, `meters --json`) with the meter's own description
(describe_meter.py): every record exactly once with its exact value, times and exclusion, the clock skew
measured where the meter has a readable clock and absent where not, and, with --sync-output, that the
sync reported every record as new. With --clock-set (after `meters set-clock`) the measured skew must be
within 5 s of none instead of the meter's own skew. The rules are SystemTests/gg_expected.py's. Prints every difference;
exit 1 when any.
"""
import argparse
import datetime
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "SystemTests"))
from gg_expected import Unsupported, check_clock, compare_store, expected_readings, newest_first  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("meter")
p.add_argument("readings")
p.add_argument("meters")
p.add_argument("--address", required=True)
p.add_argument("--zone", required=True)
p.add_argument("--sync-output")
p.add_argument("--clock-only", action="store_true", help="check only the clock skew (READINGS is not read)")
p.add_argument("--clock-set", action="store_true", help="the gateway has set the meter's clock: the skew is about 0")
a = p.parse_args()
meter = json.load(open(a.meter))
readings = [] if a.clock_only else [r for r in json.load(open(a.readings)) if r.get("meter") == a.address]
listed = [m for m in json.load(open(a.meters)) if m.get("address") == a.address]
bad = []
if len(listed) != 1:
    bad.append("meters --json lists the meter %d times" % len(listed))
    listed = [{}]
if a.clock_set:
    if meter.get("clock", {"kind": "none"})["kind"] == "none":
        bad.append("--clock-set for a meter without a clock")
    skew = listed[0].get("clock_skew_seconds")
    # Well below clock_skew_threshold_s (120 s by default): the few seconds a write and a sync take.
    if not isinstance(skew, int) or abs(skew) > 5:
        bad.append("clock_skew_seconds %r after the clock was set, want within 5 s of 0" % (skew,))
    correction = 0
else:
    problems, correction = check_clock(meter, a.zone, listed[0])
    bad += problems
received = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
if a.clock_only:
    for line in bad:
        print("  mismatch:", line)
    print("  skew %s, %d mismatch(es)" % (listed[0].get("clock_skew_seconds"), len(bad)))
    sys.exit(1 if bad else 0)
try:
    expected = expected_readings(meter, a.zone, correction, received)
    bad += compare_store(expected, readings, newest_first(meter))
except Unsupported as e:
    bad.append("cannot judge the meter: %s" % e)
    expected = {}
if a.sync_output:
    want = "%s: %d new readings" % (a.address, len(expected))
    # Without the clock note a skew beyond the threshold adds.
    lines = [re.sub(r"; meter clock off by -?[0-9]+ s$", "", l)
             for l in open(a.sync_output).read().splitlines() if l.startswith(a.address + ":")]
    if lines != [want]:
        bad.append("sync said %r, want %r" % (lines, want))
for line in bad:
    print("  mismatch:", line)
print("  %d readings stored, %d expected, skew %s, %d mismatch(es)"
      % (len(readings), len(expected), listed[0].get("clock_skew_seconds"), len(bad)))
sys.exit(1 if bad else 0)
