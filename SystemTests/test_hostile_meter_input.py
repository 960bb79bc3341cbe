"""Bad --profile values, profile and meter flags that do not fit together, and bad meter files: one line on
stderr naming the problem, exit 64 (usage) or 65 (data), nothing started. Errors come before the bus is
touched, so the bus address is one that does not exist."""
import json
import os
import pathlib
import subprocess

import pytest

BIN = os.environ.get("GLUCOSE_GATEWAY_BIN", str(pathlib.Path(__file__).resolve().parents[1] / ".build/debug/glucose-gateway"))
SIMULATOR = os.environ.get("GLUCOSE_GATEWAY_SIMULATOR_BIN", str(pathlib.Path(BIN).parent / "glucose-gateway-simulator"))
NO_BUS = "unix:path=/nonexistent/glucose-gateway-test.sock"


def simulate(*args):
    return subprocess.run([SIMULATOR, "--standin", "--bus", NO_BUS, *args],
                          capture_output=True, text=True, timeout=20)


@pytest.mark.parametrize("args, expected", [
    (["--profile", "nope"], "--profile must be one of contour-next-one, "),
    (["--profile", ""], "--profile must be one of"),
    (["--profile", "caresens\x1b[2J\u202e"], "--profile must be one of"),
    (["--profile"], "--profile needs a value"),
    (["--profile", "caresens", "--profile", "fora-tng"], "--profile is given more than once"),
    (["--profile", "taidoc-reversed", "--first-sequence", "65536"], "--first-sequence must be an integer in 0...65535"),
    (["--profile", "taidoc-reversed", "--records", "-1"], "--records must be an integer"),
    (["--profile", "fora-tng", "--pin", "12345"], "--pin: must be six digits"),
    (["--profile", "caresens", "--clock-skew", "nan"], "--clock-skew: must be seconds within ten years"),
    (["--profile", "caresens", "--clock-skew", "inf"], "--clock-skew: must be seconds within ten years"),
    (["--profile", "caresens", "--clock-utc-offset", "841"], "--clock-utc-offset: must be minutes in -840...840"),
    (["--profile", "caresens", "--clock", "sundial"], "--clock: must be one of"),
    (["--profile", "generic-gls", "--high-at", "65536"], "--high-at needs a sequence number"),
    (["--profile", "generic-gls", "--start", "2024-02-30T00:00:00"], "--start: is not a valid date-time"),
    # Clock flags on a meter without a clock would change nothing: refused, not ignored.
    (["--profile", "fora-tng", "--clock-skew", "10"], "need a meter clock"),
    (["--profile", "taidoc-reversed", "--clock-utc-offset", "60"], "need a meter clock"),
    (["--profile", "caresens", "--clock", "none", "--clock-read-only"], "need a meter clock"),
], ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_a_bad_profile_or_meter_flag_is_one_line_and_exit_64(args, expected):
    r = simulate(*args)
    assert r.returncode == 64, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and r.stdout == "", r.stderr
    assert lines[0].startswith("glucose-gateway-simulator: ") and expected in lines[0], lines[0]
    assert "\x1b" not in r.stderr and "\u202e" not in r.stderr


def test_a_profile_with_a_meter_file_is_refused(tmp_path):
    f = tmp_path / "m.json"
    f.write_text(json.dumps({"profile": "caresens"}))
    r = simulate("--meter", str(f), "--profile", "fora-tng")
    assert r.returncode == 64
    assert r.stderr.strip().splitlines() == ["glucose-gateway-simulator: use either --meter files or meter flags, not both"]


@pytest.mark.parametrize("meter, expected", [
    ({"profile": "nope"}, "profile: must be one of"),
    ({"profile": ["caresens"]}, "profile: must be a string"),
    ({"profile": "taidoc-reversed", "quirks": {"numbering": "sideways"}}, "quirks.numbering"),
    ({"profile": "caresens", "clock": {"kind": "vendor", "skewSeconds": 1e300}}, "clock.skewSeconds"),
    ({"profile": "caresens", "clock": {"kind": "cts", "utcOffsetMinutes": 1e9}}, "clock.utcOffsetMinutes"),
    ({"profile": "caresens", "generate": {"count": 10 ** 12}}, "generate.count"),
    ({"profile": "caresens", "records": [{"sequence": 1, "time": "2024-03-05T07:30:00", "mgdl": 100}] * 2},
     "sequence number 1 appears twice"),
    ({"profile": "contour-next-one", "deviceInformation": {"manufacturer": 5}}, "deviceInformation.manufacturer"),
], ids=lambda v: json.dumps(v)[:60] if isinstance(v, dict) else None)
def test_a_bad_meter_file_is_one_line_and_exit_65(tmp_path, meter, expected):
    f = tmp_path / "m.json"
    f.write_text(json.dumps(meter))
    r = simulate("--meter", str(f))
    assert r.returncode == 65, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("glucose-gateway-simulator: meter file %s: " % f) and expected in lines[0], lines[0]


def test_a_meter_file_that_is_not_json_or_too_deep_is_one_line(tmp_path):
    for text in ["\xff\xfe{", "[" * 100000 + "]" * 100000, '{"profile": "caresens", ' * 5000]:
        f = tmp_path / "m.json"
        f.write_bytes(text.encode("utf-8", "surrogateescape") if isinstance(text, str) else text)
        r = simulate("--meter", str(f))
        assert r.returncode == 65, r.stderr[:300]
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr[:300]
