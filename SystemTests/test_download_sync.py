"""Downloads through the BlueZ stand-in: first and incremental sync, resumption, counter reset, context
pairing, records arriving meanwhile, and the clinical rules end to end."""

from gg_bus import wait_until
from gg_dbus import standin_control as control
from gg_download import Gateway, meter, records

ADDRESS = "C0:26:DA:01:02:03"


def test_first_and_incremental_sync(private_bus, standin, meter_file, tmp_path):
    standin("--meter", meter_file(meter(records_list=records(1, 20))))
    gw = Gateway(private_bus, tmp_path)
    gw.pair(ADDRESS)
    first = gw.sync()
    assert ADDRESS + ": 20 new readings" in first.stdout
    assert gw.sequences() == list(range(1, 21))

    seq = control(private_bus, "AddRecord", "ss", [ADDRESS, '{"time": "2024-03-06T09:00:00", "mgdl": 123}'])[0]
    assert seq == 21
    second = gw.sync(ADDRESS)
    assert ADDRESS + ": 1 new reading" in second.stdout
    assert gw.sequences() == list(range(1, 22))
    third = gw.sync()
    assert ADDRESS + ": 0 new readings" in third.stdout
    assert len(gw.readings()) == 21
    csv = gw.run("readings", "--csv", "--meter", ADDRESS)
    lines = csv.stdout.splitlines()
    assert lines[0].startswith("id,meter,sequence,time,meter_time,local_time")
    assert len(lines) == 22
    since = gw.readings("--since", "2024-03-06T09:00:00+01:00")
    assert [r["sequence"] for r in since] == [21]
    table = gw.run("readings", "--meter", ADDRESS)
    assert table.stdout.splitlines()[0].split() == ["METER", "TIME", "METER", "SEQ", "VALUE", "NOTE"]
    # The meter was asked only for what it had not sent yet, and never to delete anything.
    log = control(private_bus, "CallLog")[0]
    assert not any("Delete" in line for line in log)


def test_link_drop_then_resync_has_no_gap_and_no_duplicate(private_bus, standin, meter_file, tmp_path):
    standin("--meter", meter_file(meter(records_list=records(1, 300), faults={"dropLinkAfter": 120, "dropLinkTimes": 1})))
    gw = Gateway(private_bus, tmp_path)
    gw.pair(ADDRESS)
    interrupted = gw.sync(expect=1)
    assert "interrupted" in interrupted.stdout
    stored = gw.sequences()
    assert stored == list(range(1, len(stored) + 1))
    assert 0 < len(stored) <= 120
    gw.sync()
    assert gw.sequences() == list(range(1, 301))
    assert gw.query("SELECT count(*) FROM reading")[0][0] == 300


def test_counter_reset_downloads_everything_again(private_bus, standin, meter_file, tmp_path):
    state = str(tmp_path / "bonds.json")
    first = standin("--state", state, "--meter", meter_file(meter(records_list=records(100, 10))))
    gw = Gateway(private_bus, tmp_path)
    gw.pair(ADDRESS)
    gw.sync()
    assert gw.sequences() == list(range(100, 110))
    first.stop()
    # After a battery change the meter starts again at sequence 1, with new readings.
    fresh = records(1, 4, start_hour=24 * 10)
    standin("--state", state, "--meter", meter_file(meter(records_list=fresh)))
    result = gw.sync()
    assert "counter restarted" in result.stdout
    assert gw.sequences() == [1, 2, 3, 4] + list(range(100, 110))
    control(private_bus, "AddRecord", "ss", [ADDRESS, '{"time": "2024-03-20T09:00:00", "mgdl": 150}'])
    third = gw.sync()
    # The reset lowered the meter's highest sequence, so this sync is incremental again.
    assert "counter restarted" not in third.stdout
    assert gw.sequences() == [1, 2, 3, 4, 5] + list(range(100, 110))


def context_records():
    out = records(1, 6)
    for r in out:
        r["context"] = {"meal": 1 + r["sequence"] % 5}
    return out


def test_context_after_its_measurement(private_bus, standin, meter_file, tmp_path):
    standin("--meter", meter_file(meter(records_list=context_records())))
    gw = Gateway(private_bus, tmp_path)
    gw.pair(ADDRESS)
    gw.sync()
    got = {r["sequence"]: r.get("context", {}).get("meal") for r in gw.readings()}
    assert got == {s: 1 + s % 5 for s in range(1, 7)}


def test_context_before_its_measurement(private_bus, standin, meter_file, tmp_path):
    standin("--meter", meter_file(meter(records_list=context_records(), faults={"contextOrder": "before"})))
    gw = Gateway(private_bus, tmp_path)
    gw.pair(ADDRESS)
    gw.sync()
    got = {r["sequence"]: r.get("context", {}).get("meal") for r in gw.readings()}
    assert got == {s: 1 + s % 5 for s in range(1, 7)}


def test_context_missing_never_holds_a_measurement(private_bus, standin, meter_file, tmp_path):
    # No 0x2A34 at all (Accu-Chek Instant), and a context that belongs to no record.
    standin("--meter", meter_file(meter(records_list=context_records(), contextCharacteristic=False)))
    gw = Gateway(private_bus, tmp_path)
    gw.pair(ADDRESS)
    gw.sync()
    readings = gw.readings()
    assert [r["sequence"] for r in readings] == list(range(1, 7))
    assert all("context" not in r for r in readings)


def test_stray_context_is_not_attached(private_bus, standin, meter_file, tmp_path):
    standin("--meter", meter_file(meter(records_list=context_records(),
                                        faults={"malformed": [{"sequence": 3, "kind": "stray-context"}]})))
    gw = Gateway(private_bus, tmp_path)
    gw.pair(ADDRESS)
    gw.sync()
    by_seq = {r["sequence"]: r for r in gw.readings()}
    assert sorted(by_seq) == list(range(1, 7))
    assert by_seq[4]["context"]["meal"] == 1 + 4 % 5


def test_records_arriving_during_a_sync(private_bus, standin, meter_file, tmp_path):
    standin("--time-scale", "20", "--meter", meter_file(meter(
        records_list=records(1, 200), faults={"notificationDelayMs": 2},
        newRecords={"everySeconds": 10, "limit": 6, "mgdl": 120})))
    gw = Gateway(private_bus, tmp_path)
    gw.pair(ADDRESS)
    gw.sync()
    # Wait until the meter has made all its new records, then sync again: every one exactly once.
    wait_until("the meter's 6 new records", lambda: len(control(private_bus, "Records", "s", [ADDRESS])[0]) >= 206,
               timeout=20, interval=0.2)
    gw.sync()
    assert gw.sequences() == list(range(1, 207))


def test_clinical_rules_end_to_end(private_bus, standin, meter_file, tmp_path):
    recs = [
        {"sequence": 1, "time": "2024-05-01T08:00:00", "timeOffset": 0, "mgdl": 111},
        {"sequence": 2, "time": "2024-05-01T08:10:00", "timeOffset": 0, "mgdl": 95, "control": True},
        {"sequence": 3, "time": "2024-05-01T08:20:00", "timeOffset": 0, "result": "high"},
        {"sequence": 4, "time": "2024-05-01T08:30:00", "timeOffset": 0, "result": "low"},
        {"sequence": 5, "time": "2024-05-01T08:40:00", "timeOffset": 0, "mmol": 5.5, "unit": "mol/L"},
        {"sequence": 6, "time": "2024-05-01T15:00:00", "timeOffset": -420, "mgdl": 120},       # Contour: UTC base
        {"sequence": 7, "time": "2024-05-01T08:00:00", "timeOffset": 2000, "mgdl": 130},        # large offset
        {"sequence": 8, "time": "2024-03-31T02:30:00", "timeOffset": 0, "mgdl": 140},           # DST gap
        {"sequence": 9, "time": "2024-10-27T02:30:00", "timeOffset": 0, "mgdl": 150},           # repeated hour
        {"sequence": 10, "time": "2024-05-01T09:00:00", "timeOffset": 0, "mgdl": 100, "status": ["batteryLow", "timeFault"]},
        {"sequence": 11, "time": "2024-05-01T09:10:00", "timeOffset": 0, "mgdl": 100, "status": ["stripInsertionError"]},
    ]
    standin("--meter", meter_file(meter(records_list=recs)))
    gw = Gateway(private_bus, tmp_path)
    gw.pair(ADDRESS, time_zone="Europe/Berlin")
    gw.sync()
    r = {x["sequence"]: x for x in gw.readings()}
    assert r[1]["time"] == "2024-05-01T06:00:00Z" and r[1]["mgdl"] == 111 and "exclusion" not in r[1]
    assert r[2]["exclusion"] == "control-solution"
    assert r[3]["exclusion"] == "hi" and r[3]["special"] == "+inf" and "mgdl" not in r[3]
    assert r[4]["exclusion"] == "lo" and r[4]["special"] == "-inf"
    assert r[5]["unit"] == "mol/L" and r[5]["mmoll"] == 5.5 and "exclusion" not in r[5]
    assert r[6]["local_time"] == "2024-05-01T08:00:00" and r[6]["time"] == "2024-05-01T06:00:00Z"
    assert r[7]["local_time"] == "2024-05-02T17:20:00" and r[7]["time"] == "2024-05-02T15:20:00Z"
    assert r[6]["localTime"] == r[6]["local_time"] and r[7]["localTime"] == r[7]["local_time"]   # deprecated key
    assert r[8]["time"] == "2024-03-31T01:30:00Z"
    # The repeated autumn hour, on a meter without a readable clock and with records out of time order: kept,
    # with both candidate instants, never given one of them.
    assert r[9]["exclusion"] == "time-uncertain" and "time" not in r[9]
    assert r[9]["clock"]["candidates"] == ["2024-10-27T00:30:00Z", "2024-10-27T01:30:00Z"]
    # Its meter time is the meter's civil time with no offset, not the zone's first reading of it.
    assert r[9]["meter_time"] == "2024-10-27T02:30:00" and r[9]["meterTime"] == r[9]["meter_time"]
    assert r[8]["meter_time"] == "2024-03-31T01:30:00Z"
    assert "exclusion" not in r[10]
    assert r[11]["exclusion"] == "sensor-fault"
    # Excluded readings are kept but never queued for upload (no destination here: nothing queued at all).
    assert gw.query("SELECT count(*) FROM reading")[0][0] == 11


def test_progress_bar_on_a_terminal_summary_otherwise(private_bus, standin, meter_file, tmp_path):
    import os
    import pty
    import subprocess
    standin("--meter", meter_file(meter(records_list=records(1, 300), faults={"notificationDelayMs": 1})))
    gw = Gateway(private_bus, tmp_path)
    gw.pair(ADDRESS)
    master, slave = pty.openpty()
    process = subprocess.Popen(gw.command("sync"), env=gw.env, stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    import select
    import time
    output = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 0.5)
        if not ready:
            if process.poll() is not None:
                break
            continue
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    assert process.wait(timeout=10) == 0
    os.close(master)
    text = output.decode(errors="replace")
    assert "[" in text and "/300" in text and "#" in text
    assert ADDRESS + ": 300 new readings" in text
    # Not a terminal: exactly the summary, no bar.
    control(private_bus, "AddRecord", "ss", [ADDRESS, '{"time": "2024-04-06T09:00:00", "mgdl": 123}'])
    plain = gw.sync()
    assert plain.stdout == ADDRESS + ": 1 new reading\n"


def test_services_flagged_resolved_before_they_are_exported(private_bus, standin, meter_file, tmp_path):
    """bluez #1489: ServicesResolved=true comes before the GATT objects, which then come one by one. Pair and
    sync must see the whole Glucose Service, not the first characteristic exported."""
    standin("--meter", meter_file(meter(records_list=records(1, 5))))
    gw = Gateway(private_bus, tmp_path)
    control(private_bus, "FailConnect", "sas", [ADDRESS, ["resolved-before-export"]])
    gw.pair(ADDRESS)
    control(private_bus, "FailConnect", "sas", [ADDRESS, ["resolved-before-export"]])
    first = gw.sync()
    assert ADDRESS + ": 5 new readings" in first.stdout
    assert gw.sequences() == list(range(1, 6))
