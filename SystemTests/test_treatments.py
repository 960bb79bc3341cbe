"""Nightscout treatments from the real binary, a meter on the BlueZ stand-in and the loopback Nightscout
double: every uploadable reading exactly once as an entry and as a BG Check treatment at its own time
through refused connections, 500s and commit-then-drop; HI and LO as notes; readings in the future held
back; careportal off pauses the treatments alone, in one line."""
import datetime
import json
import urllib.request

import pytest

from gg_daemon import NightscoutDouble
from gg_download import Gateway, meter

ADDRESS = "C0:26:DA:01:02:03"


def treatments(ns):
    with urllib.request.urlopen("http://127.0.0.1:%d/__treatments" % ns.control_port, timeout=10) as r:
        return json.load(r)


def api_treatments(ns, count=100):
    """The public route, as a follower (AAPS, xDrip+) reads it."""
    req = urllib.request.Request("%s/api/v1/treatments.json?count=%d" % (ns.url, count),
                                 headers={"api-secret": __import__("hashlib").sha1(ns.secret.encode()).hexdigest()})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.load(r)


def utc_ms(local_text, offset_minutes):
    """Nightscout's created_at/sysTime for a meter local time at a UTC offset."""
    t = datetime.datetime.strptime(local_text, "%Y-%m-%dT%H:%M:%S") - datetime.timedelta(minutes=offset_minutes)
    return t.strftime("%Y-%m-%dT%H:%M:%S") + ".000Z"


def config(ns, extra=""):
    return ns.config("treatments = true\nout_of_range_notes = true\n" + extra)


def meter_records():
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None, microsecond=0)
    # Times are the meter's local time; the meter's zone is Europe/Berlin (+01:00 in March).
    return [
        {"sequence": 1, "time": "2024-03-05T07:00:00", "mgdl": 101, "context": {"meal": 1, "carbohydrateGrams": 45}},
        {"sequence": 2, "time": "2024-03-05T08:00:00", "mgdl": 102, "context": {"meal": 2, "tester": 1, "health": 4}},
        {"sequence": 3, "time": "2024-03-05T09:00:00", "mgdl": 103},
        {"sequence": 4, "time": "2024-03-05T10:00:00", "result": "high", "status": ["resultTooHigh"]},
        {"sequence": 5, "time": "2024-03-05T11:00:00", "result": "low", "status": ["resultTooLow"]},
        {"sequence": 6, "time": "2024-03-05T12:00:00", "mgdl": 106},
        {"sequence": 7, "time": (now + datetime.timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M:%S"), "mgdl": 107},
        {"sequence": 8, "time": "2037-01-01T00:00:00", "result": "high"},
    ]


@pytest.mark.parametrize("dedupe", ["15.0.6", "15.0.7"])
def test_every_reading_once_as_entry_and_bg_check_through_faults(private_bus, standin, meter_file, tmp_path, dedupe):
    recs = meter_records()
    standin("--meter", meter_file(meter(records_list=recs)))
    ns = NightscoutDouble(log_path=str(tmp_path / "ns.log"))
    try:
        ns.set_mode(treatments_dedupe=dedupe)
        gw = Gateway(private_bus, tmp_path, time_zone="Europe/Berlin", extra_config=config(ns))
        gw.pair(ADDRESS, time_zone="Europe/Berlin")

        # Refused: the server is down while the meter is read. Everything is stored, nothing lost.
        ns.set_mode(mode="down")
        first = gw.sync(expect=75)
        assert ADDRESS + ": 8 new readings" in first.stdout
        ns.set_mode(mode="up")

        # 500 to one upload of each collection, then commit-then-drop for the next two.
        ns.set_mode(mode="status", status=500, times=2, collection="all")
        r = gw.run("upload", "--wait", "5")
        assert r.returncode == 75, r.stdout + r.stderr
        ns.set_mode(mode="commit_drop", times=2, collection="all")
        r = gw.run("upload", "--wait", "5")
        assert r.returncode == 75, r.stdout + r.stderr
        r = gw.run("upload", "--wait", "10")
        assert r.returncode == 0, r.stdout + r.stderr
        assert ns.stats()["faults"] == {"status": 2, "commit_drop": 2}

        uploadable = [x for x in recs if "mgdl" in x and x["sequence"] != 7]
        entries = ns.entries()
        assert sorted(e["mbg"] for e in entries) == [101, 102, 103, 106]
        assert sorted(e["sysTime"] for e in entries) == sorted(utc_ms(x["time"], 60) for x in uploadable)

        docs = treatments(ns)
        checks = [d for d in docs if d["eventType"] == "BG Check"]
        notes = [d for d in docs if d["eventType"] == "Note"]
        assert len(docs) == 6, docs
        assert sorted(d["glucose"] for d in checks) == [101, 102, 103, 106]
        assert sorted(d["created_at"] for d in checks) == sorted(utc_ms(x["time"], 60) for x in uploadable)
        by_glucose = {d["glucose"]: d for d in checks}
        for d in checks:
            assert d["glucoseType"] == "Finger" and d["units"] == "mg/dl" and d["enteredBy"] == "glucose-gateway"
            assert d["utcOffset"] == 60
            assert "carbs" not in d
        assert by_glucose[101]["notes"] == "Before meal"
        assert by_glucose[102]["notes"] == "After meal, tested by self, under stress"
        assert "notes" not in by_glucose[103]
        # Each treatment carries its entry's key.
        assert sorted(d["identifier"] for d in checks) == sorted(e["identifier"] for e in entries)

        # HI and LO: notes at their time, without a number; never entries. The 2037 HI goes nowhere.
        assert sorted((d["created_at"], d["notes"]) for d in notes) == [
            (utc_ms("2024-03-05T10:00:00", 60), "Meter reading HI (above its range)"),
            (utc_ms("2024-03-05T11:00:00", 60), "Meter reading LO (below its range)"),
        ]
        assert all("glucose" not in d for d in notes)
        assert len(api_treatments(ns)) == 6

        # Readings in the future are held back, and `readings` says why.
        by_seq = {r["sequence"]: r for r in gw.readings()}
        assert by_seq[7]["exclusion"] == "time-in-future"
        assert by_seq[8]["exclusion"] == "time-in-future"

        status = gw.run("status", "--json")
        assert status.returncode == 0, status.stderr
        assert "nightscout-treatments" in status.stdout
    finally:
        ns.stop()


def test_mmol_treatments_carry_one_decimal(private_bus, standin, meter_file, tmp_path):
    recs = [{"sequence": 1, "time": "2024-03-05T07:00:00", "mgdl": 110}]
    standin("--meter", meter_file(meter(records_list=recs)))
    ns = NightscoutDouble(log_path=str(tmp_path / "ns.log"))
    try:
        gw = Gateway(private_bus, tmp_path, extra_config=config(ns, extra='units = "mmol"\n'))
        gw.pair(ADDRESS)
        gw.sync()
        [d] = treatments(ns)
        assert d["units"] == "mmol"
        assert d["glucose"] == 6.1
        assert [e["mbg"] for e in ns.entries()] == [110]
    finally:
        ns.stop()


def test_careportal_off_pauses_treatments_in_one_line_and_entries_go_on(private_bus, standin, meter_file, tmp_path):
    recs = [{"sequence": 1, "time": "2024-03-05T07:00:00", "mgdl": 121},
            {"sequence": 2, "time": "2024-03-05T08:00:00", "result": "low"}]
    standin("--meter", meter_file(meter(records_list=recs)))
    ns = NightscoutDouble(log_path=str(tmp_path / "ns.log"))
    try:
        ns.set_mode(careportal=False)
        gw = Gateway(private_bus, tmp_path, extra_config=config(ns))
        gw.pair(ADDRESS)

        check = gw.run("upload", "--check")
        assert check.returncode == 78, check.stdout + check.stderr
        assert check.stdout.splitlines() == [
            "nightscout: credentials accepted",
            "nightscout-treatments: paused: careportal is not enabled on %s (status.json careportalEnabled is not true): "
            "treatments paused; entries go on" % ns.url,
        ]

        result = gw.run("sync")
        assert result.returncode == 75, result.stdout + result.stderr
        assert [e["mbg"] for e in ns.entries()] == [121]
        assert treatments(ns) == []
        # One line in the log; the summary has its usual line for each destination.
        logged = [line for line in result.stderr.splitlines() if "careportal" in line]
        assert len(logged) == 1, result.stderr
        assert "nightscout-treatments: 0 uploaded; paused (404): careportal is not enabled" in result.stdout
        assert "nightscout: 1 uploaded, nothing pending" in result.stdout
        assert ns.stats()["faults"] == {}

        # The site enables careportal: the next upload sends the queued treatments.
        ns.set_mode(careportal=True)
        assert gw.run("upload", "--check").returncode == 0
        r = gw.run("upload", "--wait", "10")
        assert r.returncode == 0, r.stdout + r.stderr
        assert sorted(d["eventType"] for d in treatments(ns)) == ["BG Check", "Note"]
        assert len(ns.entries()) == 1
    finally:
        ns.stop()


def test_daemon_sends_treatments_and_shows_them_in_status_and_metrics(private_bus, standin, meter_file, tmp_path):
    from gg_daemon import Gateway as Daemon, control, wait_until
    from test_daemon_run import A, PIN, meter as daemon_meter

    m = daemon_meter(A, count=3)
    m["records"].append({"sequence": 4, "time": "2024-03-05T07:00:00", "timeOffset": 0, "result": "low"})
    standin("--meter", meter_file(m))
    ns = NightscoutDouble(log_path=str(tmp_path / "ns.log"))
    gw = Daemon(tmp_path, private_bus, extra_config=config(ns), args=("--quiet-after", "0.3"))
    try:
        control(private_bus, "Advertise", A, 60.0)
        gw.pair(A, PIN)
        gw.start()
        wait_until("the treatments", lambda: len(treatments(ns)) == 4, timeout=30)
        assert len(ns.entries()) == 3
        wanted = ['glucose_gateway_uploaded_total{destination="nightscout-treatments"} 4',
                  'glucose_gateway_pending{destination="nightscout-treatments"} 0',
                  'glucose_gateway_uploaded_total{destination="nightscout"} 3']
        # Each destination's figures reach the file when its own upload is recorded: wait for all of them.
        wait_until("the metrics", lambda: all(w in open(gw.metrics).read() for w in wanted), timeout=20)
        report = gw.status()
        text = json.dumps(report)
        assert "nightscout-treatments" in text
        assert sorted(d["eventType"] for d in treatments(ns)) == ["BG Check"] * 3 + ["Note"]
    finally:
        gw.stop()
        ns.stop()
