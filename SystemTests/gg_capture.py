"""Captures (`glucose-gateway capture`, docs/captures.md) for the system tests and for the project's own
captures of its simulator's profiles (SystemTests/captures/, remade with `python SystemTests/gg_capture.py`)."""
import os
import pathlib
import subprocess
import sys
import tempfile

from gg_bus import PrivateBus, Simulator
from gg_download import Gateway

CAPTURES = pathlib.Path(__file__).resolve().parent / "captures"

# Each built-in profile's address and PIN (as MeterProfiles.swift gives them).
PROFILES = {
    "contour-next-one": "D0:1A:A7:00:00:01",
    "accu-chek-guide": "C0:26:DA:00:00:02",
    "accu-chek-instant": "C0:26:DA:00:00:03",
    "caresens": "F4:5E:AB:00:00:04",
    "fora-tng": "C0:0C:A1:00:00:05",
    "taidoc-reversed": "00:1C:05:00:00:06",
    "generic-gls": "C0:FF:EE:00:00:07",
}


def capture(gw, address, output, *options):
    """Runs `capture ADDRESS --output OUTPUT`; returns the completed process."""
    return gw.run("capture", address, "--output", str(output), *options, timeout=120)


def make_profile_capture(profile, output, directory):
    """The capture of a built-in profile, made through the stand-in and marked as the simulator's."""
    bus = PrivateBus()
    sim = None
    try:
        sim = Simulator(["--standin", "--bus", bus.address, "--profile", profile],
                        log_path=os.path.join(directory, profile + ".log"))
        sim.wait_for_line("ready")
        gw = Gateway(bus.address, directory)
        gw.pair(PROFILES[profile])
        r = capture(gw, PROFILES[profile], output, "--simulated-profile", profile)
        if r.returncode != 0:
            raise RuntimeError("capture of %s failed: %s" % (profile, r.stderr))
    finally:
        if sim:
            sim.stop()
        bus.stop()


if __name__ == "__main__":
    names = sys.argv[1:] or list(PROFILES)
    CAPTURES.mkdir(exist_ok=True)
    for name in names:
        with tempfile.TemporaryDirectory() as d:
            make_profile_capture(name, CAPTURES / (name + ".json"), d)
            os.chmod(CAPTURES / (name + ".json"), 0o644)
        print("wrote", CAPTURES / (name + ".json"))
