"""Simulated meters end to end against the BlueZ stand-in: pair, sync, a new measurement, a second sync,
a third that finds nothing, and the meter's clock. Every record the meter holds (its own record list, from
the control interface `Describe`) is stored exactly once with its exact value and times, and every
uploadable one reaches a loopback Nightscout exactly once; the ones the rules exclude are stored and
never uploaded."""
import datetime
import json
from zoneinfo import ZoneInfo

from gg_daemon import NightscoutDouble
from gg_dbus import standin_control as control
from gg_download import Gateway, meter, records
from gg_expected import check_clock, compare_nightscout, compare_store, expected_readings

ZONE = "Europe/Berlin"


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None, microsecond=0)


def describe(bus, address):
    return json.loads(control(bus, "Describe", "s", [address])[0])


def new_count(result, address):
    line = [l for l in result.stdout.splitlines() if l.startswith(address + ": ")]
    assert len(line) == 1, result.stdout
    return line[0]


def download_and_check(bus, tmp_path, threshold=120):
    """Runs the whole flow against the one meter the stand-in on `bus` plays; returns the gateway."""
    (addresses,) = control(bus, "Meters")
    assert len(addresses) == 1, addresses
    address = addresses[0]
    ns = NightscoutDouble(log_path=str(tmp_path / "nightscout.log"))
    try:
        gw = Gateway(bus, tmp_path, extra_config=ns.config())
        the_meter = describe(bus, address)
        gw.pair(address, pin=the_meter["pin"], time_zone=ZONE)

        received = utc_now()
        first = gw.sync()
        # The meter's clock: measured where the meter has one a central can read, absent where not.
        listed = json.loads(gw.run("meters", "--json").stdout)
        assert [m["address"] for m in listed] == [address]
        problems, correction = check_clock(the_meter, ZONE, listed[0], threshold)
        assert problems == []
        expected = expected_readings(the_meter, ZONE, correction, received)
        assert new_count(first, address) == "%s: %d new readings" % (address, len(expected))
        assert compare_store(expected, gw.readings()) == []
        assert compare_nightscout(expected, ns.entries()) == []

        # The user measures again: the next sync fetches that one record and nothing else.
        local_now = datetime.datetime.now(ZoneInfo(ZONE)).replace(tzinfo=None, microsecond=0)
        new_time = (local_now - datetime.timedelta(minutes=30)).strftime("%Y-%m-%dT%H:%M:%S")
        control(bus, "AddRecord", "ss", [address, json.dumps({"time": new_time, "mgdl": 123})])
        received = utc_now()
        second = gw.sync(address)
        assert new_count(second, address) == "%s: 1 new reading" % address
        the_meter = describe(bus, address)
        expected = expected_readings(the_meter, ZONE, correction, received)
        assert compare_store(expected, gw.readings()) == []
        assert compare_nightscout(expected, ns.entries()) == []

        third = gw.sync()
        assert new_count(third, address) in ("%s: 0 new readings" % address,
                                             "%s: 0 new readings, 1 already stored" % address)
        assert compare_store(expected, gw.readings()) == []
        assert compare_nightscout(expected, ns.entries()) == []
        return gw
    finally:
        ns.stop()


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
