"""`sync` downloads, then runs the upload: excluded readings are stored but never sent; an unreachable
server leaves the readings stored and the command exits 75."""
import asyncio
import json

from gg_daemon import NightscoutDouble
from gg_dbus import Client
from gg_download import Gateway, meter, records

ADDRESS = "C0:26:DA:01:02:03"


def test_sync_uploads_what_it_downloaded(private_bus, standin, meter_file, tmp_path):
    recs = records(1, 4) + [
        {"sequence": 5, "time": "2024-03-06T09:00:00", "mgdl": 95, "control": True},
        {"sequence": 6, "time": "2024-03-06T09:10:00", "result": "high"},
        {"sequence": 7, "time": "2024-03-06T09:20:00", "mgdl": 100, "status": ["sensorMalfunction"]},
    ]
    standin("--meter", meter_file(meter(records_list=recs)))
    ns = NightscoutDouble(log_path=str(tmp_path / "ns.log"))
    try:
        gw = Gateway(private_bus, tmp_path, extra_config=ns.config())
        gw.pair(ADDRESS)
        result = gw.sync()
        assert ADDRESS + ": 7 new readings" in result.stdout
        assert "nightscout: 4 uploaded" in result.stdout
        entries = ns.entries()
        assert sorted(e["mbg"] for e in entries) == sorted(r["mgdl"] for r in recs[:4])
        assert len(gw.readings()) == 7

        # Server gone: the next reading is stored, its upload deferred (exit 75), then sent by the next sync.
        ns.set_mode(mode="down")
        # Nothing pending: nothing to defer.
        gw.sync()

        async def add():
            client = await Client.connect(private_bus)
            try:
                await client.control("AddRecord", "ss", [ADDRESS, json.dumps({"time": "2024-03-07T09:00:00", "mgdl": 133})])
            finally:
                client.bus.disconnect()
        asyncio.run(add())
        deferred = gw.run("sync")
        assert deferred.returncode == 75, deferred.stdout + deferred.stderr
        assert ADDRESS + ": 1 new reading" in deferred.stdout
        assert len(gw.readings()) == 8
        ns.set_mode(mode="up")
        final = gw.sync()
        assert "nightscout: 1 uploaded" in final.stdout
        assert sorted(e["mbg"] for e in ns.entries()) == sorted([r["mgdl"] for r in recs[:4]] + [133])
    finally:
        ns.stop()
