"""The real-BlueZ front end (`glucose-gateway-simulator --bluez`) under bluezoo, an emulator of BlueZ with several
adapters: the meter registers its GATT application and advertisement on hci1, a central on hci0
discovers it by the GLS UUID, connects, subscribes and downloads every record.

bluezoo 1.0.2 limits (why each emulator instance serves one first connection): a second Connect after
Disconnect fails, a meter-side disconnect never reaches the central, the discovery UUID filter and the
encryption flags are ignored, Pair reports success without calling the agent, and advertisements need
Discoverable=true."""
import asyncio
import struct

from bleak import BleakClient, BleakScanner

from gg_bus import Simulator
from gg_meters import sample_meter

GLS = "00001808-0000-1000-8000-00805f9b34fb"
GM = "00002a18-0000-1000-8000-00805f9b34fb"
GMC = "00002a34-0000-1000-8000-00805f9b34fb"
RACP = "00002a52-0000-1000-8000-00805f9b34fb"
SERIAL = "00002a25-0000-1000-8000-00805f9b34fb"


def test_bleak_on_hci0_downloads_from_the_meter_on_hci1(bluezoo, private_bus, meter_file, tmp_path, monkeypatch):
    meter = sample_meter(bonding=False, count=12, first=40)
    meter["records"][2]["context"] = {"meal": 2}
    meter["deviceInformation"] = {"manufacturer": "Roche", "model": "Accu-Chek Guide", "serial": "92534026466"}
    sim = Simulator(["--bluez", "--adapter", "hci1", "--bus", private_bus, "--meter", meter_file(meter)],
                    log_path=str(tmp_path / "meter.log"))
    try:
        sim.wait_for_line("ready", timeout=20)
        monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", private_bus)

        async def scenario():
            found = asyncio.get_running_loop().create_future()

            def on_advertisement(dev, adv):
                # bluezoo ignores the discovery filter, so the service UUID is checked here.
                if GLS in adv.service_uuids and not found.done():
                    found.set_result((dev, adv))

            # The callback is registered before scanning starts: bluezoo reports a device once.
            async with BleakScanner(on_advertisement, bluez={"adapter": "hci0"}):
                device, adv = await asyncio.wait_for(found, 20)
            assert adv.local_name == meter["name"]
            # The central sees the meter under the address of the adapter it runs on.
            assert device.address == bluezoo[1]
            measurements, contexts, racp = [], [], []
            done = asyncio.Event()

            def on_racp(_, data):
                racp.append(bytes(data))
                done.set()

            async with BleakClient(device, bluez={"adapter": "hci0"}) as client:
                assert bytes(await client.read_gatt_char(SERIAL)) == b"92534026466"
                await client.start_notify(GM, lambda _, d: measurements.append(bytes(d)))
                await client.start_notify(GMC, lambda _, d: contexts.append(bytes(d)))
                await client.start_notify(RACP, on_racp)
                await client.write_gatt_char(RACP, b"\x01\x01", response=True)
                await asyncio.wait_for(done.wait(), 20)
            return measurements, contexts, racp

        measurements, contexts, racp = asyncio.run(asyncio.wait_for(scenario(), 60))
        assert [struct.unpack_from("<H", m, 1)[0] for m in measurements] == list(range(40, 52))
        assert [struct.unpack_from("<H", c, 1)[0] for c in contexts] == [42]
        assert racp == [b"\x06\x00\x01\x01"]
    finally:
        sim.stop()
