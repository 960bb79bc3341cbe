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
