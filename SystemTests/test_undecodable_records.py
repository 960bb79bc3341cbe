"""A meter that sends a record the codec cannot decode (cut short after its base time's year) and a context
that announces a field it does not carry: `sync` keeps their bytes with the reason, reports them without
counting them as readings, never uploads them, and keeps each once however often the meter sends it again;
`readings` lists them with their bytes."""
import csv
import io
import os
import stat

from gg_daemon import NightscoutDouble
from gg_download import Gateway, meter, records

ADDRESS = "C0:26:DA:01:02:03"


def test_a_truncated_record_is_kept_raw_once_listed_and_never_uploaded(private_bus, standin, meter_file, tmp_path):
    recs = records(1, 4)
    # The newest record is cut short: the next sync asks from it again and gets the same bytes. Record 2 is
    # followed by a context with its number whose flags announce a carbohydrate field that is not there.
    standin("--meter", meter_file(meter(records_list=recs, faults={"malformed": [
        {"sequence": 4, "kind": "truncated"}, {"sequence": 2, "kind": "garbage-context"}]})))
    ns = NightscoutDouble(log_path=str(tmp_path / "ns.log"))
    try:
        gw = Gateway(private_bus, tmp_path, extra_config=ns.config())
        gw.pair(ADDRESS)
        first = gw.sync()
        assert ADDRESS + ": 3 new readings; 2 records could not be decoded; their bytes are kept" in first.stdout, first.stdout
        assert "nightscout: 3 uploaded" in first.stdout, first.stdout
        assert sorted(e["mbg"] for e in ns.entries()) == sorted(r["mgdl"] for r in recs[:3])

        rows = gw.readings()
        assert len(rows) == 5
        kept = {r["characteristic"]: r for r in rows if r.get("exclusion") == "undecodable"}
        assert sorted(kept) == ["0x2A18", "0x2A34"]
        context = kept["0x2A34"]
        assert context["raw"] == "010200" and context["sequence"] == 2, context
        assert "value too short" in context["reason"], context
        k = kept["0x2A18"]
        # Flags, sequence 4 and the year 2024, as sent (little-endian); the flags byte is the meter's.
        assert len(k["raw"]) == 10 and k["raw"][2:] == "0400e807", k
        assert k["sequence"] == 4 and k["meter"] == ADDRESS and k["characteristic"] == "0x2A18"
        assert k["reason"].startswith("Base Time"), k
        assert "value too short at byte 3" in k["reason"], k
        assert k["received_at"].endswith("Z")
        # Nothing of a reading is made up for it.
        assert not {"id", "time", "local_time", "mgdl", "mmoll", "unit", "analyte"} & set(k)
        assert sorted(r["sequence"] for r in rows if r.get("exclusion") != "undecodable") == [1, 2, 3]
        assert gw.query("SELECT count(*) FROM reading") == [(3,)]

        table = gw.run("readings")
        assert table.returncode == 0 and "undecodable" in table.stdout and "0x2A18" in table.stdout, table.stdout
        exported = gw.run("readings", "--csv")
        assert exported.returncode == 0, exported.stderr
        exported_rows = list(csv.DictReader(io.StringIO(exported.stdout)))
        assert sorted((r["sequence"], r["raw"]) for r in exported_rows if r["exclusion"] == "undecodable") == [
            ("2", "010200"), ("4", k["raw"])]
        assert all(r["raw"] == "" for r in exported_rows if r["exclusion"] != "undecodable")

        # The meter sends the same bytes again: reported, stored no second time, still not uploaded.
        second = gw.sync()
        assert ADDRESS + ": 0 new readings" in second.stdout, second.stdout
        assert "1 record could not be decoded; its bytes are kept" in second.stdout, second.stdout
        assert gw.query("SELECT sequence, hex(raw) FROM undecodable_value WHERE characteristic = '0x2A18'") == [
            (4, k["raw"].upper())]
        assert gw.query("SELECT count(*) FROM undecodable_value") == [(2,)]
        assert len(gw.readings()) == 5
        assert len(ns.entries()) == 3
        assert gw.query("SELECT count(*) FROM outbox") == [(3,)]

        for suffix in ("", "-wal", "-shm"):
            path = gw.database + suffix
            if os.path.exists(path):
                assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path
    finally:
        ns.stop()
