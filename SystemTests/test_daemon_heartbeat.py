"""The heartbeat of `glucose-gateway run` against a loopback monitor: pings on schedule while healthy,
`/fail` with the reason while the Nightscout destination is paused by a wrong API secret, pings again after
a SIGHUP with the right one; the monitor's token never shows in the log, status or the state files."""
import json
import os
import signal

import pytest

from gg_daemon import Gateway, NightscoutDouble, control, gateways, wait_until  # noqa: F401 (fixtures)
from gg_heartbeat import HeartbeatReceiver

A = "C0:26:DA:01:02:03"
PIN = "123456"
TOKEN = "f00dcafe-7e57-4bad-b0a7-heart0beat42"


@pytest.fixture
def nightscout(tmp_path):
    """The Nightscout double, refusing a wrong secret after 0.2 s (not its default 5 s, longer than the test's timeout)."""
    ns = NightscoutDouble(log_path=str(tmp_path / "nightscout.log"), delay_401=0.2)
    yield ns
    ns.stop()


@pytest.fixture
def monitor():
    receiver = HeartbeatReceiver()
    yield receiver
    receiver.stop()


def meter(address, count=2):
    records = [{"sequence": 1 + i, "time": "2024-03-05T06:%02d:00" % i, "timeOffset": 0, "mgdl": 95 + i} for i in range(count)]
    return {"address": address, "name": "meter+0203", "pin": PIN, "bonding": True, "records": records, "advertising": "off"}


def set_heartbeat(gw, url, interval=1):
    text = open(gw.config).read()
    lines = 'heartbeat_url = "%s"\nheartbeat_interval_s = %d\n' % (url, interval)
    open(gw.config, "w").write(text.replace("[gateway]\n", "[gateway]\n" + lines, 1))


def test_pings_on_schedule_fails_while_paused_and_recovers_after_sighup(private_bus, standin, meter_file, tmp_path,
                                                                       gateways, nightscout, monitor):
    standin("--meter", meter_file(meter(A)))
    gw = Gateway(tmp_path, private_bus, nightscout_url=nightscout.url, secret="wrong-secret-00000",
                 args=("--quiet-after", "0.3", "--time-scale", "20"))
    gateways.append(gw)
    path = "/ping/" + TOKEN
    set_heartbeat(gw, "http://127.0.0.1:%d%s" % (monitor.port, path))
    control(private_bus, "Advertise", A, 60.0)
    gw.pair(A, PIN)
    control(private_bus, "Advertise", A, 0.0)   # out of reach until phase two
    gw.start()

    # Healthy (nothing to upload yet): a GET of the URL at start, then one a second.
    oks = wait_until("three pings", lambda: [r for r in monitor.seen() if r["method"] == "GET" and r["path"] == path][3:] and
                     [r for r in monitor.seen() if r["method"] == "GET" and r["path"] == path], timeout=20)
    gaps = [b["at"] - a["at"] for a, b in zip(oks, oks[1:])]
    assert all(gap > 0.7 for gap in gaps), gaps          # on the interval, not more often
    assert not [r for r in monitor.seen() if r["path"] != path]

    # The meter's readings meet the wrong secret: Nightscout is paused, the monitor hears why.
    control(private_bus, "Advertise", A, 60.0)
    wait_until("paused", lambda: any(d["state"] == "paused" for d in gw.status()["destinations"]), timeout=30)
    fail = wait_until("the failure", lambda: [r for r in monitor.seen() if r["path"] == path + "/fail"], timeout=10)
    assert fail[0]["method"] == "POST"
    assert fail[0]["body"] == "upload to nightscout paused (credentials refused)"
    # The run-state file may follow the ping by a moment.
    status = wait_until("status fail", lambda: (lambda s: s if s["heartbeat"]["signal"] == "fail" else None)(gw.status()), timeout=10)
    assert status["heartbeat"]["reason"] == "upload to nightscout paused (credentials refused)"
    assert status["heartbeat"]["monitor"] == "http://127.0.0.1:%d" % monitor.port
    assert status["heartbeat"]["delivered"] is True
    text = gw.command("status").stdout
    assert "heartbeat: fail at " in text and "(upload to nightscout paused (credentials refused))" in text
    # While it lasts the failure is repeated every interval, and no success ping goes out.
    wait_until("the failure again", lambda: len([r for r in monitor.seen() if r["path"] == path + "/fail"]) >= 2, timeout=10)
    failed_at = fail[0]["at"]
    assert not [r for r in monitor.seen() if r["path"] == path and r["at"] > failed_at]

    # The right secret, reloaded: the readings go up and the pings resume.
    fixed = open(gw.config).read().replace("wrong-secret-00000", nightscout.secret)
    open(gw.config, "w").write(fixed)
    count_before = len(monitor.seen())
    gw.signal(signal.SIGHUP)
    wait_until("uploaded", lambda: len(nightscout.entries()) == 2, timeout=30)
    wait_until("pings again", lambda: [r for r in monitor.seen()[count_before:] if r["method"] == "GET" and r["path"] == path], timeout=10)
    wait_until("status ok", lambda: gw.status()["heartbeat"]["signal"] == "ok", timeout=10)
    assert "heartbeat: ok at " in gw.command("status").stdout

    # A ping is not an upload: the outbox and the upload metrics count the two readings only.
    assert gw.query("SELECT count(*) FROM outbox")[0][0] == 2
    assert 'glucose_gateway_uploaded_total{destination="nightscout"} 2' in open(gw.metrics).read()

    shown = [gw.log(), gw.command("status").stdout, gw.command("status", "--json").stdout,
             gw.command("config", "check", gw.config, prefix=False).stdout,
             open(gw.database + ".daemon.json").read(), open(gw.database + ".heartbeat.json").read(), open(gw.metrics).read()]
    for text in shown:
        assert TOKEN not in text and "/ping/" not in text, text
    assert oct(os.stat(gw.database + ".heartbeat.json").st_mode & 0o777) == "0o600"
    assert gw.stop() == 0


def test_a_damaged_database_is_reported_as_a_failure(private_bus, standin, meter_file, tmp_path, gateways, monitor):
    import random
    import test_daemon_disk as disk   # its helpers only (a module import: its tests are not collected twice)
    gw = disk.gateway_with_readings(tmp_path, private_bus, standin, meter_file, 150)
    gateways.append(gw)
    page_size, leaves = disk.leaf_pages(gw.database, "reading")
    rng = random.Random(7)
    with open(gw.database, "r+b") as f:
        f.seek((leaves[len(leaves) // 2] - 1) * page_size)
        f.write(bytes(rng.randrange(256) for _ in range(page_size)))
    path = "/ping/" + TOKEN
    set_heartbeat(gw, "http://127.0.0.1:%d%s" % (monitor.port, path), interval=1)
    import subprocess
    gw.process = subprocess.Popen(gw.command_line("run"), env=gw.env, stdout=subprocess.DEVNULL,
                                  stderr=open(tmp_path / "alert-run.log", "w"))
    fails = wait_until("two failures", lambda: [r for r in monitor.seen() if r["path"] == path + "/fail"][1:] and
                       [r for r in monitor.seen() if r["path"] == path + "/fail"], timeout=30)
    assert fails[0]["body"] == "alert 2002 DATABASE_DAMAGED: not downloading or uploading"
    assert not [r for r in monitor.seen() if r["path"] == path]
    assert gw.stop() == 0
