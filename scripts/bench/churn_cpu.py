"""Benchmark (not a test): CPU time an idle `glucose-gateway run` spends while another process creates and
deletes unrelated files in the database's directory as fast as it can.

    GLUCOSE_GATEWAY_BIN=.build/release/glucose-gateway python3 scripts/bench/churn_cpu.py [--seconds 20] [--write]

Prints one JSON line: the daemon's CPU seconds (user + system, from /proc/PID/stat) over the same span with
no churn and with churn, and the create/delete cycles done. Everything runs on a private bus in a temporary
directory; only the processes started here are stopped, by pid.
"""
import argparse
import json
import os
import sys
import tempfile
import time

# The system tests' helpers (private bus, daemon): SystemTests/ beside scripts/.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "SystemTests"))
from gg_bus import PrivateBus  # noqa: E402
from gg_daemon import Gateway  # noqa: E402


def cpu_seconds(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def churn(directory, seconds, write):
    """Create (and, with `write`, write one byte to) and delete unrelated files for `seconds`; returns the
    cycles done."""
    end = time.monotonic() + seconds
    cycles = 0
    while time.monotonic() < end:
        for i in range(200):
            path = os.path.join(directory, "unrelated-%d.tmp" % i)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
            if write:
                os.write(fd, b"x")
            os.close(fd)
            os.unlink(path)
        cycles += 200
    return cycles


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--write", action="store_true", help="write a byte to each file before deleting it")
    args = parser.parse_args()
    bus = PrivateBus()
    directory = tempfile.mkdtemp(prefix="gg-churn-")
    gateway = Gateway(directory, bus.address)
    try:
        gateway.start()
        time.sleep(2)   # past start-up
        pid = gateway.process.pid
        before = cpu_seconds(pid)
        time.sleep(args.seconds)
        idle = cpu_seconds(pid) - before
        before = cpu_seconds(pid)
        cycles = churn(directory, args.seconds, args.write)
        churned = cpu_seconds(pid) - before
        print(json.dumps({"seconds": args.seconds, "idle_cpu_s": round(idle, 2), "churn_cpu_s": round(churned, 2),
                          "cycles": cycles, "write": args.write, "binary": os.environ.get("GLUCOSE_GATEWAY_BIN", "")}))
    finally:
        gateway.stop()
        bus.stop()


if __name__ == "__main__":
    main()
