"""`sync` killed with SIGKILL at 20 random moments of a 1,000-record download, each followed by a rerun:
the database stays intact and holds every record exactly once."""
import json
import os
import random
import shutil
import signal
import time

from gg_dbus import standin_control as control
from gg_download import Gateway, meter, records

ADDRESS = "C0:26:DA:01:02:03"
COUNT = 1000


# The killed download is paced (1 ms per notification) so that the kills spread over it; the rerun after
# each kill is not, since only its result counts.
PACED = {"notificationDelayMs": 1}


def set_faults(bus, faults):
    control(bus, "SetFaults", "ss", [ADDRESS, json.dumps(faults)])


def test_kill_during_download_then_rerun(private_bus, standin, meter_file, tmp_path):
    standin("--meter", meter_file(meter(records_list=records(1, COUNT), faults=PACED)))
    template = tmp_path / "template"
    template.mkdir()
    gw = Gateway(private_bus, template)
    gw.pair(ADDRESS)

    # How long one full download takes here, to spread the kills over it.
    timing = tmp_path / "timing"
    shutil.copytree(template, timing)
    probe = Gateway(private_bus, timing)
    started = time.monotonic()
    probe.sync()
    duration = time.monotonic() - started
    assert probe.sequences() == list(range(1, COUNT + 1))

    rng = random.Random(20)
    killed_midway = 0
    for i in range(20):
        run_dir = tmp_path / ("run%d" % i)
        shutil.copytree(template, run_dir)
        g = Gateway(private_bus, run_dir)
        set_faults(private_bus, PACED)
        process = g.start("sync")
        time.sleep(rng.uniform(0.02, duration))
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        process.stdout.close()
        process.stderr.close()
        before = g.query("SELECT count(*) FROM reading")[0][0]
        if 0 < before < COUNT:
            killed_midway += 1
        set_faults(private_bus, {})
        g.sync()
        assert g.query("PRAGMA integrity_check") == [("ok",)]
        rows = g.query("SELECT sequence, count(*) FROM reading GROUP BY sequence ORDER BY sequence")
        assert [s for s, _ in rows] == list(range(1, COUNT + 1)), "run %d" % i
        assert all(n == 1 for _, n in rows), "run %d" % i
        shutil.rmtree(run_dir)
    # The kills really landed inside downloads, not only before or after them.
    assert killed_midway >= 5
