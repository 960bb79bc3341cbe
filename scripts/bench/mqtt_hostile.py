"""Benchmark (not a test): the daemon's resident memory against a hostile broker (SystemTests/hostile_broker.py).

  GLUCOSE_GATEWAY_BIN=... python scripts/bench/mqtt_hostile.py --mode drop --seconds 600
  GLUCOSE_GATEWAY_BIN=... python scripts/bench/mqtt_hostile.py --mode publish --seconds 60

Starts a private bus, the meter stand-in with one paired meter, the hostile broker and `glucose-gateway run`
with an [mqtt] section, samples VmRSS and VmHWM every 5 s, and prints one JSON line: connections, RSS at the
start and the end, the peak, and the daemon's log lines. Everything it started is stopped by pid."""
import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The system tests' helpers and the hostile broker: SystemTests/ beside scripts/.
SYSTEM_TESTS = Path(__file__).resolve().parents[2] / "SystemTests"
sys.path.insert(0, str(SYSTEM_TESTS))
from gg_bus import PrivateBus, Simulator, stop_process  # noqa: E402
from gg_daemon import Gateway, control  # noqa: E402

A = "C0:26:DA:01:02:03"


def memory(pid):
    fields = {}
    for line in Path("/proc/%d/status" % pid).read_text().splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            fields[line.split(":")[0]] = int(line.split()[1])
    return fields


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["drop", "publish"], required=True)
    p.add_argument("--seconds", type=int, default=600)
    args = p.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="gg-bench-mqtt-"))
    bus = PrivateBus()
    started = []
    try:
        meter = {"address": A, "name": "meter+0203", "pin": "123456", "bonding": True, "advertising": "off",
                 "records": [{"sequence": 1, "time": "2024-03-05T06:00:00", "timeOffset": 0, "mgdl": 121}]}
        (directory / "meter.json").write_text(json.dumps(meter))
        sim = Simulator(["--standin", "--bus", bus.address, "--time-scale", "20", "--meter", str(directory / "meter.json")],
                        log_path=str(directory / "standin.log"))
        started.append(sim)
        sim.wait_for_line("ready")
        count_file = directory / "connections"
        broker = subprocess.Popen([sys.executable, str(SYSTEM_TESTS / "hostile_broker.py"), "--mode", args.mode,
                                   "--count-file", str(count_file)], stdout=subprocess.PIPE, text=True)
        port = json.loads(broker.stdout.readline())["port"]
        extra = '[mqtt]\nurl = "mqtt://127.0.0.1:%d"\ntopic_prefix = "gg"\n' % port
        gw = Gateway(directory, bus.address, extra_config=extra, args=("--quiet-after", "0.3"))
        control(bus.address, "Advertise", A, 60.0)
        gw.pair(A, "123456")
        gw.start()
        start = memory(gw.process.pid)
        samples = []
        t0 = time.monotonic()
        while time.monotonic() - t0 < args.seconds and gw.process.poll() is None:
            time.sleep(5)
            samples.append(memory(gw.process.pid))
        end = samples[-1] if samples else start
        alive = gw.process.poll() is None
        gw.stop()
        stop_process(broker)
        log = gw.log().splitlines()
        print(json.dumps({"mode": args.mode, "seconds": args.seconds, "alive": alive,
                          "connections": int(count_file.read_text()) if count_file.exists() else 0,
                          "rss_start_kb": start.get("VmRSS"), "rss_end_kb": end.get("VmRSS"),
                          "rss_peak_kb": max(s.get("VmHWM", 0) for s in samples) if samples else start.get("VmHWM"),
                          "log_lines": len(log), "mqtt_log_lines": sum(1 for line in log if "mqtt" in line),
                          "log_tail": log[-4:]}))
    finally:
        for s in started:
            s.stop()
        bus.stop()


if __name__ == "__main__":
    main()
