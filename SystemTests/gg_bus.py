"""Private system-style D-Bus daemons and simulator processes for the system tests.

Everything started here is stopped by its pid; nothing is killed by name.
"""
import os
import select
import signal
import subprocess
import tempfile
import time
from pathlib import Path

def wait_until(what, condition, timeout=20.0, interval=0.05):
    """Polls `condition` until it returns something truthy and returns that; fails after `timeout` seconds.
    The one way the system tests wait for a state: on the state itself, with a generous deadline, never
    by a fixed pause."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = condition()
        if last:
            return last
        time.sleep(interval)
    last = condition()
    if last:
        return last
    raise AssertionError("timed out after %ss waiting for %s (last: %r)" % (timeout, what, last))


# The private bus configuration shared with the Swift tests and the benchmarks; {socket} is filled in.
BUS_CONFIG_PATH = Path(__file__).resolve().parent.parent / "Tests" / "TestSupport" / "private-bus.conf"


def bus_config(socket):
    """The private bus configuration with its socket path filled in."""
    return BUS_CONFIG_PATH.read_text().replace("{socket}", socket)


class PrivateBus:
    """A dbus-daemon with a permissive system-bus style config in a temporary directory."""

    def __init__(self):
        self.directory = tempfile.mkdtemp(prefix="gg-pybus-")
        self.socket = os.path.join(self.directory, "bus.sock")
        self.address = "unix:path=" + self.socket
        config = os.path.join(self.directory, "bus.conf")
        Path(config).write_text(bus_config(self.socket))
        self.process = subprocess.Popen(
            ["dbus-daemon", "--nofork", "--nopidfile", "--config-file=" + config],
            stdout=subprocess.DEVNULL,
            stderr=open(os.path.join(self.directory, "bus.log"), "w"),
        )
        def listening():
            if self.process.poll() is not None:
                raise RuntimeError("dbus-daemon exited with %s" % self.process.returncode)
            return os.path.exists(self.socket)

        try:
            wait_until("dbus-daemon to create its socket", listening, timeout=10, interval=0.01)
        except AssertionError:
            self.stop()
            raise

    def stop(self):
        stop_process(self.process)


def stop_process(process, timeout=5):
    """SIGTERM the process by pid, then SIGKILL if it lingers; reap it."""
    if process.poll() is None:
        try:
            os.kill(process.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=timeout)
    return process.returncode


def gateway_binary():
    path = os.environ.get("GLUCOSE_GATEWAY_BIN")
    if not path:
        path = str(Path(__file__).resolve().parent.parent / ".build" / "debug" / "glucose-gateway")
    if not os.access(path, os.X_OK):
        raise RuntimeError("glucose-gateway binary not found at %s (build first or set GLUCOSE_GATEWAY_BIN)" % path)
    return path


def simulator_binary():
    """The meter simulator: GLUCOSE_GATEWAY_SIMULATOR_BIN, else glucose-gateway-simulator beside the gateway."""
    path = os.environ.get("GLUCOSE_GATEWAY_SIMULATOR_BIN")
    if not path:
        path = str(Path(gateway_binary()).parent / "glucose-gateway-simulator")
    if not os.access(path, os.X_OK):
        raise RuntimeError("glucose-gateway-simulator not found at %s (build first or set GLUCOSE_GATEWAY_SIMULATOR_BIN)" % path)
    return path


class Simulator:
    """A `glucose-gateway-simulator` process; `wait_for_line` reads its stdout."""

    def __init__(self, args, env=None, log_path=None):
        self.log_path = log_path
        stderr = open(log_path, "w") if log_path else subprocess.DEVNULL
        self.process = subprocess.Popen(
            [simulator_binary()] + list(args),
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=env,
        )
        self._buffer = b""

    def wait_for_line(self, prefix, timeout=20):
        """Returns the first stdout line starting with `prefix`; fails after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        fd = self.process.stdout.fileno()
        while True:
            while b"\n" in self._buffer:
                line, self._buffer = self._buffer.split(b"\n", 1)
                text = line.decode(errors="replace")
                if text.startswith(prefix):
                    return text
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("no %r line from the simulator within %s s (log: %s)" % (prefix, timeout, self.log_text()))
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 4096)
                if not chunk:
                    raise RuntimeError("simulator exited with %s (log: %s)" % (self.process.wait(), self.log_text()))
                self._buffer += chunk

    def log_text(self):
        if self.log_path and os.path.exists(self.log_path):
            return Path(self.log_path).read_text()[-4000:]
        return ""

    def stop(self):
        return stop_process(self.process)
