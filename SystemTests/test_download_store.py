"""A locked database fails the download with one line and loses nothing: the readings stay on the meter
and the next sync stores them."""
import sqlite3

from gg_download import Gateway, meter, records

ADDRESS = "C0:26:DA:01:02:03"


def test_locked_database_fails_cleanly_and_loses_nothing(private_bus, standin, meter_file, tmp_path):
    standin("--meter", meter_file(meter(records_list=records(1, 30))))
    gw = Gateway(private_bus, tmp_path)
    gw.pair(ADDRESS)
    holder = sqlite3.connect(gw.database, timeout=1, isolation_level=None)
    try:
        holder.execute("BEGIN EXCLUSIVE")
        result = gw.run("sync", timeout=60)
        assert result.returncode != 0
        assert "locked" in (result.stdout + result.stderr)
        assert len((result.stdout + result.stderr).strip().splitlines()) <= 2
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    gw.sync()
    assert gw.sequences() == list(range(1, 31))
    assert gw.query("PRAGMA integrity_check") == [("ok",)]


def test_meter_being_downloaded_by_another_process_is_skipped(private_bus, standin, meter_file, tmp_path):
    import fcntl
    import os
    standin("--meter", meter_file(meter(records_list=records(1, 3))))
    gw = Gateway(private_bus, tmp_path)
    gw.pair(ADDRESS)
    fd = os.open(gw.database + ".meter-" + ADDRESS.replace(":", "") + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        result = gw.sync()
        assert "skipped, another glucose-gateway process is downloading it" in result.stdout
        assert gw.readings() == []
    finally:
        os.close(fd)
    gw.sync()
    assert gw.sequences() == [1, 2, 3]
