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
    """Starts `simulate-meter --standin` on the private bus with the given arguments and waits for its
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
