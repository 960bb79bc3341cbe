"""The meter clock history cases of the clock-history scenario: what the meter holds before each sync, and
what the gateway must have made of it.

    clock_history.py files BASE DIR                 every case's meter file for each sync (BASE's identity) as
                                                    DIR/CASE.STEP.json; one line per sync: CASE STEP FILE UTC
    clock_history.py check CASE READINGS ENTRIES METERS
                                                    readings --json and the Nightscout double's entries against
                                                    the true instants (exit 1 on any difference); prints the
                                                    clock history of meters --json

A reading is taken at a true UTC instant on a clock running at F (meter clock - UTC); its base time is that
instant + F - its time offset field. The meter's clock at a sync runs at the F of the case's last reading
(or the clock the case gives), so the gateway measures that F against the guest's clock, which the
scenario sets to the sync's time.

Cases (Europe/Berlin; 2026-10-25 01:00 UTC is the autumn switch, CEST -> CET):
  dst      a DST-unaware meter set in summer (UTC+2 all year): a reading every day at 06:00 UTC from
           three weeks before the switch to three weeks after it, synced every week: every reading exact.
  back     the user sets the clock 40 minutes back between two syncs (UTC+1 -> UTC+0:20), three readings
           before and three after, the time running backwards at the change: every reading exact.
  forward  the user sets it 40 minutes forward (UTC+1 -> UTC+1:40), no step in the records: the six taken
           between the syncs cannot be placed: time-uncertain, no time, not uploaded; the one before the
           first sync exact and uploaded.
"""
import datetime
import json
import sys

UTC = datetime.timezone.utc
H = 3600


def utc(*a):
    return datetime.datetime(*a, tzinfo=UTC)


def dst_case():
    start = utc(2026, 10, 4, 6)
    readings = [(d + 1, start + datetime.timedelta(days=d), 2 * H, 0) for d in range(42)]
    syncs = [(utc(2026, 10, 4, 12) + datetime.timedelta(days=d), 2 * H) for d in (6, 13, 20, 27, 34, 41)]
    return readings, syncs


def change_case(first, minutes):
    """One reading, a sync, three readings on the old clock and three on the clock changed by MINUTES,
    a sync. `first`: the day of the first reading."""
    f0, f1 = H, H + minutes * 60
    d = lambda n, h, m=0: first + datetime.timedelta(days=n, hours=h, minutes=m)
    if minutes < 0:
        # Within one morning: the fourth reading shows an earlier time than the third.
        times = [d(4, 0), d(4, 0, 20), d(4, 0, 30), d(4, 0, 45), d(5, 1), d(6, 1, 30)]
    else:
        times = [d(n, 0) for n in range(2, 8)]
    readings = [(0, first, f0, 0)] + [(i + 1, t, f0 if i < 3 else f1, 0) for i, t in enumerate(times)]
    syncs = [(d(1, 4), f0), (d(8, 4), f1)]
    return readings, syncs


CASES = {
    "dst": dst_case,
    "back": lambda: change_case(utc(2026, 11, 16, 8), -40),
    "forward": lambda: change_case(utc(2026, 11, 27, 8), 40),
}


def iso(t):
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def millis(t):
    return int(t.timestamp()) * 1000


def meter_file(base, readings, at, f):
    """The meter as it is at the sync at `at`: every reading taken before, its clock at F."""
    o = dict(base)
    o["records"] = [
        {"sequence": seq, "mgdl": 100 + seq,
         "time": (t + datetime.timedelta(seconds=fr, minutes=-off)).replace(tzinfo=None).isoformat(),
         **({"timeOffset": off} if off else {})}
        for seq, t, fr, off in readings if t < at]
    # The clock shows UTC + F: a fixed offset in whole minutes, the rest as skew.
    o["clock"] = {"kind": "cts", "utcOffsetMinutes": f // 60, "skewSeconds": f % 60}
    return o


def main(argv):
    if argv[0] == "files":
        base = json.load(open(argv[1]))
        for case, make in CASES.items():
            readings, syncs = make()
            for k, (at, f) in enumerate(syncs):
                path = "%s/%s.%d.json" % (argv[2], case, k)
                json.dump(meter_file(base, readings, at, f), open(path, "w"))
                print(case, k, path, at.strftime("%Y-%m-%d %H:%M:%S"))
        return 0
    readings, syncs = CASES[argv[1]]()
    history = json.load(open(argv[4]))[0].get("clock_history", [])
    print("  clock history (F in s): %s" % ", ".join("%s %+d" % (s["at"], s["offset_seconds"]) for s in history))
    got = {r["sequence"]: r for r in json.load(open(argv[2]))}
    entries = json.load(open(argv[3]))
    problems = []
    uncertain = set()
    if argv[1] == "forward":
        uncertain = {seq for seq, _, _, _ in readings if seq > 0}
    for seq, t, _, _ in readings:
        r = got.get(seq)
        clock = (r or {}).get("clock") or {}
        shown = "seq %d: %s, exclusion %s, clock %s" % (seq, (r or {}).get("time"), (r or {}).get("exclusion"),
                                                          clock.get("summary"))
        if r is None:
            problems.append("seq %d: not stored" % seq)
        elif seq in uncertain:
            if r.get("exclusion") != "time-uncertain" or r.get("time") is not None:
                problems.append(shown + " (want time-uncertain, no time)")
            elif iso(t) not in clock.get("candidates", []):
                problems.append(shown + " (the true instant %s is not among the candidates %s)" % (iso(t), clock.get("candidates")))
        elif r.get("time") != iso(t) or r.get("exclusion") is not None:
            problems.append(shown + " (want %s, no exclusion)" % iso(t))
        print("  " + shown + (" candidates %s" % clock.get("candidates") if clock.get("candidates") else ""))
    if len(got) != len(readings):
        problems.append("%d readings stored, %d taken" % (len(got), len(readings)))
    want = sorted(millis(t) for seq, t, _, _ in readings if seq not in uncertain)
    dates = sorted(e.get("date") for e in entries)
    print("  uploaded %d entries; %d expected" % (len(dates), len(want)))
    if dates != want:
        wrong = sorted(set(dates) - set(want))
        problems.append("the Nightscout double holds %d entries, %d expected; at times no reading was taken: %s"
                        % (len(dates), len(want), [iso(datetime.datetime.fromtimestamp(d / 1000, UTC)) for d in wrong]))
    for p in problems:
        print("  PROBLEM " + p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
