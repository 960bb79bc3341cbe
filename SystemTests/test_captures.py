"""`glucose-gateway capture` and the simulator's replay of a capture (`--meter CAPTURE`), through the BlueZ
stand-in: a capture of the contour-next-one profile replays and the gateway downloads the same readings
from it; a capture holds nothing that identifies the meter; --redact-values takes the values out; a bad
capture is one line and exit 65 from the simulator; the project's own captures replay."""
import json
import os
import pathlib
import stat
import subprocess

import pytest

from gg_bus import simulator_binary
from gg_capture import CAPTURES, PROFILES, capture
from gg_download import Gateway

REPO = pathlib.Path(__file__).resolve().parents[1]
PLACEHOLDER = "00:00:5E:00:53:01"
NO_BUS = "unix:path=/nonexistent/glucose-gateway-test.sock"


def readings_of(gw):
    """What a user sees of each reading: sequence, time as the meter showed it, value, exclusion."""
    return sorted((r["sequence"], r["local_time"], r.get("mgdl"), r.get("exclusion")) for r in gw.readings())


def values(capture_json, uuid):
    return [bytes.fromhex(e["value"]) for e in capture_json["events"] if e["op"] == "value" and e["uuid"] == uuid]


def test_a_capture_replays_and_the_gateway_downloads_the_same_readings(private_bus, standin, tmp_path):
    address = PROFILES["contour-next-one"]
    meter = standin("--profile", "contour-next-one")
    (tmp_path / "original").mkdir()
    original = Gateway(private_bus, tmp_path / "original")
    original.pair(address)
    out = tmp_path / "contour.capture.json"
    r = capture(original, address, out)
    assert r.returncode == 0, r.stderr
    assert stat.S_IMODE(os.stat(out).st_mode) == 0o600
    # The capture stored nothing: the download that follows gets every record.
    assert original.readings() == []
    original.sync(address)
    expected = readings_of(original)
    assert len(expected) == 12

    text = out.read_text()
    data = json.loads(text)
    assert data["format"] == "glucose-gateway-capture" and data["origin"] == "meter"
    assert data["gateway"] == (REPO / "VERSION").read_text().strip()
    assert data["meter"]["model"] == "Contour Next One"
    assert data["meter"]["firmware"] == "1.4.0"
    assert len(values(data, "2a18")) == 12 and len(values(data, "2a34")) == 12
    assert values(data, "2a52") == [bytes.fromhex("06000101")]
    assert [e["op"] for e in data["events"]][-1] == "disconnected"

    # The replay: a new stand-in playing the capture, a new gateway with its own database.
    (tmp_path / "replay").mkdir()
    meter.stop()
    standin("--meter", str(out))
    replayed = Gateway(private_bus, tmp_path / "replay")
    replayed.pair(PLACEHOLDER)
    result = replayed.sync(PLACEHOLDER)
    assert PLACEHOLDER + ": 12 new readings" in result.stdout
    assert readings_of(replayed) == expected
    # And incrementally: nothing new the second time.
    assert PLACEHOLDER + ": 0 new readings" in replayed.sync(PLACEHOLDER).stdout


def test_a_capture_holds_no_address_serial_name_or_key(private_bus, standin, tmp_path):
    address = PROFILES["contour-next-one"]
    standin("--profile", "contour-next-one")
    gw = Gateway(private_bus, tmp_path)
    gw.pair(address)
    out = tmp_path / "c.json"
    assert capture(gw, address, out).returncode == 0
    text = out.read_text().lower()
    serial = "7012345"
    forbidden = {
        "address": address.lower(), "address without colons": address.replace(":", "").lower(),
        "address as bytes on the wire": bytes.fromhex(address.replace(":", ""))[::-1].hex(),
        "serial": serial, "serial as hex": serial.encode().hex(),
        "name": "contour7012345", "pin": "123456", "pin as hex": (123456).to_bytes(4, "little").hex(),
    }
    for what, needle in forbidden.items():
        assert needle not in text, what
    assert PLACEHOLDER.lower() in text
    # No place for a key: the file's members are the format's, and every value is one a GATT client
    # reads or receives (a pairing key, the PIN, never passes through GATT).
    data = json.loads(out.read_text())
    assert set(data) == {"format", "version", "origin", "gateway", "bluez", "address", "meter", "redacted", "events"}
    assert set(data["meter"]) <= {"manufacturer", "model", "firmware", "software"}
    assert all(set(e) <= {"ms", "op", "uuid", "value", "error", "withheld"} for e in data["events"])
    with_values = {e["uuid"] for e in data["events"] if "value" in e}
    assert with_values <= {"2a29", "2a24", "2a26", "2a28", "2a51", "2a2b", "2a08", "2a18", "2a34", "2a52"}, with_values
    assert {"address", "serial", "system-id", "name", "keys"} <= set(data["redacted"])
    serial_read = [e for e in data["events"] if e["op"] == "read" and e["uuid"] == "2a25"]
    assert serial_read and all(e.get("withheld") and "value" not in e for e in serial_read)


def test_redact_values_takes_out_every_value_and_time(private_bus, standin, tmp_path):
    address = PROFILES["contour-next-one"]
    standin("--profile", "contour-next-one")
    gw = Gateway(private_bus, tmp_path)
    gw.pair(address)
    plain, redacted = tmp_path / "plain.json", tmp_path / "redacted.json"
    assert capture(gw, address, plain).returncode == 0
    assert capture(gw, address, redacted, "--redact-values").returncode == 0
    p, r = json.loads(plain.read_text()), json.loads(redacted.read_text())
    assert "values" in r["redacted"]
    text = redacted.read_text()
    measured = values(p, "2a18")
    assert len(measured) == 12 and len(values(r, "2a18")) == 12
    for original, kept in zip(measured, values(r, "2a18")):
        assert original.hex() not in text
        assert len(kept) == len(original) and kept[:3] == original[:3]        # flags and sequence number stay
        # The base time (bytes 3-9) as bytes in the plain capture, absent from the redacted one.
        assert original[3:10].hex() not in text
        assert kept[3:10] == bytes([0xD0, 0x07, 1, 1, 0, 0, 0])
        assert kept[10:12] == b"\xff\x07"                                    # the concentration is NaN
        # The value as a number: the SFLOAT bytes of the plain capture appear nowhere.
        assert original[10:12].hex() not in text
    # The clock the meter showed is gone too.
    clock = [e for e in r["events"] if e["op"] == "read" and e["uuid"] == "2a2b"]
    assert clock and clock[0]["value"].startswith("d007010100000")


BAD = {
    "not a capture version": {"format": "glucose-gateway-capture", "version": 9, "origin": "meter", "gateway": "0", "events": []},
    "bad hex": {"format": "glucose-gateway-capture", "version": 1, "origin": "meter", "gateway": "0",
                "events": [{"ms": 0, "op": "value", "uuid": "2a18", "value": "zz"}]},
    "value too long": {"format": "glucose-gateway-capture", "version": 1, "origin": "meter", "gateway": "0",
                       "events": [{"ms": 0, "op": "value", "uuid": "2a18", "value": "00" * 600}]},
    "two measurements with one sequence number": {
        "format": "glucose-gateway-capture", "version": 1, "origin": "meter", "gateway": "0",
        "events": [{"ms": 0, "op": "value", "uuid": "2a18", "value": "000100e807050108000000"},
                   {"ms": 1, "op": "value", "uuid": "2a18", "value": "000100e807050108000000"}]},
    "an unknown op": {"format": "glucose-gateway-capture", "version": 1, "origin": "meter", "gateway": "0",
                      "events": [{"ms": 0, "op": "delete", "uuid": "2a52"}]},
    "time as a string": {"format": "glucose-gateway-capture", "version": 1, "origin": "meter", "gateway": "0",
                         "events": [{"ms": "0", "op": "read", "uuid": "2a29"}]},
    "events not a list": {"format": "glucose-gateway-capture", "version": 1, "origin": "meter", "gateway": "0", "events": {}},
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_malformed_capture_is_one_line_and_exit_65(tmp_path, name):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(BAD[name]))
    r = subprocess.run([simulator_binary(), "--standin", "--bus", NO_BUS, "--meter", str(path)],
                       capture_output=True, text=True, timeout=20)
    assert r.returncode == 65, (r.returncode, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("glucose-gateway-simulator: capture %s: " % path), lines


def test_a_cut_capture_is_one_line_and_exit_65(tmp_path):
    good = (CAPTURES / "contour-next-one.json").read_bytes()
    for n in (0, 1, 40, len(good) // 2, len(good) - 2):
        path = tmp_path / ("cut%d.json" % n)
        path.write_bytes(good[:n])
        r = subprocess.run([simulator_binary(), "--standin", "--bus", NO_BUS, "--meter", str(path)],
                           capture_output=True, text=True, timeout=20)
        assert r.returncode == 65, (n, r.returncode, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1, (n, r.stderr)


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_each_profile_capture_replays(private_bus, standin, tmp_path, profile):
    path = CAPTURES / (profile + ".json")
    data = json.loads(path.read_text())
    assert data["origin"] == "simulator" and data["profile"] == profile
    standin("--meter", str(path))
    gw = Gateway(private_bus, tmp_path)
    gw.pair(PLACEHOLDER)
    gw.sync(PLACEHOLDER)
    sequences = sorted(int.from_bytes(v[1:3], "little") for v in values(data, "2a18"))
    assert gw.sequences() == sequences
