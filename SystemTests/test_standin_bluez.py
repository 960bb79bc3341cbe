"""The BlueZ stand-in checked directly over D-Bus (dbus-fast): the behaviours of bluetoothd that a
faithful double must reproduce (name lifecycle, ObjectManager, discovery, Connect before
ServicesResolved, pairing through the caller's agent, security-gated GATT, notify sessions per sender,
RACP errors, disconnect order, RemoveDevice, adapter removal)."""
import asyncio
import os
import struct

from dbus_fast import Variant

from gg_dbus import (ADAPTER, Client, DBusCallError, PasskeyAgent, device_path, register_agent)
from gg_meters import sample_meter

ADDRESS = "C0:26:DA:01:02:03"
GM = "00002a18-0000-1000-8000-00805f9b34fb"
RACP = "00002a52-0000-1000-8000-00805f9b34fb"
FEATURE = "00002a51-0000-1000-8000-00805f9b34fb"
ADP = "org.bluez.Adapter1"
DEV = "org.bluez.Device1"
CHR = "org.bluez.GattCharacteristic1"


def run(coro, timeout=60):
    return asyncio.run(asyncio.wait_for(coro, timeout))


def props_changed(path, interface=None):
    def match(m):
        return m.member == "PropertiesChanged" and m.path == path and (interface is None or m.body[0] == interface)
    return match


async def connect_and_resolve(client, path):
    mark = len(client.signals)
    await client.bluez(path, DEV, "Connect")
    replied_at = len(client.signals)
    await client.wait_property(path, DEV, "ServicesResolved", True)
    return mark, replied_at


def test_connect_replies_before_services_resolve_and_disconnect_order(standin, meter_file, private_bus):
    standin("--meter", meter_file(sample_meter(bonding=False)))

    async def scenario():
        c = await Client.connect(private_bus)
        adapter = (await c.managed_objects())[ADAPTER]["org.bluez.Adapter1"]
        assert adapter["Powered"].value is True and "central" in adapter["Roles"].value
        path = await c.discover(ADDRESS)
        mark, replied_at = await connect_and_resolve(c, path)
        log = c.signals[mark:]
        names = [(m.member, m.path) for m in log]
        # Connected=true before the reply; GATT objects and ServicesResolved=true only after it.
        connected_idx = next(i for i, m in enumerate(log) if props_changed(path, DEV)(m) and "Connected" in m.body[1])
        assert mark + connected_idx < replied_at
        resolved_idx = next(i for i, m in enumerate(log) if props_changed(path, DEV)(m) and "ServicesResolved" in m.body[1])
        assert mark + resolved_idx >= replied_at
        added = [i for i, (member, _) in enumerate(names) if member == "InterfacesAdded"]
        assert added and all(i < resolved_idx for i in added)
        assert (await c.get(path, DEV, "Connected")) is True
        assert (await c.get(path, DEV, "ServicesResolved")) is True

        mark = len(c.signals)
        await c.bluez(path, DEV, "Disconnect")
        await c.wait_signal(lambda m: m.member == "Disconnected" and m.path == path, since=mark)
        await c.wait_signal(lambda m: props_changed(path, DEV)(m) and "Connected" in m.body[1], since=mark)
        order = []
        for m in c.signals[mark:]:
            if props_changed(path, DEV)(m):
                order += [k for k in m.body[1] if k in ("ServicesResolved", "Connected")]
            elif m.member == "Disconnected" and m.path == path:
                order.append("Disconnected:" + m.body[0])
        # bluetoothd 5.83+ sends Disconnected from device_remove_connection at once; the Connected change
        # it queues there goes out from gdbus's idle flush, after it (src/device.c, gdbus/object.c).
        assert order == ["ServicesResolved", "Disconnected:org.bluez.Reason.Local", "Connected"]
        assert (await c.get(path, DEV, "Connected")) is False
        try:
            await c.bluez(path, DEV, "Disconnect")
            raise AssertionError("second Disconnect succeeded")
        except DBusCallError as e:
            assert e.name == "org.bluez.Error.NotConnected"
        c.disconnect()

    run(scenario())


def test_pairing_calls_the_callers_agent_and_gates_gls(standin, meter_file, private_bus):
    standin("--meter", meter_file(sample_meter(bonding=True)))

    async def scenario():
        c = await Client.connect(private_bus)
        path = await c.discover(ADDRESS)
        await connect_and_resolve(c, path)
        feature = await c.characteristic(path, FEATURE)
        try:
            await c.bluez(feature, CHR, "ReadValue", "a{sv}", [{}])
            raise AssertionError("GLS read before bonding succeeded")
        except DBusCallError as e:
            assert e.name == "org.bluez.Error.NotPermitted"
        # Device Information needs no bond.
        objects = await c.managed_objects()
        model = next(p for p, i in objects.items() if "org.bluez.GattCharacteristic1" in i
                     and i["org.bluez.GattCharacteristic1"]["UUID"].value.startswith("00002a24"))
        (value,) = await c.bluez(model, CHR, "ReadValue", "a{sv}", [{}])
        assert len(value) > 0

        wrong = PasskeyAgent(passkey=111111)
        await register_agent(c, wrong)
        try:
            await c.bluez(path, DEV, "Pair", timeout=30)
            raise AssertionError("Pair with a wrong PIN succeeded")
        except DBusCallError as e:
            assert e.name == "org.bluez.Error.AuthenticationFailed"
        assert wrong.requests == [path]
        assert (await c.get(path, DEV, "Paired")) is False
        assert (await c.get(path, DEV, "Connected")) is False
        await c.bluez("/org/bluez", "org.bluez.AgentManager1", "UnregisterAgent", "o", ["/test/agent"])

        right = PasskeyAgent(passkey=123456)
        await register_agent(c, right, path="/test/agent2")
        await c.bluez(path, DEV, "Pair", timeout=30)
        assert right.requests == [path]
        assert (await c.get(path, DEV, "Paired")) is True
        assert (await c.get(path, DEV, "Bonded")) is True
        (value,) = await c.bluez(feature, CHR, "ReadValue", "a{sv}", [{}])
        assert len(value) == 2
        try:
            await c.bluez(path, DEV, "Pair")
            raise AssertionError("second Pair succeeded")
        except DBusCallError as e:
            assert e.name == "org.bluez.Error.AlreadyExists"
        c.disconnect()

    run(scenario())


def test_agent_of_another_connection_is_not_used(standin, meter_file, private_bus):
    standin("--meter", meter_file(sample_meter(bonding=True)))

    async def scenario():
        other = await Client.connect(private_bus)
        display = PasskeyAgent(passkey=123456)
        await register_agent(other, display, capability="DisplayYesNo", default=True)
        c = await Client.connect(private_bus)
        mine = PasskeyAgent(passkey=123456)
        await register_agent(c, mine, default=False)
        path = await c.discover(ADDRESS)
        await c.bluez(path, DEV, "Pair", timeout=30)
        assert mine.requests == [path]
        assert display.requests == []
        other.disconnect()
        c.disconnect()

    run(scenario())


def test_racp_att_errors_and_notify_sessions_per_sender(standin, meter_file, private_bus):
    standin("--meter", meter_file(sample_meter(bonding=False, count=3, first=7,
                                               faults={"notificationDelayMs": 200})))

    async def scenario():
        a = await Client.connect(private_bus)
        b = await Client.connect(private_bus)
        path = await a.discover(ADDRESS)
        await connect_and_resolve(a, path)
        gm = await a.characteristic(path, GM)
        racp = await a.characteristic(path, RACP)
        write = lambda client, data: client.bluez(racp, CHR, "WriteValue", "aya{sv}",
                                                  [data, {"type": Variant("s", "request")}])
        try:
            await write(a, b"\x01\x01")
            raise AssertionError("RACP write without indications succeeded")
        except DBusCallError as e:
            assert (e.name, e.text) == ("org.bluez.Error.Failed", "Operation failed with ATT error: 0x81")
        await a.bluez(racp, CHR, "StartNotify")
        await a.bluez(gm, CHR, "StartNotify")
        await b.bluez(gm, CHR, "StartNotify")
        assert (await a.get(gm, CHR, "Notifying")) is True
        mark = len(a.signals)
        await write(a, b"\x01\x01")
        try:
            await write(a, b"\x04\x01")
            raise AssertionError("overlapping RACP procedure accepted")
        except DBusCallError as e:
            assert e.text == "Operation failed with ATT error: 0x80"
        end = await a.wait_signal(lambda m: props_changed(racp, CHR)(m) and "Value" in m.body[1], since=mark)
        assert bytes(end.body[1]["Value"].value) == b"\x06\x00\x01\x01"
        values = [bytes(m.body[1]["Value"].value) for m in a.signals[mark:]
                  if props_changed(gm, CHR)(m) and "Value" in m.body[1]]
        assert [struct.unpack_from("<H", v, 1)[0] for v in values] == [7, 8, 9]
        # b leaves the bus: a's session keeps Notifying; a's StopNotify ends it. b alone discovers, so
        # Discovering going false shows that the stand-in has ended all of b's sessions.
        assert (await a.get(ADAPTER, ADP, "Discovering")) is False
        mark = len(a.signals)
        await b.bluez(ADAPTER, ADP, "StartDiscovery")
        assert (await a.get(ADAPTER, ADP, "Discovering")) is True
        b.disconnect()
        await a.wait_signal(lambda m: props_changed(ADAPTER, ADP)(m) and m.body[1].get("Discovering") is not None
                            and m.body[1]["Discovering"].value is False, timeout=20, since=mark)
        assert (await a.get(gm, CHR, "Notifying")) is True
        await a.bluez(gm, CHR, "StopNotify")
        assert (await a.get(gm, CHR, "Notifying")) is False
        try:
            await a.bluez(gm, CHR, "StopNotify")
            raise AssertionError("StopNotify without a session succeeded")
        except DBusCallError as e:
            assert e.name == "org.bluez.Error.Failed"
        a.disconnect()

    run(scenario())


def test_restart_gives_a_new_owner_keeps_bonds_and_drops_registrations(standin, meter_file, private_bus):
    sim = standin("--meter", meter_file(sample_meter(bonding=True)))

    async def scenario():
        c = await Client.connect(private_bus)
        (first_owner,) = await c.call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus",
                                      "GetNameOwner", "s", ["org.bluez"])
        await register_agent(c, PasskeyAgent(passkey=123456))
        try:
            await c.bluez("/org/bluez", "org.bluez.AgentManager1", "RegisterAgent", "os", ["/test/agent", "KeyboardOnly"])
            raise AssertionError("second RegisterAgent accepted")
        except DBusCallError as e:
            assert e.name == "org.bluez.Error.AlreadyExists"
        path = await c.discover(ADDRESS)
        await c.bluez(path, DEV, "Pair", timeout=30)
        await c.bluez(ADAPTER, "org.bluez.Adapter1", "StartDiscovery")
        mark = len(c.signals)
        await c.control("RestartBluetoothd")
        lost = await c.wait_signal(lambda m: m.member == "NameOwnerChanged" and m.body[0] == "org.bluez"
                                   and m.body[2] == "", since=mark)
        back = await c.wait_signal(lambda m: m.member == "NameOwnerChanged" and m.body[0] == "org.bluez"
                                   and m.body[2] != "", since=mark)
        assert lost.body[1] == first_owner
        assert back.body[2] != first_owner
        objects = await c.managed_objects()
        assert objects[path][DEV]["Paired"].value is True
        assert objects[path][DEV]["Connected"].value is False
        assert objects[ADAPTER]["org.bluez.Adapter1"]["Discovering"].value is False
        # The agent registration died with the old daemon: the same registration is accepted again
        # (before the restart it was refused with AlreadyExists).
        await c.bluez("/org/bluez", "org.bluez.AgentManager1", "RegisterAgent", "os", ["/test/agent", "KeyboardOnly"])
        c.disconnect()

    run(scenario())
    assert sim.wait_for_line("ready", timeout=10).startswith("ready :")


def test_unpaired_device_expires_and_remove_device_drops_the_bond(standin, meter_file, private_bus):
    meters = [meter_file(sample_meter(bonding=True)),
              meter_file(sample_meter(address="C0:26:DA:0A:0B:0C", bonding=False, advertising="off"))]
    standin("--meter", meters[0], "--meter", meters[1], "--temporary-timeout", "1")

    async def scenario():
        c = await Client.connect(private_bus)
        quiet = device_path("C0:26:DA:0A:0B:0C")
        await c.control("Advertise", "sd", ["C0:26:DA:0A:0B:0C", 0.5])
        await c.bluez(ADAPTER, "org.bluez.Adapter1", "StartDiscovery")
        await c.wait_signal(lambda m: m.member == "InterfacesAdded" and m.body[0] == quiet)
        removed = await c.wait_signal(lambda m: m.member == "InterfacesRemoved" and m.body[0] == quiet, timeout=10)
        assert "org.bluez.Device1" in removed.body[1]
        await c.bluez(ADAPTER, "org.bluez.Adapter1", "StopDiscovery")

        await register_agent(c, PasskeyAgent(passkey=123456))
        path = await c.discover(ADDRESS)
        await c.bluez(path, DEV, "Pair", timeout=30)
        mark = len(c.signals)
        await c.bluez(ADAPTER, "org.bluez.Adapter1", "RemoveDevice", "o", [path])
        gone = [m.body[0] for m in c.signals[mark:] if m.member == "InterfacesRemoved"]
        await c.wait_signal(lambda m: m.member == "InterfacesRemoved" and m.body[0] == path, since=mark)
        gone = [m.body[0] for m in c.signals[mark:] if m.member == "InterfacesRemoved"]
        assert gone[-1] == path and any(g.startswith(path + "/service") for g in gone)
        path = await c.discover(ADDRESS)
        assert (await c.get(path, DEV, "Paired")) is False
        c.disconnect()

    run(scenario())


def test_meter_drops_the_link_mid_transfer(standin, meter_file, private_bus):
    standin("--meter", meter_file(sample_meter(bonding=False, count=6, first=1, faults={"dropLinkAfter": 2})))

    async def scenario():
        c = await Client.connect(private_bus)
        path = await c.discover(ADDRESS)
        await connect_and_resolve(c, path)
        gm = await c.characteristic(path, GM)
        racp = await c.characteristic(path, RACP)
        await c.bluez(gm, CHR, "StartNotify")
        await c.bluez(racp, CHR, "StartNotify")
        mark = len(c.signals)
        await c.bluez(racp, CHR, "WriteValue", "aya{sv}", [b"\x01\x01", {}])
        reason = await c.wait_signal(lambda m: m.member == "Disconnected" and m.path == path, since=mark)
        assert reason.body[0] == "org.bluez.Reason.Remote"
        values = [m for m in c.signals[mark:] if props_changed(gm, CHR)(m) and "Value" in m.body[1]]
        assert len(values) == 2
        # Sessions survive the disconnect: after reconnecting the rest arrives without a new StartNotify.
        await connect_and_resolve(c, path)
        assert (await c.get(gm, CHR, "Notifying")) is True
        mark = len(c.signals)
        await c.bluez(racp, CHR, "WriteValue", "aya{sv}", [b"\x01\x03\x01" + struct.pack("<H", 3), {}])
        await c.wait_signal(lambda m: props_changed(racp, CHR)(m) and "Value" in m.body[1], since=mark)
        values = [bytes(m.body[1]["Value"].value) for m in c.signals[mark:] if props_changed(gm, CHR)(m)
                  and "Value" in m.body[1]]
        assert [struct.unpack_from("<H", v, 1)[0] for v in values] == [3, 4, 5, 6]
        c.disconnect()

    run(scenario())


def test_adapter_removal_and_powered_off(standin, meter_file, private_bus):
    standin("--meter", meter_file(sample_meter(bonding=False)))

    async def scenario():
        c = await Client.connect(private_bus)
        path = await c.discover(ADDRESS)
        await connect_and_resolve(c, path)
        mark = len(c.signals)
        await c.control("RemoveAdapter")
        removed = await c.wait_signal(lambda m: m.member == "InterfacesRemoved" and m.body[0] == ADAPTER, since=mark)
        first_removed = next(m for m in c.signals[mark:] if m.member == "InterfacesRemoved")
        assert first_removed is removed
        assert ADAPTER not in await c.managed_objects()
        await c.control("AddAdapter")
        added = await c.wait_signal(lambda m: m.member == "InterfacesAdded" and m.body[0] == ADAPTER, since=mark)
        # A hot-plugged adapter appears off and is then powered on (AutoEnable).
        assert added.body[1]["org.bluez.Adapter1"]["Powered"].value is False
        await c.wait_property(ADAPTER, "org.bluez.Adapter1", "Powered", True)
        await c.bluez(ADAPTER, "org.freedesktop.DBus.Properties", "Set", "ssv",
                      ["org.bluez.Adapter1", "Powered", Variant("b", False)])
        try:
            await c.bluez(ADAPTER, "org.bluez.Adapter1", "StartDiscovery")
            raise AssertionError("discovery started on a powered-off adapter")
        except DBusCallError as e:
            assert e.name == "org.bluez.Error.NotReady"
        calls = (await c.control("CallLog"))[0]
        assert "org.bluez.Device1.Connect " + path in calls
        c.disconnect()

    run(scenario())


def test_state_file_keeps_bonds_across_processes(standin, meter_file, private_bus, tmp_path):
    state = str(tmp_path / "bonds.json")
    meter = meter_file(sample_meter(bonding=True))
    first = standin("--meter", meter, "--state", state)

    async def pair():
        c = await Client.connect(private_bus)
        await register_agent(c, PasskeyAgent(passkey=123456))
        path = await c.discover(ADDRESS)
        await c.bluez(path, DEV, "Pair", timeout=30)
        c.disconnect()

    run(pair())
    assert first.stop() == 0
    assert oct(os.stat(state).st_mode & 0o777) == "0o600"
    standin("--meter", meter, "--state", state)

    async def check():
        c = await Client.connect(private_bus)
        objects = await c.managed_objects()
        assert objects[device_path(ADDRESS)][DEV]["Paired"].value is True
        c.disconnect()

    run(check())


def test_scripted_connect_failures_stale_link_and_rfkill(standin, meter_file, private_bus):
    standin("--meter", meter_file(sample_meter(bonding=False)))

    async def scenario():
        c = await Client.connect(private_bus)
        path = await c.discover(ADDRESS)
        await c.control("FailConnect", "sas", [ADDRESS, ["abort-by-local", "in-progress", "canceled",
                                                          "resolved-before-export"]])
        mark = len(c.signals)
        for expected in [("org.bluez.Error.Failed", "le-connection-abort-by-local"),
                         ("org.bluez.Error.InProgress", "In Progress"),
                         ("org.bluez.Error.Failed", "br-connection-canceled")]:
            try:
                await c.bluez(path, DEV, "Connect")
                raise AssertionError("scripted Connect failure did not happen")
            except DBusCallError as e:
                assert (e.name, e.text) == expected
        flap = [m.body[1]["Connected"].value for m in c.signals[mark:]
                if props_changed(path, DEV)(m) and "Connected" in m.body[1]]
        assert flap == [True, False]
        assert (await c.get(path, DEV, "Connected")) is False
        # bluez #1489: ServicesResolved=true arrives before the GATT objects.
        mark = len(c.signals)
        await c.bluez(path, DEV, "Connect")
        await c.wait_property(path, DEV, "ServicesResolved", True)
        assert not any(m.member == "InterfacesAdded" for m in c.signals[mark:])
        await c.wait_signal(lambda m: m.member == "InterfacesAdded" and m.body[0].startswith(path + "/service"),
                            since=mark)
        await c.bluez(path, DEV, "Disconnect")
        # A link nobody asked for (bluez #89): Connected and resolved at once.
        await c.control("StaleConnect", "s", [ADDRESS])
        objects = await c.managed_objects()
        assert objects[path][DEV]["Connected"].value is True
        assert objects[path][DEV]["ServicesResolved"].value is True
        await c.control("SetRfkill", "b", [True])
        adapter = (await c.managed_objects())[ADAPTER]["org.bluez.Adapter1"]
        assert adapter["PowerState"].value == "off-blocked" and adapter["Powered"].value is False
        assert (await c.get(path, DEV, "Connected")) is False
        try:
            await c.bluez(ADAPTER, "org.freedesktop.DBus.Properties", "Set", "ssv",
                          ["org.bluez.Adapter1", "Powered", Variant("b", True)])
            raise AssertionError("powered on through rfkill")
        except DBusCallError as e:
            assert e.name == "org.bluez.Error.Blocked"
        await c.control("SetRfkill", "b", [False])
        await c.bluez(ADAPTER, "org.freedesktop.DBus.Properties", "Set", "ssv",
                      ["org.bluez.Adapter1", "Powered", Variant("b", True)])
        assert (await c.get(ADAPTER, "org.bluez.Adapter1", "PowerState")) == "on"
        c.disconnect()

    run(scenario())


def test_pairing_is_cancelled_when_the_caller_leaves_the_bus(standin, meter_file, private_bus):
    standin("--meter", meter_file(sample_meter(bonding=True)))

    async def scenario():
        watcher = await Client.connect(private_bus)
        caller = await Client.connect(private_bus)
        # The agent answers only after the caller is gone.
        release = asyncio.Event()
        path = await watcher.discover(ADDRESS)
        from dbus_fast.service import ServiceInterface, method

        class Blocking(ServiceInterface):
            def __init__(self):
                super().__init__("org.bluez.Agent1")
                self.asked = asyncio.Event()

            @method()
            async def RequestPasskey(self, device: "o") -> "u":
                self.asked.set()
                await release.wait()
                return 123456

            @method()
            def Cancel(self):
                pass

            @method()
            def Release(self):
                pass

        blocking = Blocking()
        await register_agent(caller, blocking)
        pair = asyncio.ensure_future(caller.bluez(path, DEV, "Pair", timeout=30))
        await asyncio.wait_for(blocking.asked.wait(), 10)
        mark = len(watcher.signals)
        caller.disconnect()
        await watcher.wait_signal(lambda m: props_changed(path, DEV)(m) and m.body[1].get("Connected")
                                  and m.body[1]["Connected"].value is False, since=mark)
        release.set()
        assert (await watcher.get(path, DEV, "Paired")) is False
        pair.cancel()
        watcher.disconnect()

    run(scenario())
