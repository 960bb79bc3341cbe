"""scripts/demo.sh (the README's first command) without its install step: it must end by itself with
exit 0, print every phase, show the network error code and the replay, and leave no process behind."""
import os
import re
import subprocess
from pathlib import Path

from gg_bus import gateway_binary

ROOT = Path(__file__).resolve().parent.parent


def processes_mentioning(text):
    """Pids whose command line mentions `text` (the demo's private work directory)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path("/proc", entry, "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            found.append(int(entry))
    return found


def test_demo_runs_end_to_end_and_cleans_up():
    env = dict(os.environ, GLUCOSE_GATEWAY_BIN=gateway_binary())
    env.pop("DBUS_SYSTEM_BUS_ADDRESS", None)
    result = subprocess.run(["bash", str(ROOT / "scripts" / "demo.sh")], capture_output=True, text=True, env=env, timeout=150)
    out = result.stdout
    assert result.returncode == 0, out[-3000:] + result.stderr[-3000:]
    for phase in ("1/7", "2/7", "3/7", "4/7", "5/7", "6/7", "7/7", "With real hardware"):
        assert "== " + phase in out
    assert re.search(r"error code: 100[12] NETWORK_", out)
    replay = re.search(r"entries on Nightscout: (\d+) of (\d+) readings", out)
    assert replay and replay.group(1) == replay.group(2) and int(replay.group(2)) >= 11
    assert "exit status 0" in out
    assert "all demo processes stopped" in out
    assert out.rstrip().endswith("all demo processes stopped")
    work = re.search(r"work directory (\S+)\)", out).group(1)
    assert not os.path.exists(work)
    assert processes_mentioning(work) == []
