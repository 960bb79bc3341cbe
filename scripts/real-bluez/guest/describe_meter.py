#!/usr/bin/python3
"""describe_meter.py SIMULATOR_BIN SIMULATOR-ARGS...

Prints the meter that `glucose-gateway-simulator SIMULATOR-ARGS` plays as a meter file (JSON), taken from the
simulator itself: it runs the same meter as a BlueZ stand-in on a private dbus-daemon of its own and asks
the control interface (Meters, then Describe). So the checks on the other VM compare with the meter's
own record list, PIN and clock, not with a copy written by hand. Exit 1 with one line on any failure.
"""
import os
import subprocess
import sys
import tempfile
import time

import dbus

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def main():
    binary, args = sys.argv[1], sys.argv[2:]
    directory = tempfile.mkdtemp(prefix="describe-")
    socket = os.path.join(directory, "bus.sock")
    config = os.path.join(directory, "bus.conf")
    with open(os.path.join(REPO, "Tests", "TestSupport", "private-bus.conf")) as f:
        text = f.read().replace("{socket}", socket)
    with open(config, "w") as f:
        f.write(text)
    bus = subprocess.Popen(["dbus-daemon", "--nofork", "--nopidfile", "--config-file=" + config],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    sim = None
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(socket):
            if time.monotonic() > deadline or bus.poll() is not None:
                sys.exit("describe_meter: the private dbus-daemon did not start")
            time.sleep(0.05)
        address = "unix:path=" + socket
        sim = subprocess.Popen([binary, "--standin", "--bus", address] + args,
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = sim.stdout.readline()
        if not line.startswith("ready"):
            sys.exit("describe_meter: the stand-in did not get ready (exit %s)" % sim.poll())
        connection = dbus.bus.BusConnection(address)
        control = dbus.Interface(connection.get_object("org.bluez", "/org/glucosegateway/simulator"),
                                 "org.glucosegateway.Simulator1")
        meters = [str(m) for m in control.Meters()]
        if len(meters) != 1:
            sys.exit("describe_meter: %d meters, want 1" % len(meters))
        print(str(control.Describe(meters[0])))
    finally:
        for p in (sim, bus):
            if p is not None and p.poll() is None:
                p.terminate()
                p.wait(timeout=10)


if __name__ == "__main__":
    main()
