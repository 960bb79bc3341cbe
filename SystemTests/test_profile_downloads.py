"""The built-in meter profiles of `glucose-gateway-simulator --profile` against the gateway through the BlueZ stand-in:
pair, sync, a new record, sync again; every reading once, with its exact value and time, written out here."""
import datetime
import json
import subprocess

from gg_bus import simulator_binary
from gg_dbus import standin_control as control
from gg_download import Gateway

SERIES = [96, 142, 118, 187, 104, 131, 88, 163, 112, 149]
START = datetime.datetime(2024, 3, 5, 7, 30)


def series_time(i, offset_minutes=0):
    """The time (as the meter shows it) of the i-th record of a profile's series: 07:30 plus 4 h steps."""
    return (START + datetime.timedelta(hours=4 * i, minutes=offset_minutes)).strftime("%Y-%m-%dT%H:%M:%S")


def by_time(readings):
    return sorted(readings, key=lambda r: (r["local_time"], r["sequence"]))


def summary(readings):
    """(local time, mg/dL or None, exclusion or None) per reading, oldest first."""
    return [(r["local_time"], r.get("mgdl"), r.get("exclusion")) for r in by_time(readings)]


def test_list_profiles_prints_one_line_per_profile():
    result = subprocess.run([simulator_binary(), "--list-profiles"], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    names = [line.split()[0] for line in lines]
    assert names == ["contour-next-one", "accu-chek-guide", "accu-chek-instant", "caresens", "fora-tng",
                     "taidoc-reversed", "generic-gls"]
    assert all(len(line.split(None, 1)) == 2 for line in lines)


def test_unknown_profile_is_a_usage_error():
    result = subprocess.run([simulator_binary(), "--standin", "--profile", "contour"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 64
    assert "--profile must be one of" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def sync_twice(gw, private_bus, address, record_json):
    """Pair, sync, add one record on the meter, sync again; returns the two sync outputs."""
    gw.pair(address)
    first = gw.sync(address)
    control(private_bus, "AddRecord", "ss", [address, record_json])
    second = gw.sync(address)
    return first.stdout, second.stdout


def test_contour_next_one(private_bus, standin, tmp_path):
    address = "D0:1A:A7:00:00:01"
    standin("--profile", "contour-next-one")
    gw = Gateway(private_bus, tmp_path)
    first, second = sync_twice(gw, private_bus, address, '{"time": "2024-03-07T12:00:00", "mgdl": 101}')
    assert address + ": 12 new readings" in first
    assert address + ": 1 new reading" in second
    readings = gw.readings()
    expected = [(series_time(i), float(SERIES[i % 10]), None) for i in range(12)]
    expected.append(("2024-03-07T12:00:00", 101.0, None))
    assert summary(readings) == expected
    assert sorted(r["sequence"] for r in readings) == list(range(1, 14))
    # The history was not sent again: the second sync asked only for what was newer.
    log = control(private_bus, "CallLog")[0]
    assert not any("Delete" in line for line in log)
    meters = gw.run("meters")
    assert "\x00" not in meters.stdout
    assert "identity-strings-cleaned" in meters.stdout
    assert json.loads(gw.run("meters", "--json").stdout)[0]["handling"] == ["identity-strings-cleaned"]
    stored = gw.query("SELECT manufacturer, model, serial FROM meter WHERE address = ?", (address,))
    assert stored == [("Ascensia Diabetes Care", "Contour Next One", "7012345")]
    third = gw.sync(address)
    assert address + ": 0 new readings" in third.stdout
    assert len(gw.readings()) == 13


def test_accu_chek_guide(private_bus, standin, tmp_path):
    address = "C0:26:DA:00:00:02"
    standin("--profile", "accu-chek-guide")
    gw = Gateway(private_bus, tmp_path)
    first, second = sync_twice(gw, private_bus, address,
                               '{"time": "2024-03-08T06:00:00", "timeOffset": 60, "mgdl": 77}')
    assert address + ": 14 new readings" in first
    assert address + ": 1 new reading" in second
    readings = gw.readings()
    expected = [(series_time(i, 60), float(SERIES[i]), None) for i in range(10)]
    expected += [(series_time(10, 60), 20.0, None), (series_time(11, 60), None, "lo"),
                 (series_time(12, 60), None, "hi"), (series_time(13, 60), 600.0, None),
                 ("2024-03-08T07:00:00", 77.0, None)]
    assert summary(readings) == expected
    assert sorted(r["sequence"] for r in readings) == list(range(1, 16))
    assert all(r["time_offset_minutes"] == 60 for r in readings)


def test_accu_chek_instant(private_bus, standin, tmp_path):
    address = "C0:26:DA:00:00:03"
    standin("--profile", "accu-chek-instant")
    gw = Gateway(private_bus, tmp_path)
    first, second = sync_twice(gw, private_bus, address, '{"time": "2024-03-08T06:00:00", "timeOffset": 60, "mgdl": 12}')
    assert address + ": 14 new readings" in first
    assert address + ": 1 new reading" in second
    expected = [(series_time(i, 60), float(SERIES[i]), None) for i in range(10)]
    expected += [(series_time(10, 60), 10.0, None), (series_time(11, 60), None, "lo"),
                 (series_time(12, 60), None, "hi"), (series_time(13, 60), 600.0, None),
                 ("2024-03-08T07:00:00", 12.0, None)]
    readings = gw.readings()
    assert summary(readings) == expected
    assert not any("context" in r for r in readings)


def test_caresens(private_bus, standin, tmp_path):
    address = "F4:5E:AB:00:00:04"
    standin("--profile", "caresens")
    gw = Gateway(private_bus, tmp_path)
    first, second = sync_twice(gw, private_bus, address, '{"time": "2024-03-07T12:00:00", "mgdl": 130}')
    assert address + ": 10 new readings" in first
    assert address + ": 1 new reading" in second
    by_seq = {r["sequence"]: r for r in gw.readings()}
    assert sorted(by_seq) == list(range(1, 12))
    # Record 5 came with base-time month 13: kept, its time unresolved, never guessed.
    five = by_seq[5]
    assert five["exclusion"] == "time-unresolved"
    assert five["base_time"] == "2024-13-05T23:30:00"
    assert "time" not in five or five["time"] is None
    # Record 8 is a ketone result (context meal 6): 12 "mg/dL" in the glucose field is 1.2 mmol/L ketone.
    assert by_seq[8]["exclusion"] == "ketone" and by_seq[8]["mmoll"] == 1.2
    for seq in (1, 2, 3, 4, 6, 7, 9, 10):
        assert by_seq[seq]["local_time"] == series_time(seq - 1)
        assert by_seq[seq]["mgdl"] == SERIES[seq - 1]
        assert "exclusion" not in by_seq[seq]
    assert by_seq[11]["local_time"] == "2024-03-07T12:00:00" and by_seq[11]["mgdl"] == 130


def test_fora_tng_memory_full(private_bus, standin, tmp_path):
    address = "C0:0C:A1:00:00:05"
    standin("--profile", "fora-tng")
    gw = Gateway(private_bus, tmp_path)
    gw.pair(address)
    first = gw.sync(address)
    assert address + ": 21 new readings" in first.stdout
    readings = gw.readings()
    expected = [(series_time(i), float(SERIES[i % 10]), None) for i in range(20)]
    expected.append(("2037-01-01T00:00:00", None, "memory-full-marker"))
    assert summary(readings) == expected
    listed = json.loads(gw.run("meters", "--json").stdout)
    assert listed[0]["handling"] == ["memory-full-marker"]
    assert "manufacturer" not in listed[0] or listed[0]["manufacturer"] is None
    second = gw.sync(address)
    assert address + ": 0 new readings" in second.stdout
    assert len(gw.readings()) == 21


def test_taidoc_reversed(private_bus, standin, tmp_path):
    address = "00:1C:05:00:00:06"
    standin("--profile", "taidoc-reversed")
    gw = Gateway(private_bus, tmp_path)
    first, second = sync_twice(gw, private_bus, address, '{"time": "2024-03-07T12:00:00", "mgdl": 133}')
    assert address + ": 10 new readings" in first
    assert address + ": 1 new reading" in second
    readings = gw.readings()
    expected = [(series_time(i), float(SERIES[i]), None) for i in range(10)]
    expected.append(("2024-03-07T12:00:00", 133.0, None))
    assert summary(readings) == expected
    # Stored under their position from the oldest, whatever number the meter sends now.
    assert [r["sequence"] for r in by_time(readings)] == list(range(11))
    # The second sync asked for numbers 0...1 only: the new record and the newest one stored.
    finished = [m for (m,) in gw.query("SELECT message FROM event WHERE message LIKE '%received,%' ORDER BY id")]
    assert len(finished) == 2 and ": 2 received, 1 new" in finished[1], finished
    third = gw.sync(address)
    assert address + ": 0 new readings" in third.stdout
    assert len(gw.readings()) == 11
    listed = json.loads(gw.run("meters", "--json").stdout)
    assert listed[0]["handling"] == ["reversed-sequence"]
    text = gw.run("meters").stdout
    assert "reversed-sequence" in text
    status = json.loads(gw.run("status", "--json").stdout)
    assert [m["handling"] for m in status["meters"]] == [["reversed-sequence"]]
    assert "handling: reversed-sequence" in gw.run("status").stdout


def test_generic_gls(private_bus, standin, tmp_path):
    address = "C0:FF:EE:00:00:07"
    standin("--profile", "generic-gls")
    gw = Gateway(private_bus, tmp_path)
    first, second = sync_twice(gw, private_bus, address, '{"time": "2024-03-07T12:00:00", "mgdl": 140}')
    assert address + ": 10 new readings" in first
    assert address + ": 1 new reading" in second
    expected = [(series_time(i), float(SERIES[i]), None) for i in range(10)]
    expected.append(("2024-03-07T12:00:00", 140.0, None))
    assert summary(gw.readings()) == expected
    assert json.loads(gw.run("meters", "--json").stdout)[0]["handling"] == []


def describe(bus, address):
    return json.loads(control(bus, "Describe", "s", [address])[0])


def test_profile_flags_combine_with_meter_flags(private_bus, standin):
    # --records regenerates the profile's series (numbered newest first on this meter), --address and
    # --name replace its identity, the rest of the profile stays.
    standin("--profile", "taidoc-reversed", "--records", "3", "--address", "aa:bb:cc:00:00:01", "--name", "Mine",
            "--high-at", "0")
    assert control(private_bus, "Meters")[0] == ["AA:BB:CC:00:00:01"]
    m = describe(private_bus, "AA:BB:CC:00:00:01")
    assert m["name"] == "Mine"
    assert m["deviceInformation"]["firmware"] == "1.2.4"
    assert m["quirks"]["numbering"] == "newest-first"
    recs = sorted(m["records"], key=lambda r: r["sequence"])
    assert [(r["sequence"], r["time"]) for r in recs] == [
        (0, "2024-03-05T15:30:00"), (1, "2024-03-05T11:30:00"), (2, "2024-03-05T07:30:00")]
    assert recs[0].get("result") == "high"


def test_profile_in_a_meter_file(private_bus, standin, meter_file):
    standin("--meter", meter_file({"profile": "accu-chek-instant", "address": "C0:26:DA:0A:0B:0C"}))
    m = describe(private_bus, "C0:26:DA:0A:0B:0C")
    assert m["contextCharacteristic"] is False
    assert m["deviceInformation"]["model"] == "Accu-Chek Instant"
    assert len(m["records"]) == 14


def test_the_bluez_front_end_takes_a_profile(private_bus):
    # No bluetoothd on this bus: the profile is accepted, and the front end fails only at the adapter.
    result = subprocess.run([simulator_binary(), "--bluez", "--bus", private_bus, "--profile",
                             "contour-next-one"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 69, result.stderr
    assert "cannot read the address of adapter hci0" in result.stderr
