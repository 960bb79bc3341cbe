"""Meter descriptions for the system tests."""


def sample_meter(address="C0:26:DA:01:02:03", bonding=True, count=5, first=4, **extra):
    """A meter dict with `count` records from sequence `first`."""
    records = []
    for i in range(count):
        records.append({"sequence": first + i, "time": "2024-03-05T%02d:00:00" % (7 + i % 12),
                        "timeOffset": 60, "mgdl": 100 + i})
    meter = {"address": address, "name": "meter+%s" % address.replace(":", "")[-6:], "pin": "123456",
             "bonding": bonding, "records": records}
    meter.update(extra)
    return meter
