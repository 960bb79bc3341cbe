"""`glucose-gateway decode CHARACTERISTIC HEX`: the built binary end to end. One JSON object on stdout and
exit 0; malformed input exits 65 and usage errors 64, each with exactly one line on stderr."""
import json
import os
import pathlib
import subprocess

import pytest

BIN = os.environ.get("GLUCOSE_GATEWAY_BIN", str(pathlib.Path(__file__).resolve().parents[1] / ".build/debug/glucose-gateway"))


def decode(*args):
    return subprocess.run([BIN, "decode", *args], capture_output=True, text=True, timeout=30)


def decoded(*args):
    r = decode(*args)
    assert r.returncode == 0, r.stderr
    assert r.stderr == ""
    # Exactly one JSON object on stdout (no trailing text).
    value, end = json.JSONDecoder().raw_decode(r.stdout)
    assert r.stdout[end:].strip() == ""
    assert isinstance(value, dict)
    return value


def test_full_measurement_btmon_spacing():
    m = decoded("2a18", "1b 34 12 e8 07 03 05 0e 1e 0f 3c 00 6f b0 11 01 00")
    assert list(m) == ["sequence", "base_time", "user_facing_time", "time_offset_minutes", "unit", "concentration",
                       "mg_dl", "mmol_l", "type", "type_name", "sample_location", "sample_location_name",
                       "sensor_status_raw", "sensor_status", "context_follows"]
    assert m["sequence"] == 4660
    assert m["base_time"] == "2024-03-05T14:30:15"
    assert m["user_facing_time"] == "2024-03-05T15:30:15"
    assert m["time_offset_minutes"] == 60
    assert m["unit"] == "kg/L"
    assert m["concentration"] == 0.00111
    assert m["mg_dl"] == 111.0
    assert m["mmol_l"] == 6.16
    assert (m["type"], m["sample_location"]) == (1, 1)
    assert m["sensor_status"] == ["battery_low"]
    assert m["context_follows"] is True


@pytest.mark.parametrize("form", [
    "1B:34:12:E8:07:03:05:0E:1E:0F:3C:00:6F:B0:11:01:00",   # Wireshark
    "(0x) 1B-34-12-E8-07-03-05-0E-1E-0F-3C-00-6F-B0-11-01-00",  # nRF Connect
    "0x1B3412E80703050E1E0F3C006FB0110100",
])
def test_capture_formats(form):
    assert decoded("0x2A18", form)["sequence"] == 4660


def test_hex_split_over_arguments_and_long_uuid():
    m = decoded("00002a18-0000-1000-8000-00805f9b34fb", "1b", "34", "12", "e8 07 03 05 0e 1e 0f 3c 00 6f b0 11 01 00")
    assert m["sequence"] == 4660


def test_hi_reading():
    m = decoded("2a18", "0b 05 00 e8 07 03 05 0e 1e 00 00 00 fe 07 f8 20 00")
    assert m["concentration"] is None
    assert m["concentration_special"] == "+inf"
    assert "mg_dl" not in m and "mmol_l" not in m
    assert m["sensor_status_raw"] == 0x20
    assert m["sensor_status"] == ["result_too_high"]


def test_lo_reading_accu_chek():
    m = decoded("2a18", "0b 06 00 e5 07 0b 0e 0a 14 1e 3c 00 02 08 f8 40 00")
    assert m["concentration"] is None
    assert m["concentration_special"] == "-inf"
    assert m["sensor_status"] == ["result_too_low"]
    assert (m["type_name"], m["sample_location_name"]) == ("undetermined_plasma", "not_available")


def test_mol_per_litre_and_negative_offset():
    m = decoded("2a18", "07 01 00 e8 07 01 01 03 00 00 5c fe 37 c0 12")
    assert m["unit"] == "mol/L"
    assert m["concentration"] == 0.0055
    assert m["mmol_l"] == 5.5
    assert m["mg_dl"] == 99.1
    assert m["time_offset_minutes"] == -420
    assert m["user_facing_time"] == "2023-12-31T20:00:00"


def test_absent_fields_are_left_out():
    m = decoded("2a18", "00 2a 00 e8 07 03 05 0e 1e 00")
    assert m == {"sequence": 42, "base_time": "2024-03-05T14:30:00", "user_facing_time": "2024-03-05T14:30:00",
                 "context_follows": False}


def test_context_every_field():
    c = decoded("2a34", "ff 00 00 b3 03 5a d0 04 12 3c 00 32 04 d2 f4 59 f1")
    assert c == {"sequence": 0, "extended_flags": 0xB3, "carbohydrate_id": 3, "carbohydrate_kg": 0.09, "meal": 4,
                 "tester": 2, "health": 1, "exercise_duration_s": 60, "exercise_intensity_pct": 50,
                 "medication_id": 4, "medication_l": 123.4, "hba1c_pct": 34.5}
    assert decoded("2a34", "10 01 00 01 05 a0")["medication_kg"] == 0.000005


def test_features():
    f = decoded("2a51", "00 04")
    assert f == {"features_raw": 1024, "features": ["multiple_bond"]}


def test_racp_request_and_responses():
    assert decoded("2a52", "01 03 01 2d 00") == {
        "opcode": 1, "opcode_name": "report_stored_records", "operator": 3, "operator_name": "greater_than_or_equal",
        "filter_type": 1, "operand_min": 45}
    assert decoded("2a52", "05 00 0a 01")["number_of_records"] == 266
    r = decoded("2a52", "06 00 01 06")
    assert (r["request_opcode"], r["response_code"], r["response_name"]) == (1, 6, "no_records_found")


def test_compact_is_one_line():
    r = decode("--compact", "2a51", "00 04")
    assert r.returncode == 0
    assert r.stdout == '{"features_raw":1024,"features":["multiple_bond"]}\n'


@pytest.mark.parametrize("args,status,needle", [
    (["2a18", "00 01 00 e8 07 0d 05 0e 1e 00"], 65, "Base Time month"),
    (["2a18", "01 01 00 e8 07 03 05 0e 1e 00 3c"], 65, "Time Offset"),
    (["2a18", ""], 65, "Flags"),
    (["2a18", "1b3"], 65, "odd number"),
    (["2a18", "1b 0g"], 65, "'g'"),
    (["2a34", "01 01 00 01 5a"], 65, "Carbohydrate"),
    (["2a51", "79"], 65, "Glucose Feature"),
    (["2a52", "05 00 01 00 00"], 65, "Number of Stored Records"),
    (["2a52", "09 01"], 65, "Op Code"),
    (["2a19", "00"], 64, "unknown characteristic"),
    (["2a18"], 64, "missing HEX"),
    ([], 64, "missing CHARACTERISTIC"),
    (["--bogus", "2a18", "00"], 64, "--bogus"),
])
def test_errors_are_one_line_with_status(args, status, needle):
    r = decode(*args)
    assert r.returncode == status, (r.stdout, r.stderr)
    assert r.stdout == ""
    assert r.stderr.endswith("\n")
    assert r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("glucose-gateway decode: ")
    assert needle in r.stderr


def test_help():
    r = subprocess.run([BIN, "decode", "--help"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0
    assert r.stdout.startswith("usage: glucose-gateway decode")
