"""Simulated meters end to end against the BlueZ stand-in: pair, sync, a new measurement, a second sync,
a third that finds nothing, and the meter's clock (its skew, then `meters set-clock`). Every record the meter holds (its own record list, from
the control interface `Describe`) is stored exactly once with its exact value and times, and every
uploadable one reaches a loopback Nightscout exactly once; the ones the rules exclude are stored and
never uploaded."""
import datetime
import json
import re
import subprocess
from zoneinfo import ZoneInfo

from gg_bus import simulator_binary
from gg_daemon import NightscoutDouble
from gg_dbus import standin_control as control
from gg_download import Gateway, meter, records
from gg_expected import (Unsupported, carry_over, check_clock, clock_offset, compare_nightscout, compare_store,
                         expected_readings, newest_first, to_utc)

ZONE = "Europe/Berlin"


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None, microsecond=0)


def describe(bus, address):
    return json.loads(control(bus, "Describe", "s", [address])[0])


def new_count(result, address):
    """The sync's line for the meter, without the clock note a skew beyond the threshold adds."""
    line = [l for l in result.stdout.splitlines() if l.startswith(address + ": ")]
    assert len(line) == 1, result.stdout
    return re.sub(r"; meter clock off by -?[0-9]+ s$", "", line[0])


def download_and_check(bus, tmp_path, threshold=120):
    """Runs the whole flow against the one meter the stand-in on `bus` plays; returns the gateway."""
    (addresses,) = control(bus, "Meters")
    assert len(addresses) == 1, addresses
    address = addresses[0]
    ns = NightscoutDouble(log_path=str(tmp_path / "nightscout.log"))
    try:
        gw = Gateway(bus, tmp_path, extra_config=ns.config())
        the_meter = describe(bus, address)
        by_time = newest_first(the_meter)
        gw.pair(address, pin=the_meter["pin"], time_zone=ZONE)
        # The identity as the meter sends it, with NUL and other control characters gone.
        listed = json.loads(gw.run("meters", "--json").stdout)
        for key, sent in the_meter["deviceInformation"].items():
            if key in ("manufacturer", "model", "serial", "firmware"):
                assert listed[0].get(key) == "".join(c for c in sent if c >= " " and c != "\x7f").strip(), key

        def downloaded(result, received, first_sync=False):
            """What the store must hold after a download: the meter's records, times corrected by the skew
            the gateway measured in that download when beyond the threshold (checked against the
            simulated clock: measured where the meter has a readable clock, absent where not)."""
            listed = json.loads(gw.run("meters", "--json").stdout)
            assert [m["address"] for m in listed] == [address]
            problems, correction = check_clock(the_meter, ZONE, listed[0], threshold)
            assert problems == []
            note = re.search(r"; meter clock off by (-?[0-9]+) s$", [l for l in result.stdout.splitlines()
                                                                     if l.startswith(address)][0])
            assert (int(note.group(1)) if note else 0) == correction
            return expected_readings(describe(bus, address), ZONE, correction, received, threshold=threshold,
                                     clock_offset_seconds=clock_offset(ZONE, listed[0], received), first_sync=first_sync)

        received = utc_now()
        first = gw.sync()
        expected = downloaded(first, received, first_sync=True)
        assert new_count(first, address) == "%s: %d new readings" % (address, len(expected))
        assert compare_store(expected, gw.readings(), by_time) == []
        # Where the clock history placed each reading: with a readable clock, at the F just measured (or
        # time-uncertain with its candidates), and the measurement in `meters --json`.
        listed = json.loads(gw.run("meters", "--json").stdout)[0]
        f = clock_offset(ZONE, listed, received)
        if f is not None and not by_time:
            assert [s["offset_seconds"] for s in listed["clock_history"]] == [listed["clock_history"][0]["offset_seconds"]]
            assert abs(listed["clock_history"][0]["offset_seconds"] - f) <= 2, listed
            for r in gw.readings():
                if r.get("time") is None and r.get("exclusion") != "time-uncertain":
                    continue   # a time that is not a date: the zone's rules, no placement
                c = r["clock"]
                if r.get("exclusion") == "time-uncertain":
                    assert len(c["candidates"]) >= 1 and c.get("offset_seconds") is None, r
                else:
                    assert abs(c["offset_seconds"] - f) <= 2 and c["reason"] == "only sync", r
        assert compare_nightscout(expected, ns.entries()) == []

        # The user measures again (half an hour ago by the meter's clock, or by the zone's time without
        # one): the next sync fetches that one record and nothing else.
        clock = the_meter.get("clock", {"kind": "none"})
        if clock["kind"] == "none":
            shown = datetime.datetime.now(ZoneInfo(ZONE)).replace(tzinfo=None)
        else:
            shown = utc_now() + datetime.timedelta(minutes=clock["utcOffsetMinutes"], seconds=clock["skewSeconds"])
        # (Three hours earlier when that half hour falls into the zone's repeated or skipped DST hour.)
        when = shown - datetime.timedelta(minutes=30)
        try:
            to_utc(when.replace(microsecond=0), ZONE)
        except Unsupported:
            when -= datetime.timedelta(hours=3)
        new_time = when.strftime("%Y-%m-%dT%H:%M:%S")
        control(bus, "AddRecord", "ss", [address, json.dumps({"time": new_time, "mgdl": 123})])
        received = utc_now()
        second = gw.sync(address)
        # (The newest record already stored may come again: the gateway asks for it to check the counter.)
        assert new_count(second, address) in ("%s: 1 new reading" % address, "%s: 1 new reading, 1 already stored" % address)
        expected = carry_over(expected, downloaded(second, received), by_time)
        assert len(expected) == len(describe(bus, address)["records"])
        assert compare_store(expected, gw.readings(), by_time) == []
        assert compare_nightscout(expected, ns.entries()) == []

        third = gw.sync()
        assert new_count(third, address) in ("%s: 0 new readings" % address,
                                             "%s: 0 new readings, 1 already stored" % address)
        assert compare_store(expected, gw.readings(), by_time) == []
        assert compare_nightscout(expected, ns.entries()) == []
        return gw
    finally:
        ns.stop()


# --- The built-in profiles -----------------------------------------------------------------------

# The meters the profiles must cover; a profile missing from --list-profiles fails here.
REQUIRED = ["contour-next-one", "accu-chek-guide", "accu-chek-instant", "caresens", "fora-tng", "taidoc-reversed",
            "generic-gls"]


def listed_profiles():
    result = subprocess.run([simulator_binary(), "--list-profiles"], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 0, result.stderr
    return [line.split()[0] for line in result.stdout.splitlines() if line.strip()]


def pytest_generate_tests(metafunc):
    if "profile" in metafunc.fixturenames:
        metafunc.parametrize("profile", listed_profiles())


def test_every_known_meter_has_a_profile():
    assert [p for p in REQUIRED if p not in listed_profiles()] == []


def test_profile_end_to_end(profile, private_bus, standin, tmp_path):
    sim = standin("--profile", profile)
    (addresses,) = control(private_bus, "Meters")
    clock = describe(private_bus, addresses[0])["clock"]
    if clock["kind"] != "none":
        # A meter set to Central European Time (it does not follow DST), five minutes fast.
        sim.stop()
        flags = ["--clock", clock["kind"], "--clock-skew", "300", "--clock-utc-offset", "60"]
        if not clock["writable"]:
            flags.append("--clock-read-only")
        standin("--profile", profile, *flags)
    gw = download_and_check(private_bus, tmp_path)

    # Setting the meter's clock once: where it has one, to the local time of the meter's zone, after which
    # the next sync measures no skew beyond the threshold; without one, a clear refusal.
    address = addresses[0]
    result = gw.run("meters", "set-clock", address)
    if clock["kind"] == "none":
        assert result.returncode == 69, result.stdout + result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        return
    assert result.returncode == 0, result.stdout + result.stderr
    kind, shown, _ = control(private_bus, "MeterClock", "s", [address])
    assert kind == clock["kind"]
    berlin_now = datetime.datetime.now(ZoneInfo(ZONE)).replace(tzinfo=None)
    assert abs((datetime.datetime.strptime(shown, "%Y-%m-%dT%H:%M:%S") - berlin_now).total_seconds()) <= 3, shown
    after = gw.sync(address)
    assert new_count(after, address) in ("%s: 0 new readings" % address, "%s: 0 new readings, 1 already stored" % address)
    listed = json.loads(gw.run("meters", "--json").stdout)
    assert abs(listed[0]["clock_skew_seconds"]) <= 2, listed[0]


# --- Meters described by a meter file --------------------------------------------------------------

def test_a_meter_that_follows_the_specification(private_bus, standin, meter_file, tmp_path):
    standin("--meter", meter_file(meter(records_list=records(1, 12, offset=60))))
    download_and_check(private_bus, tmp_path)


def test_records_the_rules_keep_out_of_the_upload(private_bus, standin, meter_file, tmp_path):
    recs = records(1, 4) + [
        {"sequence": 5, "time": "2024-03-06T09:00:00", "mgdl": 95, "control": True},
        {"sequence": 6, "time": "2024-03-06T09:10:00", "result": "high"},
        {"sequence": 7, "time": "2024-03-06T09:20:00", "result": "low"},
        {"sequence": 8, "time": "2024-03-06T09:30:00", "mgdl": 100, "status": ["sensorMalfunction"]},
        {"sequence": 9, "time": "2024-03-06T09:40:00", "mgdl": 101},    # sent with month 13
        {"sequence": 10, "time": "2037-01-01T00:00:00", "result": "high"},
        {"sequence": 11, "time": "2024-03-06T09:50:00", "mgdl": 102, "status": ["batteryLow"]},
    ]
    standin("--meter", meter_file(meter(records_list=recs, faults={"malformed": [{"sequence": 9, "kind": "invalid-time"}]})))
    gw = download_and_check(private_bus, tmp_path)
    by_seq = {r["sequence"]: r for r in gw.readings()}
    assert by_seq[9]["exclusion"] == "time-unresolved"
    assert by_seq[10]["exclusion"] == "time-in-future"
    assert "exclusion" not in by_seq[11]
