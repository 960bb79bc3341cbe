"""`[nightscout] device_status = true`: the daemon reports itself in Nightscout's `devicestatus`, over API v1
and v3, against the loopback Nightscout double: one document at start, one after a download with the meter's
battery state, then one per interval; no meter address or serial number in any of them."""
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gg_daemon import Gateway, NightscoutDouble, control, gateways, wait_until  # noqa: F401 (fixtures)

A = "C0:26:DA:01:02:03"
SERIAL = "SN-DEVSTAT-7731"
PIN = "123456"
HERE = Path(__file__).resolve().parent
TOKEN = "gateway-5e6f7a8b9c0d1e2f"


def meter():
    records = [{"sequence": 1, "time": "2024-03-05T06:00:00", "timeOffset": 0, "mgdl": 101},
               {"sequence": 2, "time": "2024-03-05T07:00:00", "timeOffset": 0, "mgdl": 96, "status": ["batteryLow"]}]
    return {"address": A, "name": "meter+0203", "deviceInformation": {"model": "Contour", "serial": SERIAL}, "pin": PIN, "bonding": True, "records": records,
            "advertising": "off"}


def with_device_status(gw, extra=""):
    text = open(gw.config).read()
    open(gw.config, "w").write(text.replace("[nightscout]\n", "[nightscout]\ndevice_status = true\ndevice_status_interval_s = 60\n" + extra, 1))


def no_identity(docs):
    text = json.dumps(docs)
    assert A not in text and A.replace(":", "") not in text and SERIAL not in text


@pytest.fixture
def nightscout(tmp_path):
    ns = NightscoutDouble(log_path=str(tmp_path / "nightscout.log"))
    yield ns
    ns.stop()


def test_v1_a_document_at_start_after_a_download_and_once_per_interval(private_bus, standin, meter_file, tmp_path,
                                                                       gateways, nightscout):
    standin("--meter", meter_file(meter()))
    # Time 60 times as fast on the upload side: the minute between documents is a second.
    gw = Gateway(tmp_path, private_bus, nightscout_url=nightscout.url, secret=nightscout.secret,
                 args=("--quiet-after", "0.3", "--time-scale", "60"))
    gateways.append(gw)
    with_device_status(gw)
    control(private_bus, "Advertise", A, 60.0)
    gw.pair(A, PIN)
    control(private_bus, "Advertise", A, 0.0)
    gw.start()

    first = wait_until("a document at start", lambda: nightscout._request("GET", "/__devicestatus"), timeout=20)[0]
    started = time.monotonic()
    assert first["device"].startswith("glucose-gateway://")
    assert first["uploader"]["name"].startswith("glucose-gateway on ")
    assert "battery" not in first["uploader"]
    assert first["gateway"]["health"] == "ok" and first["gateway"]["pending"] == 0
    assert [m["state"] for m in first["gateway"]["meters"]] == ["paired"]
    assert "battery" not in first["gateway"]["meters"][0]   # no reading yet

    # The meter comes in reach: its readings are stored and uploaded, and a document says its battery is low.
    control(private_bus, "Advertise", A, 60.0)
    wait_until("two entries", lambda: len(nightscout.entries()) == 2, timeout=30)
    after = wait_until("a document after the download", lambda: [
        d for d in nightscout._request("GET", "/__devicestatus") if d["gateway"]["meters"][0].get("battery") == "low"],
        timeout=20)
    meter_doc = after[0]["gateway"]["meters"][0]
    assert meter_doc["lastSync"].endswith("Z") and meter_doc["lastSeen"].endswith("Z")

    # Then one per interval (a second at this time scale), no more often, each stored once.
    docs = wait_until("four more documents", lambda: (lambda d: d if len(d) >= len(after) + 4 else None)(
        [d for d in nightscout._request("GET", "/__devicestatus") if d["gateway"]["meters"][0].get("battery")]), timeout=30)
    assert len({d["identifier"] for d in docs}) == len(docs)
    all_docs = nightscout._request("GET", "/__devicestatus")
    no_identity(all_docs)
    # At most one a (scaled) minute, plus the one after the download.
    assert len(all_docs) <= (time.monotonic() - started) * 1.5 + 3, len(all_docs)
    gw.stop()
    # Nothing of it counts as an upload: the entries are the two readings.
    assert len(nightscout.entries()) == 2


def test_v1_the_setting_is_off_by_default(private_bus, standin, meter_file, tmp_path, gateways, nightscout):
    standin("--meter", meter_file(meter()))
    gw = Gateway(tmp_path, private_bus, nightscout_url=nightscout.url, secret=nightscout.secret,
                 args=("--quiet-after", "0.3", "--time-scale", "60"))
    gateways.append(gw)
    control(private_bus, "Advertise", A, 60.0)
    gw.pair(A, PIN)
    gw.start()
    wait_until("two entries", lambda: len(nightscout.entries()) == 2, timeout=30)
    gw.stop()
    assert nightscout._request("GET", "/__devicestatus") == []


class NightscoutV3:
    """fake_nightscout.py with an access token that may create devicestatus documents."""

    def __init__(self, log_path):
        stderr = open(log_path, "w")
        self.process = subprocess.Popen(
            [sys.executable, str(HERE / "fake_nightscout.py"), "--secret", "unused-secret-1234",
             "--access-token", TOKEN + "=api:entries:create,api:devicestatus:create,*:*:read"],
            stdout=subprocess.PIPE, stderr=stderr, text=True)
        ports = json.loads(self.process.stdout.readline())
        self.url = "http://127.0.0.1:%d" % ports["port"]
        self.control = NightscoutDouble.__new__(NightscoutDouble)
        self.control.control_port = ports["control_port"]

    def v3(self):
        return self.control._request("GET", "/__v3")

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=10)


def test_v3_documents_reach_the_devicestatus_collection_with_the_token(private_bus, standin, meter_file, tmp_path,
                                                                        gateways):
    server = NightscoutV3(str(tmp_path / "nightscout.log"))
    try:
        standin("--meter", meter_file(meter()))
        token_file = tmp_path / "ns.token"
        token_file.write_text(TOKEN + "\n")
        os.chmod(token_file, 0o600)
        gw = Gateway(tmp_path, private_bus, args=("--quiet-after", "0.3", "--time-scale", "60"),
                     extra_config='[nightscout]\nurl = "%s"\napi = "v3"\ntoken_file = "%s"\n[network]\nnetwork_timeout_ms = 2000\n'
                     % (server.url, token_file))
        gateways.append(gw)
        with_device_status(gw)
        control(private_bus, "Advertise", A, 60.0)
        gw.pair(A, PIN)
        gw.start()
        wait_until("two entries", lambda: len(server.v3()["entries"]) == 2, timeout=30)
        docs = wait_until("three documents", lambda: (lambda d: d if len(d) >= 3 else None)(server.v3()["devicestatus"]),
                          timeout=30)
        assert all(d["app"] == "glucose-gateway" and d["identifier"] for d in docs)
        assert len({d["identifier"] for d in docs}) == len(docs)
        assert any(d["gateway"]["meters"][0].get("battery") == "low" for d in docs)
        no_identity(docs)
        log = gw.log()
        assert TOKEN not in log and "eyJ" not in log
        gw.stop()
    finally:
        server.stop()
