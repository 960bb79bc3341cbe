"""Helpers of the daemon system tests: a gateway (`glucose-gateway run`) on a private bus with the BlueZ
stand-in, a loopback Nightscout, and ways to look at the database while it runs.

Everything started here is stopped by its pid; nothing is killed by name.
"""
import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from gg_bus import gateway_binary, stop_process, wait_until  # noqa: F401 (wait_until: for the tests)

HERE = Path(__file__).resolve().parent
CONTROL_DEST = "org.bluez"
CONTROL_PATH = "/org/glucosegateway/simulator"
CONTROL_IFACE = "org.glucosegateway.Simulator1"


def control(bus, method, *args):
    """Calls the stand-in's control interface with dbus-send; returns its stdout."""
    typed = []
    for a in args:
        if isinstance(a, float):
            typed.append("double:%r" % a)
        else:
            typed.append("string:%s" % a)
    out = subprocess.run(
        ["dbus-send", "--bus=" + bus, "--print-reply", "--reply-timeout=10000", "--dest=" + CONTROL_DEST, CONTROL_PATH,
         CONTROL_IFACE + "." + method] + typed,
        capture_output=True, text=True, timeout=15)
    if out.returncode != 0:
        raise RuntimeError("%s failed: %s" % (method, out.stderr.strip()))
    return out.stdout


class NightscoutDouble:
    """SystemTests/fake_nightscout.py as a child process, with its control channel."""

    def __init__(self, secret="demo-secret-123456", log_path=None, delay_401=None):
        self.secret = secret
        stderr = open(log_path, "w") if log_path else subprocess.DEVNULL
        extra = ["--delay-401", str(delay_401)] if delay_401 is not None else []
        self.process = subprocess.Popen([sys.executable, str(HERE / "fake_nightscout.py"), "--secret", secret] + extra,
                                        stdout=subprocess.PIPE, stderr=stderr, text=True)
        line = self.process.stdout.readline()
        ports = json.loads(line)
        self.port = ports["port"]
        self.control_port = ports["control_port"]
        self.url = "http://127.0.0.1:%d" % self.port

    def _request(self, method, path, body=None):
        import urllib.request
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.control_port, path), data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            return json.loads(r.read() or b"null")

    def set_mode(self, **mode):
        return self._request("POST", "/__control", mode)

    def entries(self):
        return self._request("GET", "/__entries")

    def config(self, nightscout_extra=""):
        """The `[nightscout]` section for this double (plus `nightscout_extra` lines) and a `[network]` section
        that fails fast: no retries, 1 s timeouts."""
        return ('[nightscout]\nurl = "%s"\napi_secret = "%s"\n%s'
                '[network]\nretry_count = 0\nnetwork_timeout_ms = 1000\n' % (self.url, self.secret, nightscout_extra))

    def stats(self):
        return self._request("GET", "/__stats")

    def stop(self):
        stop_process(self.process)


class Gateway:
    """One `glucose-gateway run` process with its config and database in `directory`."""

    def __init__(self, directory, bus, nightscout_url=None, secret=None, extra_config="", args=(), env=None):
        self.directory = Path(directory)
        self.bus = bus
        self.database = str(self.directory / "gateway.sqlite3")
        self.config = str(self.directory / "gateway.toml")
        self.metrics = str(self.directory / "metrics.prom")
        self.args = list(args)
        self.env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=bus, TZ="UTC")
        if env:
            self.env.update(env)
        text = '[gateway]\ndatabase = "%s"\nmetrics_file = "%s"\ndownload_idle_timeout_s = 5\n' % (self.database, self.metrics)
        if nightscout_url:
            text += '[nightscout]\nurl = "%s"\napi_secret = "%s"\n' % (nightscout_url, secret)
            text += '[network]\nretry_count = 1\nnetwork_timeout_ms = 1000\nrecovery_mode = true\n'
        text += extra_config
        Path(self.config).write_text(text)
        self.process = None
        self.runs = 0

    def command_line(self, *args):
        """The argv of a gateway command with this gateway's config, for a process run in the background."""
        return [gateway_binary(), "--config", self.config] + [str(a) for a in args]

    def command(self, *args, timeout=60, check=True, prefix=True):
        head = ["--config", self.config] if prefix else []
        out = subprocess.run([gateway_binary()] + head + list(args), capture_output=True, text=True,
                             env=self.env, timeout=timeout)
        if check and out.returncode != 0:
            raise AssertionError("glucose-gateway %s exited %d: %s" % (" ".join(args), out.returncode, out.stderr))
        return out

    def pair(self, address, pin):
        return self.command("pair", address, "--pin", pin, "--timezone", "UTC", "--wait", "30")

    def start(self):
        self.runs += 1
        self.log_path = str(self.directory / ("run%d.log" % self.runs))
        self.process = subprocess.Popen([gateway_binary(), "--config", self.config, "run"] + self.args,
                                        stdout=subprocess.DEVNULL, stderr=open(self.log_path, "w"), env=self.env)
        wait_until("the daemon to run", lambda: self.state().get("phase") == "running" and self.state().get("pid") == self.process.pid
                   or self.exited(), timeout=20)
        assert self.process.poll() is None, "run exited early: %s" % self.log()
        return self

    def exited(self):
        return self.process is not None and self.process.poll() is not None

    def signal(self, number):
        os.kill(self.process.pid, number)

    def stop(self, timeout=10):
        if self.process is None:
            return None
        code = stop_process(self.process, timeout=timeout)
        return code

    def kill9(self):
        os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def log(self):
        return Path(self.log_path).read_text() if self.log_path and os.path.exists(self.log_path) else ""

    def state(self):
        try:
            return json.loads(Path(self.database + ".daemon.json").read_text())
        except (OSError, ValueError):
            return {}

    def status(self):
        out = self.command("status", "--json")
        return json.loads(out.stdout)

    def query(self, sql, args=()):
        """A read-only look at the database while the daemon runs (WAL reader)."""
        if not os.path.exists(self.database):
            return []
        db = sqlite3.connect("file:%s?mode=ro" % self.database, uri=True, timeout=5)
        try:
            return db.execute(sql, args).fetchall()
        finally:
            db.close()

    def sequences(self, address):
        return [r[0] for r in self.query("SELECT sequence FROM reading WHERE meter = ? ORDER BY sequence", (address,))]


@pytest.fixture
def nightscout(tmp_path):
    """A Nightscout double on loopback for one test, stopped after it."""
    ns = NightscoutDouble(log_path=str(tmp_path / "nightscout.log"))
    yield ns
    ns.stop()


@pytest.fixture
def gateways():
    """The daemons a test starts (append them); each is stopped after the test."""
    started = []
    yield started
    for gw in started:
        gw.stop()
