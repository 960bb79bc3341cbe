"""A meter whose clock is fast: readings dated more than `future_tolerance_s` after the gateway's clock are
stored with `time-in-future`, shown by `readings`, and never uploaded."""
import datetime

from gg_daemon import NightscoutDouble
from gg_download import Gateway, meter

ADDRESS = "C0:26:DA:01:02:03"


def stamp(t):
    return t.strftime("%Y-%m-%dT%H:%M:%S")


def test_readings_ahead_of_the_gateway_clock_are_held_back(private_bus, standin, meter_file, tmp_path):
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None, microsecond=0)
    recs = [
        {"sequence": 1, "time": stamp(now - datetime.timedelta(hours=2)), "mgdl": 101},
        {"sequence": 2, "time": stamp(now + datetime.timedelta(minutes=1)), "mgdl": 102},   # within 600 s
        {"sequence": 3, "time": stamp(now + datetime.timedelta(hours=2)), "mgdl": 103},     # fast clock
        {"sequence": 4, "time": "2037-01-01T00:00:00", "result": "high"},                   # a bogus HI
        {"sequence": 5, "time": "2037-01-01T00:05:00", "mgdl": 105},                        # bogus far future
    ]
    standin("--meter", meter_file(meter(records_list=recs)))
    ns = NightscoutDouble(log_path=str(tmp_path / "ns.log"))
    try:
        gw = Gateway(private_bus, tmp_path, extra_config=ns.config())
        gw.pair(ADDRESS)
        result = gw.sync()
        assert ADDRESS + ": 5 new readings" in result.stdout
        assert "nightscout: 2 uploaded" in result.stdout
        assert sorted(e["mbg"] for e in ns.entries()) == [101, 102]

        by_seq = {r["sequence"]: r for r in gw.readings()}
        assert by_seq[1].get("exclusion") is None
        assert by_seq[2].get("exclusion") is None
        assert by_seq[3]["exclusion"] == "time-in-future"
        assert float(by_seq[3]["mgdl"]) == 103
        assert by_seq[4]["exclusion"] == "time-in-future"
        assert by_seq[4]["special"] == "+inf"
        assert by_seq[5]["exclusion"] == "time-in-future"
        text = gw.run("readings")
        assert text.returncode == 0
        assert text.stdout.count("not uploaded: time-in-future") == 3

        # Nothing of them is queued for later either.
        assert gw.query("SELECT count(*) FROM outbox") == [(2,)]
        assert gw.sync().returncode == 0
        assert len(ns.entries()) == 2
    finally:
        ns.stop()


def test_the_tolerance_is_configurable(private_bus, standin, meter_file, tmp_path):
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None, microsecond=0)
    recs = [{"sequence": 1, "time": stamp(now + datetime.timedelta(minutes=5)), "mgdl": 120}]
    standin("--meter", meter_file(meter(records_list=recs)))
    gw = Gateway(private_bus, tmp_path, extra_config="future_tolerance_s = 60\n")
    gw.pair(ADDRESS)
    gw.sync()
    assert [r.get("exclusion") for r in gw.readings()] == ["time-in-future"]
