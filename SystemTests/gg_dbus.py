"""A small asynchronous D-Bus client over dbus-fast for talking to the BlueZ stand-in directly."""
import asyncio

from dbus_fast import Message, MessageType, Variant
from dbus_fast.aio import MessageBus
from dbus_fast.service import ServiceInterface, method

BLUEZ = "org.bluez"
ADAPTER = "/org/bluez/hci0"
CONTROL = "/org/glucosegateway/simulator"
CONTROL_IFACE = "org.glucosegateway.Simulator1"
GLS = "00001808-0000-1000-8000-00805f9b34fb"


def device_path(address):
    return ADAPTER + "/dev_" + address.replace(":", "_")


class DBusCallError(Exception):
    def __init__(self, name, text):
        super().__init__("%s: %s" % (name, text))
        self.name = name
        self.text = text


class Client:
    """One bus connection; records every signal it sees in arrival order."""

    def __init__(self, bus):
        self.bus = bus
        self.signals = []
        self._waiters = []
        bus.add_message_handler(self._on_message)

    @classmethod
    async def connect(cls, address):
        bus = await MessageBus(bus_address=address).connect()
        client = cls(bus)
        for rule in ("type='signal',sender='org.bluez'",
                     "type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged'"):
            await client.call("org.freedesktop.DBus", "/org/freedesktop/DBus", "org.freedesktop.DBus", "AddMatch",
                              "s", [rule])
        return client

    def _on_message(self, message):
        if message.message_type != MessageType.SIGNAL:
            return None
        self.signals.append(message)
        for predicate, future in list(self._waiters):
            if not future.done() and predicate(message):
                future.set_result(message)
        return None

    async def call(self, destination, path, interface, member, signature="", body=(), timeout=30):
        reply = await asyncio.wait_for(self.bus.call(Message(destination=destination, path=path, interface=interface,
                                                             member=member, signature=signature, body=list(body))),
                                       timeout)
        if reply.message_type == MessageType.ERROR:
            raise DBusCallError(reply.error_name, reply.body[0] if reply.body else "")
        return reply.body

    async def bluez(self, path, interface, member, signature="", body=(), timeout=30):
        return await self.call(BLUEZ, path, interface, member, signature, body, timeout)

    async def control(self, member, signature="", body=()):
        return await self.call(BLUEZ, CONTROL, CONTROL_IFACE, member, signature, body)

    async def managed_objects(self):
        (objects,) = await self.bluez("/", "org.freedesktop.DBus.ObjectManager", "GetManagedObjects")
        return objects

    async def get(self, path, interface, name):
        (value,) = await self.bluez(path, "org.freedesktop.DBus.Properties", "Get", "ss", [interface, name])
        return value.value

    async def wait_signal(self, predicate, timeout=10, since=0):
        """Returns the first signal (from index `since` of the log) matching `predicate`."""
        for message in self.signals[since:]:
            if predicate(message):
                return message
        future = asyncio.get_running_loop().create_future()
        entry = (predicate, future)
        self._waiters.append(entry)
        try:
            return await asyncio.wait_for(future, timeout)
        finally:
            self._waiters.remove(entry)

    async def wait_property(self, path, interface, name, value, timeout=10):
        def match(m):
            return (m.member == "PropertiesChanged" and m.path == path and m.body[0] == interface
                    and name in m.body[1] and m.body[1][name].value == value)
        return await self.wait_signal(match, timeout)

    async def discover(self, address, timeout=10):
        """Starts discovery with the GLS filter until the device object exists; returns its path."""
        path = device_path(address)
        mark = len(self.signals)
        await self.bluez(ADAPTER, "org.bluez.Adapter1", "SetDiscoveryFilter", "a{sv}",
                         [{"UUIDs": Variant("as", [GLS]), "Transport": Variant("s", "le")}])
        await self.bluez(ADAPTER, "org.bluez.Adapter1", "StartDiscovery")
        objects = await self.managed_objects()
        if path not in objects:
            await self.wait_signal(lambda m: m.member == "InterfacesAdded" and m.body[0] == path, timeout, since=mark)
        await self.bluez(ADAPTER, "org.bluez.Adapter1", "StopDiscovery")
        return path

    async def characteristic(self, device, uuid):
        objects = await self.managed_objects()
        for path, interfaces in objects.items():
            props = interfaces.get("org.bluez.GattCharacteristic1")
            if props and path.startswith(device + "/") and props["UUID"].value == uuid:
                return path
        raise KeyError(uuid)

    def disconnect(self):
        self.bus.disconnect()


class PasskeyAgent(ServiceInterface):
    """An org.bluez.Agent1 that answers RequestPasskey with a fixed passkey (or refuses)."""

    def __init__(self, passkey=None, reject=False):
        super().__init__("org.bluez.Agent1")
        self.passkey = passkey
        self.reject = reject
        self.requests = []
        self.cancelled = 0

    @method()
    def Release(self):
        pass

    @method()
    def Cancel(self):
        self.cancelled += 1

    @method()
    def RequestPasskey(self, device: "o") -> "u":
        self.requests.append(device)
        if self.reject:
            from dbus_fast import DBusError
            raise DBusError("org.bluez.Error.Rejected", "rejected by the user")
        return self.passkey


async def register_agent(client, agent, path="/test/agent", capability="KeyboardOnly", default=True):
    client.bus.export(path, agent)
    await client.bluez("/org/bluez", "org.bluez.AgentManager1", "RegisterAgent", "os", [path, capability])
    if default:
        await client.bluez("/org/bluez", "org.bluez.AgentManager1", "RequestDefaultAgent", "o", [path])


def standin_control(bus, member, signature="", body=()):
    """One call of the stand-in's control interface from synchronous test code."""
    async def call():
        client = await Client.connect(bus)
        try:
            return await client.control(member, signature, body)
        finally:
            client.bus.disconnect()
    return asyncio.run(call())
