"""The meter's clock end to end against the BlueZ stand-in: `meters set-clock` moves the simulated meter's
clock (read back through the control interface's MeterClock) and the next sync measures a skew below the
threshold; with `[gateway] set_meter_clock = true` a sync does it by itself; the i-SENS vendor clock is read
for skew with its notifications left on until the link ends."""
import datetime
import json

import pytest

from gg_dbus import standin_control as control
from gg_download import Gateway, meter, records

A = "C0:26:DA:01:02:0C"


def listed_skew(gw):
    (m,) = json.loads(gw.run("meters", "--json").stdout)
    return m.get("clock_skew_seconds")


def simulated(bus):
    kind, shown, skew = control(bus, "MeterClock", "s", [A])
    return kind, shown, skew


def events(gw, kind):
    return gw.query("SELECT code, message FROM event WHERE kind = ? ORDER BY id", (kind,))


def test_set_clock_moves_the_meter_clock_and_the_next_sync_sees_it_right(private_bus, standin, meter_file, tmp_path):
    standin("--meter", meter_file(meter(A, records_list=records(1, 3), clock={"kind": "cts", "skewSeconds": -3600})))
    gw = Gateway(private_bus, tmp_path)
    gw.pair(A, time_zone="UTC")
    gw.sync()
    assert abs(listed_skew(gw) + 3600) <= 2
    assert abs(simulated(private_bus)[2] + 3600) <= 2

    result = gw.run("meters", "set-clock", A)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(A + ": clock set through Current Time 0x2A2B: was "), result.stdout
    kind, _, skew = simulated(private_bus)
    assert kind == "cts" and abs(skew) <= 2, skew
    (code, message), = events(gw, "clock-set")
    assert abs(code + 3600) <= 2 and "(UTC)" in message

    gw.sync()
    assert abs(listed_skew(gw)) <= 2   # below the 120 s threshold
    # The readings of the first sync keep the times corrected by the skew measured then.
    assert len(gw.readings()) == 3


def test_set_clock_before_the_first_sync_keeps_the_older_readings_on_the_old_clock(private_bus, standin, meter_file,
                                                                                    tmp_path):
    def utc_now():
        return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0, tzinfo=None)

    # The meter's clock is 10 minutes slow: a reading taken at T shows T - 10 min.
    taken = [utc_now() - datetime.timedelta(hours=h) for h in (3, 2, 1)]
    recs = [{"sequence": i + 1, "time": (t - datetime.timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%S"),
             "timeOffset": 0, "mgdl": 100 + i} for i, t in enumerate(taken)]
    standin("--meter", meter_file(meter(A, records_list=recs, clock={"kind": "cts", "skewSeconds": -600})))
    gw = Gateway(private_bus, tmp_path)
    gw.pair(A, time_zone="UTC")
    result = gw.run("meters", "set-clock", A)
    assert result.returncode == 0, result.stderr
    # A reading taken after the write, on the clock set right.
    after = utc_now() + datetime.timedelta(seconds=1)
    control(private_bus, "AddRecord", "ss", [A, json.dumps({"time": after.strftime("%Y-%m-%dT%H:%M:%S"), "mgdl": 140})])
    gw.sync()
    by_seq = {r["sequence"]: r for r in gw.readings()}
    assert len(by_seq) == 4
    # Before the write on the old clock, after it on the new one: every one at the time it was taken (to the
    # second the clock is read to; the zone's reading of the old clock would be 10 minutes off).
    def off(r, t):
        return abs((datetime.datetime.strptime(r["time"], "%Y-%m-%dT%H:%M:%SZ") - t).total_seconds())
    for i, t in enumerate(taken):
        r = by_seq[i + 1]
        assert off(r, t) <= 2 and "exclusion" not in r, r
    newest = max(by_seq)
    assert off(by_seq[newest], after) <= 2, by_seq[newest]
    assert by_seq[newest]["clock"]["reason"] == "set by the gateway"
    (m,) = json.loads(gw.run("meters", "--json").stdout)
    assert [s["set_by_gateway"] for s in m["clock_history"]] == [False, True, False]
    assert [s.get("highest_sequence") for s in m["clock_history"]][:2] == [None, None]


def test_set_clock_errors(private_bus, standin, meter_file, tmp_path):
    standin("--meter", meter_file(meter(A, records_list=records(1, 2), clock={"kind": "cts", "writable": False})))
    gw = Gateway(private_bus, tmp_path)
    unknown = gw.run("meters", "set-clock", A)
    assert unknown.returncode == 1 and "is not a paired meter" in unknown.stderr
    assert len(unknown.stderr.strip().splitlines()) == 1
    gw.pair(A, time_zone="UTC")
    refused = gw.run("meters", "set-clock", A)
    assert refused.returncode == 1 and "the meter refused to set its clock" in refused.stderr, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1
    assert events(gw, "clock-set") == []
    bad = gw.run("meters", "set-clock", "nonsense")
    assert bad.returncode == 64
    other = gw.run("meters", "set-time", A)
    assert other.returncode == 64 and "unknown action" in other.stderr


def test_set_clock_on_a_meter_without_a_clock_or_out_of_reach(private_bus, standin, meter_file, tmp_path):
    standin("--meter", meter_file(meter(A, records_list=records(1, 2))))
    gw = Gateway(private_bus, tmp_path)
    gw.pair(A, time_zone="UTC")
    none = gw.run("meters", "set-clock", A)
    assert none.returncode == 69 and "has no clock the gateway can set" in none.stderr, none.stderr
    control(private_bus, "FailConnect", "sas", [A, ["abort-by-local"] * 3])
    gone = gw.run("meters", "set-clock", A)
    assert gone.returncode == 69 and "not reachable" in gone.stderr, gone.stderr


def test_sync_sets_the_clock_when_enabled_and_keeps_the_corrected_times(private_bus, standin, meter_file, tmp_path):
    standin("--meter", meter_file(meter(A, records_list=records(1, 3), clock={"kind": "gls-date-time", "skewSeconds": 900})))
    gw = Gateway(private_bus, tmp_path, extra_config="set_meter_clock = true\n")
    gw.pair(A, time_zone="UTC")
    first = gw.sync()
    # The sync reports the skew it measured (before writing) and corrected its readings by it.
    assert abs(listed_skew(gw) - 900) <= 2
    assert "meter clock off by" in first.stdout
    for r in gw.readings():
        assert r["time"] != r["meter_time"]
    kind, _, skew = simulated(private_bus)
    assert kind == "gls-date-time" and abs(skew) <= 2, skew
    (code, message), = events(gw, "clock-set")
    assert abs(code - 900) <= 2 and "Date Time 0x2A08" in message
    gw.sync()
    assert abs(listed_skew(gw)) <= 2
    assert len(events(gw, "clock-set")) == 1


@pytest.mark.parametrize("kind", ["vendor", "vendor-v1.5"])
def test_the_vendor_clock_is_read_and_its_notifications_run_until_the_link_ends(private_bus, standin, meter_file, tmp_path,
                                                                               kind):
    standin("--meter", meter_file(meter(A, records_list=records(1, 4), clock={"kind": kind, "skewSeconds": 600})))
    gw = Gateway(private_bus, tmp_path)
    gw.pair(A, time_zone="UTC")
    control(private_bus, "ClearCallLog")
    result = gw.sync()
    assert "%s: 4 new readings" % A in result.stdout, result.stdout
    assert abs(listed_skew(gw) - 600) <= 2
    assert abs(simulated(private_bus)[2] - 600) <= 2   # read, not set: set_meter_clock is off
    (calls,) = control(private_bus, "CallLog")
    gatt = [c for c in calls if ".GattCharacteristic1." in c or c.startswith("org.bluez.Device1.Disconnect")]
    # The first write asks the vendor clock for the time; its path is the vendor characteristic.
    vendor = next(c for c in gatt if c.startswith("org.bluez.GattCharacteristic1.WriteValue")).split()[1]
    stop = "org.bluez.GattCharacteristic1.StopNotify " + vendor
    assert "org.bluez.GattCharacteristic1.StartNotify " + vendor in gatt
    assert gatt.count(stop) == 1
    # Stopped only on the way out, after every other GATT call: the meter switches off when it stops (then
    # the link is already down and the gateway's Disconnect may find nothing left to end).
    at = gatt.index(stop)
    assert all(not c.startswith("org.bluez.GattCharacteristic1.") for c in gatt[at + 1:]), gatt[at:]
    assert gatt[at + 1:] in ([], ["org.bluez.Device1.Disconnect " + vendor.split("/service")[0]]), gatt[at:]
