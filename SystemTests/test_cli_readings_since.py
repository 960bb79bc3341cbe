"""`readings --since` with a wall time and no offset reads it in the gateway's zone ([gateway] time_zone),
not in the zone of the shell that runs the command."""
from gg_download import Gateway, meter, records

ADDRESS = "C0:26:DA:01:02:03"


def test_since_without_offset_is_in_the_gateway_zone(private_bus, standin, meter_file, tmp_path):
    # Meter clock in UTC: user-facing times 08:00 ... 12:00 UTC on 2024-03-05 (07:00 + 60 min offset).
    standin("--meter", meter_file(meter(records_list=records(1, 5))))
    gw = Gateway(private_bus, tmp_path, time_zone="UTC", extra_config='time_zone = "Asia/Tokyo"\n')
    gw.pair(ADDRESS, time_zone="UTC")
    gw.sync()
    assert gw.sequences() == [1, 2, 3, 4, 5]
    # 19:00 in Tokyo (UTC+9) is 10:00 UTC: sequences 3, 4, 5. Read in the process's TZ (UTC) it would
    # be 19:00 UTC, after every reading.
    since = gw.readings("--since", "2024-03-05T19:00")
    assert [r["sequence"] for r in since] == [3, 4, 5]
    assert since[0]["time"] == "2024-03-05T10:00:00Z"
    # An explicit offset or Z is taken as given.
    assert [r["sequence"] for r in gw.readings("--since", "2024-03-05T10:00Z")] == [3, 4, 5]
    assert [r["sequence"] for r in gw.readings("--since", "2024-03-05T12:00+02:00")] == [3, 4, 5]
