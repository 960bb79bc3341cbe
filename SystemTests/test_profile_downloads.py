"""The built-in meter profiles of `simulate-meter --profile` against the gateway through the BlueZ stand-in:
pair, sync, a new record, sync again; every reading once, with its exact value and time, written out here."""
import datetime
import subprocess

from gg_bus import gateway_binary
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
    result = subprocess.run([gateway_binary(), "simulate-meter", "--list-profiles"], capture_output=True, text=True,
                            timeout=30)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    names = [line.split()[0] for line in lines]
    assert names == ["contour-next-one", "accu-chek-guide", "accu-chek-instant", "caresens", "fora-tng",
                     "taidoc-reversed", "generic-gls"]
    assert all(len(line.split(None, 1)) == 2 for line in lines)


def test_unknown_profile_is_a_usage_error():
    result = subprocess.run([gateway_binary(), "simulate-meter", "--standin", "--profile", "contour"],
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
