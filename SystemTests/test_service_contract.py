"""What config/glucose-gateway.service relies on from `glucose-gateway run`: Type=notify (READY=1 with a
one-line STATUS, WATCHDOG=1 at half WATCHDOG_USEC, STOPPING=1), ExecReload (SIGHUP re-reads the config and
survives a bad one), RestartPreventExitStatus=78 (a bad config exits 78 at once), and journald-friendly
logs with priority prefixes and no secrets. systemd's side is played by a unix datagram socket."""
import os
import re
import signal
import socket
import subprocess
import time
import uuid

import pytest

from gg_bus import gateway_binary, stop_process, wait_until

SECRET = "topsecret-value-123"


class NotifySocket:
    """A bound datagram socket standing in for systemd's notify socket (a path, or an abstract name)."""

    def __init__(self, directory, abstract=False):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        if abstract:
            name = "gw-test-notify-" + uuid.uuid4().hex
            self.sock.bind("\0" + name)
            self.address = "@" + name
        else:
            self.address = str(directory / "notify.sock")
            self.sock.bind(self.address)
        self.messages = []

    def next(self, timeout=20.0):
        self.sock.settimeout(timeout)
        data = self.sock.recv(4096).decode()
        self.messages.append(data)
        return data

    def until(self, predicate, timeout=20.0):
        """Receives until a message satisfies predicate; returns it (fails after timeout)."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError("no matching notification; got %r" % self.messages)
            try:
                message = self.next(timeout=left)
            except socket.timeout:
                raise AssertionError("no matching notification; got %r" % self.messages)
            if predicate(message):
                return message

    def close(self):
        self.sock.close()


def write_config(path, database, extra=""):
    path.write_text('[gateway]\ndatabase = "%s"\n[nightscout]\nurl = "http://127.0.0.1:9"\napi_secret = "%s"\n%s'
                    % (database, SECRET, extra))


def start_daemon(tmp_path, bus, notify, watchdog_usec="400000"):
    config = tmp_path / "gw.toml"
    write_config(config, tmp_path / "gateway.sqlite3")
    env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=bus, NOTIFY_SOCKET=notify.address, WATCHDOG_USEC=watchdog_usec,
               JOURNAL_STREAM="8:12345", TZ="UTC")
    env.pop("GLUCOSE_GATEWAY_CONFIG", None)
    log = tmp_path / "stderr.log"
    process = subprocess.Popen([gateway_binary(), "--config", str(config), "run"], env=env,
                               stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    return process, config, log


@pytest.mark.parametrize("abstract", [False, True], ids=["path", "abstract"])
def test_run_speaks_the_notify_protocol(private_bus, tmp_path, abstract):
    notify = NotifySocket(tmp_path, abstract=abstract)
    process, config, log = start_daemon(tmp_path, private_bus, notify)
    try:
        ready = notify.until(lambda m: "READY=1" in m.split("\n"))
        status = [l for l in ready.split("\n") if l.startswith("STATUS=")]
        assert len(status) == 1 and len(status[0]) > len("STATUS="), ready
        assert "pending" in status[0]

        # Watchdog pings keep coming (WATCHDOG_USEC 0.4 s: a ping about every 0.2 s).
        pings = 0
        while pings < 3:
            if notify.next() == "WATCHDOG=1":
                pings += 1

        # systemctl reload: SIGHUP re-reads the config; a broken config is refused and the daemon runs on.
        process.send_signal(signal.SIGHUP)
        wait_for_log(log, "configuration reloaded")
        config.write_text("[network]\nretry_count = 99\n")
        process.send_signal(signal.SIGHUP)
        wait_for_log(log, "retry_count")
        assert process.poll() is None
        assert notify.next() is not None  # still notifying

        # systemctl stop: SIGTERM gives STOPPING=1 and a clean exit.
        process.send_signal(signal.SIGTERM)
        notify.until(lambda m: "STOPPING=1" in m.split("\n"))
        assert process.wait(timeout=15) == 0
    finally:
        stop_process(process)
        notify.close()

    text = log.read_text()
    assert SECRET not in text
    lines = [l for l in text.split("\n") if l]
    assert lines, "the daemon logged nothing"
    for line in lines:
        assert re.match(r"<[0-7]>", line), "log line without a syslog priority prefix: %r" % line


def wait_for_log(log, fragment, timeout=20.0):
    wait_until("%r in the log %s" % (fragment, log), lambda: fragment in log.read_text(), timeout=timeout)


def test_bad_config_exits_78_at_once_without_notifying(private_bus, tmp_path):
    notify = NotifySocket(tmp_path)
    config = tmp_path / "gw.toml"
    config.write_text('[gateway]\ndatabase = "%s"\nscan_mode = "sideways"\n' % (tmp_path / "gateway.sqlite3"))
    env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=private_bus, NOTIFY_SOCKET=notify.address, JOURNAL_STREAM="8:12345")
    try:
        r = subprocess.run([gateway_binary(), "--config", str(config), "run"], env=env, capture_output=True, text=True,
                           timeout=30)
        assert r.returncode == 78  # the unit's RestartPreventExitStatus: no restart loop on a config error
        assert r.stderr.strip().count("\n") == 0, r.stderr
        assert "%s:3: gateway.scan_mode" % config in r.stderr
        notify.sock.setblocking(False)
        with pytest.raises(BlockingIOError):
            notify.sock.recv(4096)  # never claimed to be ready
    finally:
        notify.close()


def test_the_watchdogs_sigabrt_ends_the_daemon(private_bus, tmp_path):
    """systemd's watchdog sends SIGABRT (WatchdogSignal's default) to a daemon that stopped pinging and only
    then SIGKILL after TimeoutAbortSec: the daemon must die of the SIGABRT itself, with a core dump for the
    installer, not sit with the signal blocked until the SIGKILL."""
    notify = NotifySocket(tmp_path)
    process, _, _ = start_daemon(tmp_path, private_bus, notify)
    try:
        notify.until(lambda m: "READY=1" in m.split("\n"))
        process.send_signal(signal.SIGABRT)
        try:
            code = process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            code = None
        assert code == -signal.SIGABRT, "the daemon did not die of SIGABRT (exit %r)" % code
    finally:
        stop_process(process)
        notify.close()
