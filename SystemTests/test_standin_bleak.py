"""bleak, the BlueZ client most Linux BLE code uses, against the BlueZ stand-in: scan by service UUID,
connect, subscribe to 0x2A18 and 0x2A52, write a RACP request and receive every record in order."""
import asyncio
import struct

import pytest
from bleak import BleakClient, BleakScanner

from gg_dbus import Client
from gg_meters import sample_meter

GLS = "00001808-0000-1000-8000-00805f9b34fb"
GM = "00002a18-0000-1000-8000-00805f9b34fb"
GMC = "00002a34-0000-1000-8000-00805f9b34fb"
RACP = "00002a52-0000-1000-8000-00805f9b34fb"
FEATURE = "00002a51-0000-1000-8000-00805f9b34fb"


def run_with_bus(monkeypatch, bus, coroutine_function, timeout=60):
    """Runs a bleak scenario against the bus in a fresh event loop (bleak's manager is per loop)."""
    monkeypatch.setenv("DBUS_SYSTEM_BUS_ADDRESS", bus)
    return asyncio.run(asyncio.wait_for(coroutine_function(), timeout))


async def download(address, request, expect_end):
    """Discovers the meter by the GLS UUID, subscribes and runs one RACP procedure; returns
    (measurements, contexts, racp indications)."""
    found = asyncio.get_running_loop().create_future()

    def on_advertisement(dev, adv):
        if dev.address == address and not found.done():
            found.set_result((dev, adv))

    async with BleakScanner(on_advertisement, service_uuids=[GLS]):
        device, adv = await asyncio.wait_for(found, 20)
    assert GLS in adv.service_uuids
    measurements, contexts, racp = [], [], []
    done = asyncio.Event()

    def on_measurement(_, data):
        measurements.append(bytes(data))

    def on_context(_, data):
        contexts.append(bytes(data))

    def on_racp(_, data):
        racp.append(bytes(data))
        if expect_end(bytes(data)):
            done.set()

    async with BleakClient(device) as client:
        assert client.is_connected
        feature = await client.read_gatt_char(FEATURE)
        assert len(feature) == 2
        await client.start_notify(GM, on_measurement)
        await client.start_notify(GMC, on_context)
        await client.start_notify(RACP, on_racp)
        await client.write_gatt_char(RACP, request, response=True)
        await asyncio.wait_for(done.wait(), 20)
    return measurements, contexts, racp


def sequence(measurement):
    return struct.unpack_from("<H", measurement, 1)[0]


def test_bleak_downloads_every_record_in_order(standin, meter_file, private_bus, monkeypatch):
    meter = sample_meter(bonding=False, count=40, first=17)
    meter["records"][3]["context"] = {"meal": 1}
    standin("--meter", meter_file(meter))

    async def scenario():
        return await download("C0:26:DA:01:02:03", b"\x01\x01", lambda d: d[:3] == b"\x06\x00\x01")

    measurements, contexts, racp = run_with_bus(monkeypatch, private_bus, scenario)
    assert [sequence(m) for m in measurements] == list(range(17, 57))
    # Glucose concentration of the first record: 100 mg/dL as 100e-5 kg/L (flags: offset + concentration).
    assert measurements[0][0] & 0x03 == 0x03
    assert struct.unpack_from("<H", measurements[0], 12)[0] == 0xB064
    assert [struct.unpack_from("<H", c, 1)[0] for c in contexts] == [20]
    assert racp == [b"\x06\x00\x01\x01"]


def test_bleak_sequence_filter_and_count(standin, meter_file, private_bus, monkeypatch):
    standin("--meter", meter_file(sample_meter(bonding=False, count=10, first=300)))

    async def scenario():
        first = await download("C0:26:DA:01:02:03", b"\x01\x03\x01" + struct.pack("<H", 305),
                               lambda d: d[0] == 0x06)
        count = await download("C0:26:DA:01:02:03", b"\x04\x01", lambda d: d[0] in (0x05, 0x06))
        none = await download("C0:26:DA:01:02:03", b"\x01\x03\x01" + struct.pack("<H", 400),
                              lambda d: d[0] == 0x06)
        return first, count, none

    first, count, none = run_with_bus(monkeypatch, private_bus, scenario)
    assert [sequence(m) for m in first[0]] == list(range(305, 310))
    assert first[2] == [b"\x06\x00\x01\x01"]
    assert count[2] == [b"\x05\x00\x0a\x00"]
    assert none[0] == []
    assert none[2] == [b"\x06\x00\x01\x06"]


def test_bleak_uses_acquire_notify_when_offered(standin, meter_file, private_bus, monkeypatch):
    standin("--meter", meter_file(sample_meter(bonding=False, count=10, first=1)), "--acquire-notify")

    async def scenario():
        found = asyncio.get_running_loop().create_future()

        def on_advertisement(dev, adv):
            if not found.done():
                found.set_result(dev)

        async with BleakScanner(on_advertisement, service_uuids=[GLS]):
            device = await asyncio.wait_for(found, 20)
        measurements, racp = [], []
        complete = asyncio.Event()

        def check():
            if len(measurements) == 10 and racp:
                complete.set()

        async with BleakClient(device) as client:
            char = client.services.get_characteristic(GM)
            # The characteristic carries NotifyAcquired, so bleak may take the socket path for it (it does when
            # told not to force StartNotify).
            assert "NotifyAcquired" in char.obj[1]
            await client.start_notify(GM, lambda _, d: (measurements.append(bytes(d)), check()),
                                      bluez={"use_start_notify": False})
            await client.start_notify(RACP, lambda _, d: (racp.append(bytes(d)), check()))
            await client.write_gatt_char(RACP, b"\x01\x01", response=True)
            await asyncio.wait_for(complete.wait(), 20)
            await client.stop_notify(GM)
        probe = await Client.connect(private_bus)
        (calls,) = await probe.control("CallLog")
        probe.disconnect()
        assert any(c.startswith("org.bluez.GattCharacteristic1.AcquireNotify ") for c in calls)
        assert not any(c.startswith("org.bluez.GattCharacteristic1.StartNotify ") and "char0007" in c for c in calls)
        return measurements, racp

    measurements, racp = run_with_bus(monkeypatch, private_bus, scenario)
    # Socket notifications keep their own order; their order relative to the RACP indication is not defined.
    assert [sequence(m) for m in measurements] == list(range(1, 11))
    assert racp == [b"\x06\x00\x01\x01"]
