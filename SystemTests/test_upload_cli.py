"""System tests of `glucose-gateway upload` against the loopback Nightscout double: a real SQLite
database filled by the benchmark's seeding command, the real binary, kill -9, wrong credentials,
network down with the alert command, and the upload lock."""
import json
import os
import signal
import sqlite3
import subprocess
import sys
import urllib.request

import pytest

from gg_bus import wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
SECRET = "correct-horse-battery"


def binary():
    path = os.environ.get("GLUCOSE_GATEWAY_BIN") or os.path.join(HERE, "..", ".build", "debug", "glucose-gateway")
    assert os.access(path, os.X_OK), "build first: swift build --build-tests (or set GLUCOSE_GATEWAY_BIN)"
    return path


def bench():
    path = os.path.join(os.path.dirname(binary()), "glucose-gateway-bench")
    assert os.access(path, os.X_OK), "glucose-gateway-bench is built beside glucose-gateway"
    return path


class Nightscout:
    """SystemTests/fake_nightscout.py as a child process, stopped by pid."""

    def __init__(self, delay_401=0.05, credentials=("--secret", SECRET)):
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "fake_nightscout.py"), *credentials,
                                      "--delay-401", str(delay_401)], stdout=subprocess.PIPE, text=True)
        ports = json.loads(self.proc.stdout.readline())
        self.port, self.control_port, self.health_port = ports["port"], ports["control_port"], ports["health_port"]
        self.url = "http://127.0.0.1:%d" % self.port
        # Another host name than the upload URL's: the config refuses a health check on the upload server.
        self.health_url = "http://localhost:%d/" % self.health_port

    def control(self, **body):
        req = urllib.request.Request("http://127.0.0.1:%d/__control" % self.control_port, data=json.dumps(body).encode(),
                                     method="POST")
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.load(r)

    def get(self, path):
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.control_port, path), timeout=10) as r:
            return json.load(r)

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


def started_servers(kind):
    """A fixture's body: yields a function that starts a `kind` server, and stops every one started after the test."""
    servers = []

    def start(**kw):
        s = kind(**kw)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


@pytest.fixture
def nightscout():
    yield from started_servers(Nightscout)


def write_config(tmp_path, server, secret=SECRET, network=""):
    db = str(tmp_path / "gateway.sqlite3")
    path = tmp_path / "gateway.toml"
    path.write_text('[gateway]\ndatabase = "%s"\n[nightscout]\nurl = "%s"\napi_secret = "%s"\n[network]\n%s\n'
                    % (db, server.url, secret, network))
    os.chmod(path, 0o600)
    return str(path), db


def seed(db, count):
    out = subprocess.run([bench(), "upload-seed", "--database", db, "--count", str(count)], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def upload(config, *args, timeout=120):
    return subprocess.run([binary(), "--config", config, "upload"] + list(args), capture_output=True, text=True,
                          timeout=timeout)


def states(db):
    with sqlite3.connect(db) as c:
        return dict(c.execute("SELECT state, count(*) FROM outbox GROUP BY state").fetchall())


def destination_state(db):
    with sqlite3.connect(db) as c:
        return c.execute("SELECT state FROM destination_state WHERE destination = 'nightscout'").fetchone()[0]


def test_kill_9_during_upload_then_restart_sends_each_reading_once(nightscout, tmp_path):
    server = nightscout()
    config, db = write_config(tmp_path, server, network="network_timeout_ms = 5000")
    seed(db, 1000)
    # Slow answers (the server commits each batch after 300 ms) so the kill lands mid-replay.
    server.control(mode="slow", delay_ms=300)
    proc = subprocess.Popen([binary(), "--config", config, "upload"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until("three batches at the server", lambda: server.get("/__stats")["uploads"] >= 3, timeout=30, interval=0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    before = states(db)
    assert before.get("in_flight", 0) > 0, before   # killed with a batch in flight
    assert 0 < server.get("/__stats")["count"] < 1000
    server.control(mode="ok")
    out = upload(config)
    assert out.returncode == 0, out.stdout + out.stderr
    entries = server.get("/__entries")
    assert len(entries) == 1000
    assert len({e["identifier"] for e in entries}) == 1000
    assert server.get("/__stats")["max_in_flight"] == 1
    assert states(db) == {"acknowledged": 1000}


def test_wrong_credentials_pause_without_touching_readings_then_fixed(nightscout, tmp_path):
    # The server delays each failed authentication by longer than the network timeout, as Nightscout
    # does: an upload sees a timeout, the credential check (long timeout) sees the refusal.
    server = nightscout(delay_401=0.6)
    wrong = "not-the-right-secret"
    config, db = write_config(tmp_path, server, secret=wrong, network="network_timeout_ms = 300\nretry_count = 1")
    seed(db, 50)
    check = upload(config, "--check")
    assert check.returncode == 78, check.stdout + check.stderr
    assert "credentials refused" in check.stdout
    out = upload(config)
    assert out.returncode == 75, out.stdout + out.stderr
    # The uploads timed out; the long credential check told why.
    assert "paused" in out.stdout and "credentials refused" in out.stdout, out.stdout
    for text in (check.stdout, check.stderr, out.stdout, out.stderr):
        assert wrong not in text
    assert states(db) == {"pending": 50}
    config, _ = write_config(tmp_path, server, secret=SECRET, network="network_timeout_ms = 300")
    assert upload(config, "--check").returncode == 0
    out = upload(config)
    assert out.returncode == 0, out.stdout + out.stderr
    assert server.get("/__stats")["count"] == 50
    assert states(db) == {"acknowledged": 50}


def test_network_down_exits_75_runs_the_alert_command_then_recovers(nightscout, tmp_path):
    server = nightscout()
    alerts = tmp_path / "alerts.txt"
    network = ('retry_count = 1\nnetwork_timeout_ms = 300\nrecovery_mode = false\nhealth_check_url = "%s"\n'
               'on_network_error = ["/bin/sh", "-c", "echo $GATEWAY_ERROR_CODE $GATEWAY_PENDING >> %s"]'
               % (server.health_url, alerts))
    config, db = write_config(tmp_path, server, network=network)
    seed(db, 20)
    server.control(mode="down", health="down")
    out = upload(config)
    assert out.returncode == 75, out.stdout + out.stderr
    assert "1001" in out.stdout and "NETWORK_NOT_CONNECTED" in out.stdout
    assert "1001 NETWORK_NOT_CONNECTED" in out.stderr   # logged with its code
    wait_until("the network-error command", alerts.exists, timeout=20)
    assert alerts.read_text().split("\n")[0] == "1001 20"
    # Server down but network up: 1002.
    server.control(health="up")
    out = upload(config)
    assert out.returncode == 75
    assert "1002" in out.stdout
    server.control(mode="up")
    out = upload(config)
    assert out.returncode == 0, out.stdout + out.stderr
    assert server.get("/__stats")["count"] == 20


def test_wait_bounds_a_recovering_session(nightscout, tmp_path):
    server = nightscout()
    network = 'recovery_mode = true\nnetwork_timeout_ms = 300\nhealth_check_url = "%s"' % server.health_url
    config, db = write_config(tmp_path, server, network=network)
    seed(db, 10)
    server.control(mode="down", health="down")
    # The upload runs on the real clock, so how long it waited is not asserted here: that the session
    # waits until its deadline and not longer is tested on a manual clock in RecoveryTests. This checks
    # the wiring: --wait 2 ends the wait for the network well before the default 30 s would (the timeout),
    # with the documented status, the network error, the destination recovering and nothing lost.
    out = upload(config, "--wait", "2", timeout=25)
    assert out.returncode == 75, out.stdout + out.stderr
    assert "deferred: error 1001" in out.stdout, out.stdout
    assert destination_state(db) == "recovering"
    assert states(db) == {"pending": 10}


def test_a_backlog_goes_over_one_kept_connection(nightscout, tmp_path):
    server = nightscout()
    config, db = write_config(tmp_path, server)
    seed(db, 300)
    assert upload(config).returncode == 0
    stats = server.get("/__stats")
    assert stats["count"] == 300 and stats["uploads"] >= 2  # more than one request
    assert stats["connections"] == 1


def test_one_uploader_per_database(nightscout, tmp_path):
    server = nightscout()
    config, db = write_config(tmp_path, server, network="network_timeout_ms = 5000")
    seed(db, 300)
    server.control(mode="slow", delay_ms=500)
    first = subprocess.Popen([binary(), "--config", config, "upload"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until("the first upload at the server", lambda: server.get("/__stats")["uploads"] >= 1, timeout=30,
                   interval=0.02)
        second = upload(config)
        assert second.returncode == 75
        assert "another glucose-gateway process is uploading" in second.stderr
    finally:
        first.wait(timeout=60)
    assert first.returncode == 0
    assert server.get("/__stats")["max_in_flight"] == 1
    assert server.get("/__stats")["count"] == 300


@pytest.mark.parametrize("answer", ["non_entries", "fewer", "foreign"])
def test_a_200_that_confirms_nothing_marks_nothing_uploaded_and_exits_75(nightscout, tmp_path, answer):
    server = nightscout()
    config, db = write_config(tmp_path, server, network="retry_count = 1\nerror_bypass = true")
    seed(db, 30)
    server.control(mode="answer", answer=answer)
    out = upload(config)
    assert out.returncode == 75, out.stdout + out.stderr
    left = states(db)
    assert left.get("pending", 0) == (1 if answer == "fewer" else 30), left
    assert "quarantined" not in left
    assert "1002" in out.stdout and "HTTP 200" in out.stdout, out.stdout
    # Once the server stores and confirms them, they go up, each once.
    server.control(mode="ok")
    out = upload(config)
    assert out.returncode == 0, out.stdout + out.stderr
    assert states(db) == {"acknowledged": 30}


def test_a_huge_answer_is_dropped_at_the_limit_and_nothing_is_lost(nightscout, tmp_path):
    server = nightscout()
    config, db = write_config(tmp_path, server, network="retry_count = 0\nnetwork_timeout_ms = 5000")
    seed(db, 10)
    server.control(mode="huge", size=100 * 1000 * 1000)
    out = upload(config)
    assert out.returncode == 75, out.stdout + out.stderr
    assert "longer than" in out.stdout + out.stderr, out.stdout + out.stderr
    assert states(db) == {"pending": 10}
