"""Shared fixtures of the system tests. Each area keeps its helpers in its own module and adds its
fixtures in its own section below."""
import json
import os

import pytest

from gg_bus import PrivateBus, Simulator


# --- D-Bus and the meter simulator -------------------------------------------------------------

@pytest.fixture
def private_bus():
    """A private system-style dbus-daemon; yields its address; stopped by pid afterwards."""
    bus = PrivateBus()
    try:
        yield bus.address
    finally:
        bus.stop()


@pytest.fixture
def meter_file(tmp_path):
    """Writes a meter description (a dict) to a JSON file and returns its path."""
    counter = [0]

    def write(meter):
        counter[0] += 1
        path = tmp_path / ("meter%d.json" % counter[0])
        path.write_text(json.dumps(meter))
        return str(path)

    return write


@pytest.fixture
def standin(private_bus, tmp_path):
    """Starts `glucose-gateway-simulator --standin` on the private bus with the given arguments and waits for its
    "ready" line; every stand-in started is stopped by pid at the end of the test."""
    started = []

    def start(*args, timeout=20):
        log = str(tmp_path / ("standin%d.log" % len(started)))
        sim = Simulator(["--standin", "--bus", private_bus] + list(args), log_path=log)
        started.append(sim)
        sim.ready_line = sim.wait_for_line("ready", timeout=timeout)
        return sim

    yield start
    for sim in started:
        sim.stop()


@pytest.fixture
def bluezoo(private_bus, tmp_path):
    """bluezoo (a BlueZ emulator) on the private bus with two powered adapters, hci0 and hci1; stopped by
    pid afterwards. Yields the adapters' addresses."""
    import subprocess
    import sys
    from gg_bus import stop_process, wait_until

    env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=private_bus)
    addresses = ["00:00:00:01:00:00", "00:00:00:02:00:00"]
    log = open(tmp_path / "bluezoo.log", "w")
    args = [os.path.join(os.path.dirname(sys.executable), "bluezoo"), "--auto-enable", "--scan-interval", "1"]
    for a in addresses:
        args += ["-a", a]
    process = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=log)
    try:
        # Ready when org.bluez answers with both adapters.
        def powered():
            if process.poll() is not None:
                raise RuntimeError("bluezoo exited: " + (tmp_path / "bluezoo.log").read_text()[-2000:])
            probe = subprocess.run(
                ["dbus-send", "--bus=" + private_bus, "--print-reply", "--dest=org.bluez", "/org/bluez/hci1",
                 "org.freedesktop.DBus.Properties.Get", "string:org.bluez.Adapter1", "string:Powered"],
                capture_output=True, text=True, timeout=5)
            return probe.returncode == 0 and "true" in probe.stdout

        wait_until("bluezoo to power hci1 (log: %s)" % (tmp_path / "bluezoo.log"), powered, timeout=15, interval=0.1)
        yield addresses
    finally:
        stop_process(process)
        log.close()
