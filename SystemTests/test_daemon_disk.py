"""The database on a full disk, in a read-only directory, and damaged, as the user sees it: read-only
commands still show what is stored, every command that must write says "disk full" (or why the file
cannot be written) and what is kept, and `run` checks the file at start and raises an alert on a damaged
one instead of writing on.

Real parts: a small tmpfs mounted by the test (the CI runs as root), a read-only bind mount (root ignores
file modes, not a read-only mount), the gateway binary, the BlueZ stand-in, SQLite files."""
import errno
import hashlib
import json
import os
import random
import signal
import sqlite3
import subprocess

import pytest

from gg_daemon import Gateway, control, wait_until

A = "C0:26:DA:01:02:03"
PIN = "123456"
DEAD_URL = "http://127.0.0.1:9"
SECRET = "disk-test-secret-123"


def meter(address, count):
    records = [{"sequence": 1 + i, "time": "2024-03-05T%02d:%02d:00" % (6 + i // 60, i % 60), "timeOffset": 0, "mgdl": 90 + i % 50}
               for i in range(count)]
    return {"address": address, "name": "meter+" + address[-5:].replace(":", ""), "pin": PIN, "bonding": True,
            "records": records}


def mount(*args):
    out = subprocess.run(["mount"] + list(args), capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, "mount %s: %s (these tests mount file systems and need root, as in CI)" % (args, out.stderr)


def unmount(path):
    subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=30)


@pytest.fixture
def small_disk(tmp_path):
    """A 3 MiB tmpfs of its own, unmounted afterwards."""
    path = tmp_path / "disk"
    path.mkdir()
    mount("-t", "tmpfs", "-o", "size=3m,mode=0700", "tmpfs", str(path))
    yield path
    unmount(path)


def fill(directory):
    """Writes a file until the file system is full; returns its path."""
    path = os.path.join(str(directory), "filler")
    chunk = b"\0" * 65536
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                f.write(chunk)
            except OSError as e:
                assert e.errno == errno.ENOSPC
                break
    with open(path, "ab", buffering=0) as f:
        while True:
            try:
                f.write(b"\0" * 512)
            except OSError:
                break
    return path


def gateway_with_readings(directory, bus, standin, meter_file, count):
    """A gateway whose database in `directory` holds `count` readings of A, downloaded by `sync`."""
    standin("--meter", meter_file(meter(A, count)))
    gw = Gateway(directory, bus, nightscout_url=DEAD_URL, secret=SECRET)
    control(bus, "Advertise", A, 60.0)
    gw.pair(A, PIN)
    synced = gw.command("sync", check=False)
    assert synced.returncode in (0, 75), synced.stdout + synced.stderr
    assert "%s: %d new readings" % (A, count) in synced.stdout
    return gw


def run_args(gw):
    return gw.command_line("run")


def test_on_a_full_disk_read_commands_still_show_everything_and_writers_say_disk_full(private_bus, standin, meter_file,
                                                                                     small_disk):
    gw = gateway_with_readings(small_disk, private_bus, standin, meter_file, 40)
    filler = fill(small_disk)

    status = gw.command("status", "--json", check=False)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["store"]["readings"] == 40
    assert json.loads(status.stdout)["store"]["read_only"] == "disk full"
    assert "read-only" in status.stderr and "disk is full" in status.stderr
    assert "(read-only: disk full), 40 readings" in gw.command("status", check=False).stdout

    readings = gw.command("readings", "--json", check=False)
    assert readings.returncode == 0, readings.stderr
    assert [r["sequence"] for r in json.loads(readings.stdout)] == list(range(1, 41))
    meters = gw.command("meters", check=False)
    assert meters.returncode == 0, meters.stderr
    assert A in meters.stdout

    for args, kept in ((["upload"], "every stored reading is kept and stays queued"),
                       (["sync"], "every stored reading is kept"),
                       (["run"], "every stored reading is kept")):
        out = gw.command(*args, check=False, timeout=30)
        assert out.returncode == 1, (args, out.stdout, out.stderr)
        line = out.stderr.strip()
        assert "\n" not in line
        assert "disk full" in line and kept in line, line
        assert "SQLITE_IOERR" not in line and "disk I/O error" not in line

    # Nothing was lost: with room again, the same database is whole and goes on.
    os.unlink(filler)
    assert len(json.loads(gw.command("readings", "--json").stdout)) == 40
    db = sqlite3.connect(gw.database)
    try:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        db.close()
    control(private_bus, "AddRecord", A, '{"time": "2024-03-07T09:00:00", "mgdl": 133}')
    again = gw.command("sync", check=False)
    assert "%s: 1 new reading" % A in again.stdout, again.stdout + again.stderr


def test_in_a_read_only_directory_read_commands_work_and_writers_say_why(private_bus, standin, meter_file, tmp_path):
    writable = tmp_path / "rw"
    writable.mkdir()
    gw = gateway_with_readings(writable, private_bus, standin, meter_file, 12)
    view = tmp_path / "ro"
    view.mkdir()
    mount("--bind", str(writable), str(view))
    try:
        mount("-o", "remount,bind,ro", str(view))
        config = tmp_path / "ro.toml"
        with open(gw.config) as f:
            config.write_text(f.read().replace(str(writable), str(view)))

        def command(*args, timeout=60):
            return subprocess.run([gw.command_line()[0], "--config", str(config)] + list(args), capture_output=True, text=True,
                                  env=gw.env, timeout=timeout)

        status = command("status", "--json")
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["store"]["readings"] == 12
        assert json.loads(status.stdout)["store"]["read_only"] == "Read-only file system"
        assert "read-only" in status.stderr and "Read-only file system" in status.stderr
        readings = command("readings", "--json")
        assert readings.returncode == 0, readings.stderr
        assert len(json.loads(readings.stdout)) == 12
        assert A in command("meters").stdout

        for args in (["upload"], ["sync"], ["run"]):
            out = command(*args, timeout=30)
            assert out.returncode == 1, (args, out.stdout, out.stderr)
            line = out.stderr.strip()
            assert "\n" not in line
            assert "cannot be written (Read-only file system)" in line and "every stored reading is kept" in line, line
    finally:
        unmount(view)


def test_a_disk_that_fills_while_the_daemon_runs_loses_nothing(private_bus, standin, meter_file, small_disk, tmp_path):
    from gg_daemon import NightscoutDouble
    nightscout = NightscoutDouble(log_path=str(tmp_path / "nightscout.log"))
    gw = None
    try:
        standin("--time-scale", "20", "--meter", meter_file(dict(meter(A, 10), advertising="off")))
        gw = Gateway(small_disk, private_bus, nightscout_url=nightscout.url, secret=nightscout.secret,
                     args=("--quiet-after", "0.3", "--time-scale", "20"))
        control(private_bus, "Advertise", A, 20.0)
        gw.pair(A, PIN)
        gw.start()
        control(private_bus, "Advertise", A, 20.0)
        wait_until("downloaded and uploaded", lambda: len(nightscout.entries()) == 10, timeout=30)
        wait_until("acknowledged", lambda: gw.query("SELECT count(*) FROM outbox WHERE state = 'acknowledged'")[0][0] == 10,
                   timeout=10)

        filler = fill(small_disk)
        for _ in range(3):
            control(private_bus, "AddGeneratedRecord", A)
        control(private_bus, "Advertise", A, 20.0)
        wait_until("the failed download logged", lambda: "download failed" in gw.log(), timeout=30)
        line = [l for l in gw.log().splitlines() if "download failed" in l][0]
        assert "disk full" in line and "the meter keeps its records" in line, line
        assert gw.sequences(A) == list(range(1, 11))
        status = gw.command("status", "--json", check=False)
        assert status.returncode == 0, status.stderr
        assert json.loads(status.stdout)["store"]["readings"] == 10
        assert gw.process.poll() is None

        os.unlink(filler)
        control(private_bus, "Advertise", A, 60.0)
        wait_until("the rest downloaded once there is room", lambda: gw.sequences(A) == list(range(1, 14)), timeout=30)
        wait_until("and uploaded", lambda: len(nightscout.entries()) == 13, timeout=30)
        assert gw.stop() == 0
    finally:
        if gw is not None:
            gw.stop()
        nightscout.stop()


def leaf_pages(database, table):
    """The leaf pages of `table`'s b-tree, found by walking it from its root page."""
    db = sqlite3.connect(database)
    try:
        page_size = db.execute("PRAGMA page_size").fetchone()[0]
        root = db.execute("SELECT rootpage FROM sqlite_schema WHERE name = ?", (table,)).fetchone()[0]
    finally:
        db.close()
    with open(database, "rb") as f:
        data = f.read()

    def page(n):
        start = (n - 1) * page_size
        return data[start:start + page_size], (100 if n == 1 else 0)

    leaves, todo = [], [root]
    while todo:
        n = todo.pop()
        body, off = page(n)
        kind = body[off]
        if kind == 0x0D:
            leaves.append(n)
        elif kind == 0x05:
            cells = int.from_bytes(body[off + 3:off + 5], "big")
            todo.append(int.from_bytes(body[off + 8:off + 12], "big"))
            for i in range(cells):
                pointer = int.from_bytes(body[off + 12 + 2 * i:off + 14 + 2 * i], "big")
                todo.append(int.from_bytes(body[pointer:pointer + 4], "big"))
    return page_size, sorted(leaves)


def test_run_raises_an_alert_on_a_damaged_reading_page_instead_of_writing_on(private_bus, standin, meter_file, tmp_path):
    gw = gateway_with_readings(tmp_path, private_bus, standin, meter_file, 150)
    assert not os.path.exists(gw.database + "-wal"), "the sync closed the database cleanly"
    page_size, leaves = leaf_pages(gw.database, "reading")
    assert len(leaves) >= 2
    victim = leaves[len(leaves) // 2]
    rng = random.Random(5)
    with open(gw.database, "r+b") as f:
        f.seek((victim - 1) * page_size)
        f.write(bytes(rng.randrange(256) for _ in range(page_size)))
    with open(gw.database, "rb") as f:
        damaged = hashlib.sha256(f.read()).hexdigest()

    hook = tmp_path / "alert.txt"
    with open(gw.config, "a") as f:
        f.write('on_network_error = ["/bin/sh", "-c", "echo $GATEWAY_ERROR_CODE \\"$GATEWAY_ERROR_MESSAGE\\" >> %s"]\n' % hook)
    control(private_bus, "AddGeneratedRecord", A)
    control(private_bus, "ClearCallLog")
    log = tmp_path / "run.log"
    process = subprocess.Popen(run_args(gw), env=gw.env, stdout=subprocess.DEVNULL, stderr=open(log, "w"))
    try:
        wait_until("the alert in the run-state file", lambda: (gw.state().get("alert") or {}).get("code") == 2002, timeout=20)
        state = gw.state()
        assert state["phase"] == "alert"
        assert state["pid"] == process.pid
        assert "damaged" in state["alert"]["message"] and "meters keep their records" in state["alert"]["message"]
        wait_until("the alert command", lambda: hook.exists() and hook.read_text().startswith("2002 "), timeout=10)
        # `status` shows the alert, and that the database cannot be read (exit 1), in one report.
        shown = gw.command("status", "--json", check=False)
        assert shown.returncode == 1, shown.stderr
        status = json.loads(shown.stdout)
        assert status["daemon"]["running"] is True
        assert status["daemon"]["alert"]["code"] == 2002
        assert status["daemon"]["alert"]["name"] == "DATABASE_DAMAGED"
        assert "SQLITE_CORRUPT" in status["store"]["error"]
        text = gw.command("status", check=False).stdout
        assert "ALERT 2002 DATABASE_DAMAGED: database %s is damaged" % gw.database in text
        # It holds the alert until it is stopped.
        assert process.poll() is None
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=10) == 0
        assert gw.state()["phase"] == "stopped"
        # The meter advertised all the while: left alone, and nothing written to the damaged file. Looked at
        # once the daemon has exited, so this covers all it did, with no pause that hopes it is long enough.
        calls = control(private_bus, "CallLog")
        assert "Connect" not in calls
        # Not one BlueZ call (a daemon at work registers its agent and starts discovery before anything else).
        assert 'string "' not in calls, calls
        with open(gw.database, "rb") as f:
            assert hashlib.sha256(f.read()).hexdigest() == damaged
        assert os.path.getsize(gw.database + "-wal") == 0 if os.path.exists(gw.database + "-wal") else True
        assert "is damaged" in log.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
