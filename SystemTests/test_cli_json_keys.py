"""One key style for every command's --json output: snake_case. The camelCase keys that `meters --json` and
`readings --json` printed up to 0.1 are still written for one release, after the new ones and with the same
values (README, "Commands"); these tests pin both, so dropping the old keys is a decision."""
import json
import re

from gg_download import Gateway, meter, records

ADDRESS = "C0:26:DA:01:02:03"
SNAKE = re.compile(r"^[a-z][a-z0-9]*(_[a-z0-9]+)*$")

# new key -> the deprecated camelCase key printed alongside it
METERS_OLD = {"time_zone": "timeZone", "paired_at": "pairedAt", "unpaired_at": "unpairedAt",
              "highest_sequence": "highestSequence", "last_sync": "lastSync", "clock_skew_seconds": "clockSkewSeconds"}
READINGS_OLD = {"meter_time": "meterTime", "local_time": "localTime", "base_time": "baseTime",
                "time_offset_minutes": "timeOffsetMinutes", "sample_location": "sampleLocation",
                "sensor_status": "sensorStatus", "received_at": "receivedAt"}
CONTEXT_OLD = {"carbohydrate_id": "carbohydrateID", "carbohydrate_grams": "carbohydrateGrams",
               "exercise_duration_seconds": "exerciseDurationSeconds",
               "exercise_intensity_percent": "exerciseIntensityPercent", "medication_id": "medicationID",
               "medication_amount": "medicationAmount", "medication_unit": "medicationUnit",
               "hba1c_percent": "hba1cPercent"}


def object_keys(value):
    """Every key of every object in a JSON value, at any depth."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from object_keys(v)
    elif isinstance(value, list):
        for v in value:
            yield from object_keys(v)


def assert_snake_case(value, deprecated=()):
    bad = sorted({k for k in object_keys(value) if not SNAKE.match(k) and k not in deprecated})
    assert bad == [], "keys not in snake_case: %s" % bad


def assert_old_keys_follow_new_ones(obj, old_keys):
    """Each deprecated key is there exactly when its new key is, with the same value, after every new key."""
    keys = list(obj)
    new_part = [k for k in keys if k not in old_keys.values()]
    for new, old in old_keys.items():
        if new in obj:
            assert old in obj and obj[old] == obj[new], (new, old, obj)
            assert keys.index(old) > keys.index(new_part[-1])
        else:
            assert old not in obj, (old, obj)


def synced_gateway(private_bus, standin, meter_file, tmp_path):
    recs = records(1, 3)
    recs[1]["context"] = {"meal": 2, "carbohydrateGrams": 60, "tester": 1, "health": 2, "exerciseSeconds": 600,
                          "exerciseIntensity": 40, "medicationMilligrams": 2, "hba1c": 6.5}
    standin("--meter", meter_file(meter(records_list=recs)))
    gw = Gateway(private_bus, tmp_path)
    gw.pair(ADDRESS, time_zone="Europe/Berlin")
    gw.sync()
    return gw


def test_meters_json_keys_are_snake_case_and_the_old_ones_still_there(private_bus, standin, meter_file, tmp_path):
    gw = synced_gateway(private_bus, standin, meter_file, tmp_path)
    result = gw.run("meters", "--json")
    assert result.returncode == 0, result.stderr
    meters = json.loads(result.stdout)
    assert len(meters) == 1
    m = meters[0]
    assert m["time_zone"] == "Europe/Berlin"
    assert m["highest_sequence"] == 3
    assert m["last_sync"].endswith("Z") and m["paired_at"].endswith("Z")
    assert m["readings"] == 3
    assert_snake_case(meters, deprecated=METERS_OLD.values())
    assert_old_keys_follow_new_ones(m, METERS_OLD)
    assert m["timeZone"] == "Europe/Berlin" and m["highestSequence"] == 3 and m["lastSync"] == m["last_sync"]


def test_readings_json_keys_are_snake_case_and_the_old_ones_still_there(private_bus, standin, meter_file, tmp_path):
    gw = synced_gateway(private_bus, standin, meter_file, tmp_path)
    readings = gw.readings()
    assert [r["sequence"] for r in readings] == [1, 2, 3]
    assert_snake_case(readings, deprecated=set(READINGS_OLD.values()) | set(CONTEXT_OLD.values()))
    for r in readings:
        assert_old_keys_follow_new_ones(r, READINGS_OLD)
    first = readings[0]
    # The record's base time is 07:00 with a time offset of 60 minutes: the meter showed 08:00.
    assert first["local_time"] == "2024-03-05T08:00:00" and first["localTime"] == "2024-03-05T08:00:00"
    assert first["base_time"] == "2024-03-05T07:00:00" and first["baseTime"] == "2024-03-05T07:00:00"
    assert first["meter_time"] == first["meterTime"] and first["received_at"] == first["receivedAt"]
    assert first["time_offset_minutes"] == 60 and first["timeOffsetMinutes"] == 60
    context = readings[1]["context"]
    assert context["carbohydrate_grams"] == 60 and context["carbohydrateGrams"] == 60
    assert context["exercise_duration_seconds"] == 600 and context["exerciseIntensityPercent"] == 40
    assert_old_keys_follow_new_ones(context, CONTEXT_OLD)
    assert "context" not in readings[0]


def test_status_scan_and_decode_json_keys_are_snake_case(private_bus, standin, meter_file, tmp_path):
    gw = synced_gateway(private_bus, standin, meter_file, tmp_path)
    status = gw.run("status", "--json")
    assert status.returncode == 0, status.stderr
    shown = json.loads(status.stdout)
    assert shown["meters"][0]["address"] == ADDRESS
    assert_snake_case(shown)
    scan = gw.run("scan", "--timeout", "1", "--json")
    assert scan.returncode == 0, scan.stderr
    found = json.loads(scan.stdout)
    assert [m["address"] for m in found] == [ADDRESS] and found[0]["paired"] is True
    assert_snake_case(found)
    decoded = gw.run("decode", "2a18", "1b 04 00 e8 07 03 05 07 00 00 3c 00 60 b0 f8 00 00")
    assert decoded.returncode == 0, decoded.stderr
    assert_snake_case(json.loads(decoded.stdout))
