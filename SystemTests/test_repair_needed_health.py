"""A meter that lost its bond reaches the two remote health channels: `glucose-gateway run` with a heartbeat
to a loopback monitor and [mqtt] to a real mosquitto. The stand-in's ForgetBond plays the lost bond; the
heartbeat then fails with the meter's address as its reason (no PIN, no secret), Home Assistant's retained
"Needs pairing again" state turns ON under the meter's device; after `pair` both are healthy again."""
import json
import os

import pytest

from gg_daemon import Gateway, control, gateways, wait_until  # noqa: F401 (fixtures)
from gg_heartbeat import HeartbeatReceiver
import test_mqtt as mq   # its broker helper only (a module import: its tests are not collected twice)

A = "C0:26:DA:01:02:03"
METER_ID = "c026da010203"
PIN = "123456"
PREFIX = "gg"
TOKEN = "5eed0bad-b0nd-4c0d-9e7a-pairagain001"
STATE = "%s/%s/repair_needed" % (PREFIX, METER_ID)
CONFIG = "homeassistant/binary_sensor/%s/repair_needed/config" % METER_ID


@pytest.fixture
def broker(tmp_path):
    b = mq.Mosquitto(tmp_path)
    yield b
    b.close()


@pytest.fixture
def monitor():
    receiver = HeartbeatReceiver()
    yield receiver
    receiver.stop()


def meter(count=2):
    records = [{"sequence": 1 + i, "time": "2024-03-05T06:%02d:00" % i, "timeOffset": 0, "mgdl": 95 + i} for i in range(count)]
    return {"address": A, "name": "meter+0203", "pin": PIN, "bonding": True, "records": records, "advertising": "off"}


def test_a_lost_bond_fails_the_heartbeat_and_shows_in_home_assistant_until_paired(private_bus, standin, meter_file, tmp_path,
                                                                                 gateways, broker, monitor):
    standin("--time-scale", "20", "--meter", meter_file(meter()))
    secret = tmp_path / "mqtt.password"
    secret.write_text(mq.PASSWORD + "\n")
    os.chmod(secret, 0o600)
    path = "/ping/" + TOKEN
    extra = ('heartbeat_url = "http://127.0.0.1:%d%s"\nheartbeat_interval_s = 1\n'
             '[mqtt]\nurl = "mqtt://127.0.0.1:%d"\nusername = "gw"\npassword_file = "%s"\ntopic_prefix = "%s"\n'
             '[network]\nretry_count = 1\nnetwork_timeout_ms = 1000\n' % (monitor.port, path, broker.port, secret, PREFIX))
    gw = Gateway(tmp_path, private_bus, extra_config=extra, args=("--quiet-after", "0.3", "--time-scale", "20"))
    gateways.append(gw)
    control(private_bus, "Advertise", A, 3600.0)
    gw.pair(A, PIN)
    gw.start()
    wait_until("the first download", lambda: gw.sequences(A) == [1, 2], timeout=30)
    wait_until("the session ends", lambda: gw.state()["active_sessions"] == [], timeout=20)

    # At start, Home Assistant is told the meter is fine, under the meter's own device.
    at_start = wait_until("the state at start", lambda: (lambda r: r if r.get(STATE) == "OFF" and CONFIG in r else None)(
        broker.retained("homeassistant/#", PREFIX + "/#")), timeout=20)
    config = json.loads(at_start[CONFIG])
    assert config["device_class"] == "problem" and config["state_topic"] == STATE
    assert config["payload_on"] == "ON" and config["payload_off"] == "OFF"
    assert config["device"]["identifiers"] == ["glucose_gateway_" + METER_ID]
    assert config["availability_topic"] == PREFIX + "/status"
    wait_until("a healthy ping", lambda: [r for r in monitor.seen() if r["method"] == "GET" and r["path"] == path], timeout=10)
    assert not [r for r in monitor.seen() if r["path"] == path + "/fail"]

    # The meter forgets the bond; the daemon's next session finds it.
    control(private_bus, "ForgetBond", A)
    control(private_bus, "Advertise", A, 3600.0)
    wait_until("re-pair needed", lambda: gw.state()["repair_needed"] == [A], timeout=30)
    fail = wait_until("the failure", lambda: [r for r in monitor.seen() if r["path"] == path + "/fail"], timeout=10)
    reason = "meter %s needs pairing again" % A
    assert fail[0]["method"] == "POST" and fail[0]["body"] == reason
    failed_at = fail[0]["at"]
    wait_until("the failure again", lambda: len([r for r in monitor.seen() if r["path"] == path + "/fail"]) >= 2, timeout=10)
    assert not [r for r in monitor.seen() if r["path"] == path and r["at"] > failed_at]
    status = gw.status()
    assert status["heartbeat"]["signal"] == "fail" and status["heartbeat"]["reason"] == reason
    wait_until("ON in Home Assistant", lambda: broker.retained(STATE).get(STATE) == "ON", timeout=20)
    for r in monitor.seen():
        assert PIN not in r["body"] and mq.PASSWORD not in r["body"]

    # Paired again: healthy pings resume and the state goes back OFF.
    control(private_bus, "Advertise", A, 3600.0)
    gw.pair(A, PIN)
    wait_until("healthy again", lambda: gw.state()["repair_needed"] == [], timeout=20)
    count_before = len(monitor.seen())
    wait_until("pings again", lambda: [r for r in monitor.seen()[count_before:] if r["method"] == "GET" and r["path"] == path], timeout=10)
    wait_until("status ok", lambda: gw.status()["heartbeat"]["signal"] == "ok", timeout=10)
    wait_until("OFF in Home Assistant", lambda: broker.retained(STATE).get(STATE) == "OFF", timeout=20)
    assert gw.stop() == 0
