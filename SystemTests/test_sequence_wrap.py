"""A meter whose 16-bit sequence counter went round from 65535 to 0, through the BlueZ stand-in: the first
sync stores 65532...65535 and 0...3; a record made afterwards (4) is downloaded by itself, and nothing is
stored twice."""
from gg_dbus import standin_control as control
from gg_download import Gateway, meter

ADDRESS = "C0:26:DA:01:02:03"


def wrapped_records():
    """65532...65535 then 0...3, one per hour from 2024-03-05T07:00, listed as the meter stores them."""
    out = []
    for i, seq in enumerate([65532, 65533, 65534, 65535, 0, 1, 2, 3]):
        out.append({"sequence": seq, "time": "2024-03-05T%02d:00:00" % (7 + i), "mgdl": 90 + i})
    return out


def test_a_record_after_the_wrap_is_downloaded_once(private_bus, standin, meter_file, tmp_path):
    standin("--meter", meter_file(meter(records_list=wrapped_records())))
    gw = Gateway(private_bus, tmp_path)
    gw.pair(ADDRESS)
    first = gw.sync()
    assert ADDRESS + ": 8 new readings" in first.stdout

    seq = control(private_bus, "AddRecord", "ss", [ADDRESS, '{"time": "2024-03-05T16:00:00", "mgdl": 150}'])[0]
    assert seq == 4
    second = gw.sync()
    # Only the numbers that can be new were asked for: nothing from before the wrap came again.
    assert ADDRESS + ": 1 new reading\n" in second.stdout + "\n", second.stdout
    third = gw.sync()
    assert ADDRESS + ": 0 new readings" in third.stdout
    by_time = sorted(gw.readings(), key=lambda r: r["meter_time"])
    assert [r["sequence"] for r in by_time] == [65532, 65533, 65534, 65535, 0, 1, 2, 3, 4]
    assert gw.query("SELECT count(*), count(DISTINCT sequence || user_facing_time) FROM reading") == [(9, 9)]
    assert gw.query("SELECT highest_sequence FROM meter") == [(4,)]
    assert gw.query("SELECT count(*) FROM event WHERE kind = 'counter-reset'")[0][0] == 0
    # The meter was asked for the new numbers as a range, and never to delete anything.
    log = control(private_bus, "CallLog")[0]
    assert not any("Delete" in line for line in log)


def test_records_past_the_top_of_the_range_are_downloaded(private_bus, standin, meter_file, tmp_path):
    standin("--meter", meter_file(meter(records_list=wrapped_records()[:4])))
    gw = Gateway(private_bus, tmp_path)
    gw.pair(ADDRESS)
    assert ADDRESS + ": 4 new readings" in gw.sync().stdout
    for hour in (11, 12, 13):
        control(private_bus, "AddRecord", "ss", [ADDRESS, '{"time": "2024-03-05T%02d:00:00", "mgdl": 120}' % hour])
    second = gw.sync()
    assert ADDRESS + ": 3 new readings\n" in second.stdout + "\n", second.stdout
    assert "counter restarted" not in second.stdout
    assert gw.sequences() == [0, 1, 2, 65532, 65533, 65534, 65535]
