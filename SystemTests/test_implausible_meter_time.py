"""A meter whose clock was never set or was reset by a battery change, with no readable clock to correct it:
readings dated before 2010 (1970-01-01, 2000-02-29) are stored as `time-unresolved`, shown by `readings`, and
never sent to Nightscout."""
from gg_daemon import NightscoutDouble
from gg_download import Gateway, meter

ADDRESS = "C0:26:DA:01:02:03"


def test_readings_dated_before_2010_are_kept_but_never_uploaded(private_bus, standin, meter_file, tmp_path):
    recs = [
        {"sequence": 1, "time": "2024-03-05T07:00:00", "mgdl": 101},
        {"sequence": 2, "time": "1970-01-01T00:00:00", "mgdl": 102},
        {"sequence": 3, "time": "2000-02-29T00:00:00", "mgdl": 103},
        {"sequence": 4, "time": "2000-02-29T00:10:00", "result": "high"},
        {"sequence": 5, "time": "2010-01-01T00:00:00", "mgdl": 105},
    ]
    standin("--meter", meter_file(meter(records_list=recs)))
    ns = NightscoutDouble(log_path=str(tmp_path / "ns.log"))
    try:
        gw = Gateway(private_bus, tmp_path, extra_config=ns.config())
        gw.pair(ADDRESS)
        result = gw.sync()
        assert ADDRESS + ": 5 new readings" in result.stdout
        assert "nightscout: 2 uploaded" in result.stdout
        entries = ns.entries()
        assert sorted(e["mbg"] for e in entries) == [101, 105]
        # Nothing dated before 2010 was posted, as an entry or otherwise.
        assert all(e["dateString"] >= "2010" for e in entries)
        assert all(int(e["date"]) >= 1262304000000 for e in entries)
        treatments = ns._request("GET", "/__treatments") or []
        assert all(str(t.get("created_at", "2010")) >= "2010" for t in treatments)
        assert not any("2000-02-29" in str(t) or "1970-" in str(t) for t in treatments)

        by_seq = {r["sequence"]: r for r in gw.readings()}
        for seq in (2, 3, 4):
            assert by_seq[seq]["exclusion"] == "time-unresolved", by_seq[seq]
        assert float(by_seq[2]["mgdl"]) == 102
        assert by_seq[3]["meter_time"].startswith("2000-02-29T00:00:00")
        assert by_seq[4]["special"] == "+inf"
        assert by_seq[1].get("exclusion") is None
        assert by_seq[5].get("exclusion") is None
        text = gw.run("readings")
        assert text.returncode == 0
        assert text.stdout.count("not uploaded: time-unresolved") == 3
        assert "2000-02-29" in text.stdout

        # Nothing of them is queued for later either.
        assert gw.query("SELECT count(*) FROM outbox") == [(2,)]
        assert gw.sync().returncode == 0
        assert len(ns.entries()) == 2
    finally:
        ns.stop()
