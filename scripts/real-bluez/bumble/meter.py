"""Glucose meters on Bumble's host stack, linked to the guest kernel through an emulated controller.

    meter.py --meter FILE[,OPTION...] [--meter ...] [--pairing METHOD] [--security-request]
             [--pairing-fault cancel|silent] [--racp-error CODE] [--disconnect-after-racp]
             [--gateway-address ADDRESS|none] [--control FIFO]

Bumble's emulated controllers share one link: the first is the kernel's hci0 through /dev/vhci (the
gateway's adapter), each further one carries one meter's own host (Bumble's SMP, ATT, GATT). So the gateway
meets meters whose stack is not BlueZ: ATT MTU 23, no EATT, their own SMP and their own ATT error codes.

A meter: Glucose Service (0x2A18 and 0x2A34 notify, 0x2A51 read, 0x2A52 write and indicate, every value
and descriptor behind encryption), Device Information, a clock (Current Time Service, or Date Time 0x2A08
inside the Glucose Service as Roche meters have it), advertising 0x1808 and its name. What it holds comes
from a meter file in the simulator's format (meter_file.py); how it pairs and misbehaves from the file's
"pairing", the options after the file name (meter_options) or the command line's defaults. What it does is
printed one event a line on stdout, each after the meter's address ("ready METHOD", "connected PEER",
"paired METHOD", "racp REQUEST", "disconnected REASON", ...); lines written to the control FIFO steer every
meter ("forget": drop every bond; "advertise on|off|always"; "bursts ON OFF"; "disconnect"; "load FILE": the
meter of FILE's address now holds FILE's records and runs its clock, bonds kept).

Bumble is pinned (0.0.236): stack.py reaches into its emulator's internals.
"""
import argparse
import asyncio
import datetime
import logging
import os
import sys

from bumble import hci
from bumble.att import ATT_Error, ErrorCode
from bumble.controller import Controller
from bumble.core import AdvertisingData
from bumble.gatt import (GATT_CLIENT_CHARACTERISTIC_CONFIGURATION_DESCRIPTOR, Characteristic, CharacteristicValue,
                         Descriptor, Service)
from bumble.keys import MemoryKeyStore
from bumble.pairing import PairingConfig
from bumble.transport import open_transport

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import meter_file  # noqa: E402
from stack import (CancellingSession, ConnectionAddressLink, Delegate, MeterDevice, SilentSession,  # noqa: E402
                   event, legacy_features)

CCCD = GATT_CLIENT_CHARACTERISTIC_CONFIGURATION_DESCRIPTOR
RACP_REPORT, RACP_DELETE, RACP_ABORT, RACP_COUNT = 1, 2, 3, 4
RACP_COUNT_RESPONSE, RACP_RESPONSE = 5, 6
SUCCESS, OPCODE_NOT_SUPPORTED, INVALID_OPERATOR, OPERATOR_NOT_SUPPORTED = 1, 2, 3, 4
INVALID_OPERAND, NO_RECORDS, PROCEDURE_NOT_COMPLETED, OPERAND_NOT_SUPPORTED = 5, 6, 8, 9


# The event loop keeps only weak references to tasks: the running ones are kept here until they end.
TASKS = set()


def spawn(coroutine):
    task = asyncio.get_running_loop().create_task(coroutine)
    TASKS.add(task)
    task.add_done_callback(TASKS.discard)
    return task


class Meter:
    def event(self, text):
        event(f"{self.m.address} {text}")

    def __init__(self, options, meter):
        self.o = options
        self.m = meter
        self.device = None
        self.connection = None
        self.busy = False
        self.drops = 0
        self.clock_skew = meter.clock_skew
        self.advertise_wanted = meter.advertising[0] != "off"

    # --- GATT ------------------------------------------------------------------------------------------

    def _cccd(self, characteristic):
        perms = (Descriptor.READABLE | Descriptor.WRITEABLE | Descriptor.READ_REQUIRES_ENCRYPTION
                 | Descriptor.WRITE_REQUIRES_ENCRYPTION)
        characteristic.descriptors = list(characteristic.descriptors) + [
            Descriptor(CCCD, perms, self.device.gatt_server.make_descriptor_value(characteristic))]

    def build_gatt(self):
        enc_read = Characteristic.READ_REQUIRES_ENCRYPTION
        enc_write = Characteristic.WRITE_REQUIRES_ENCRYPTION
        self.measurement = Characteristic("2A18", Characteristic.Properties.NOTIFY, enc_read, b"")
        self._cccd(self.measurement)
        chars = [self.measurement]
        if self.m.context_characteristic:
            self.context = Characteristic("2A34", Characteristic.Properties.NOTIFY, enc_read, b"")
            self._cccd(self.context)
            chars.append(self.context)
        chars.append(Characteristic("2A51", Characteristic.Properties.READ, Characteristic.READABLE | enc_read,
                                    self.m.features.to_bytes(2, "little")))
        self.racp = Characteristic(
            "2A52", Characteristic.Properties.WRITE | Characteristic.Properties.INDICATE,
            Characteristic.WRITEABLE | enc_write, CharacteristicValue(write=self.on_racp_write))
        self._cccd(self.racp)
        chars.append(self.racp)
        services = []
        if self.m.clock_kind == "gls-date-time":
            props = Characteristic.Properties.READ | (Characteristic.Properties.WRITE if self.m.clock_writable else 0)
            chars.append(Characteristic("2A08", props, Characteristic.READABLE | Characteristic.WRITEABLE | enc_read | enc_write,
                                        CharacteristicValue(read=lambda c: self.clock_now()[:7],
                                                            write=self.on_clock_write)))
        services.append(Service("1808", chars))
        info = []
        for uuid, key in (("2A29", "manufacturer"), ("2A24", "model"), ("2A25", "serial"),
                          ("2A26", "firmware"), ("2A28", "software")):
            if key in self.m.info:
                info.append(Characteristic(uuid, Characteristic.Properties.READ, Characteristic.READABLE,
                                           self.m.info[key].encode()))
        services.append(Service("180A", info))
        if self.m.clock_kind == "cts":
            props = Characteristic.Properties.READ | Characteristic.Properties.NOTIFY
            if self.m.clock_writable:
                props |= Characteristic.Properties.WRITE
            services.append(Service("1805", [Characteristic(
                "2A2B", props, Characteristic.READABLE | Characteristic.WRITEABLE | enc_write,
                CharacteristicValue(read=lambda c: self.clock_now(), write=self.on_clock_write))]))
        self.device.add_services(services)

    # --- clock -----------------------------------------------------------------------------------------

    def local_now(self):
        return (datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
                + datetime.timedelta(minutes=self.m.clock_utc_offset, seconds=self.clock_skew))

    def clock_now(self):
        t = self.local_now()
        return (bytes([t.year & 0xFF, t.year >> 8, t.month, t.day, t.hour, t.minute, t.second])
                + bytes([t.isoweekday(), 0, 0]))

    def on_clock_write(self, connection, value):
        if len(value) < 7:
            raise ATT_Error(ErrorCode.INVALID_ATTRIBUTE_LENGTH)
        try:
            t = datetime.datetime(value[0] | value[1] << 8, value[2], value[3], value[4], value[5], value[6])
        except ValueError:
            raise ATT_Error(ErrorCode.OUT_OF_RANGE)
        true_local = self.local_now() - datetime.timedelta(seconds=self.clock_skew)
        self.clock_skew = (t - true_local).total_seconds()
        self.event(f"clock set to {t.isoformat()}")

    # --- RACP ------------------------------------------------------------------------------------------

    def subscribed(self, characteristic, indicate=False):
        subs = self.device.gatt_server.subscribers
        for bearer_subs in subs.values():
            v = bearer_subs.get(characteristic.handle)
            if v and v[0] & (0x02 if indicate else 0x01):
                return True
        return False

    def on_racp_write(self, connection, value):
        self.event(f"racp {bytes(value).hex()}")
        if not self.subscribed(self.racp, indicate=True):
            raise ATT_Error(ErrorCode.CCCD_IMPROPERLY_CONFIGURED)
        if self.busy and (len(value) == 0 or value[0] != RACP_ABORT):
            raise ATT_Error(ErrorCode.PROCEDURE_ALREADY_IN_PROGRESS)
        self.busy = True
        connection.cancel_on_disconnection(self.procedure(connection, bytes(value)))

    def select(self, value):
        """The records an RACP operator and operand select, or an error response code."""
        if len(value) < 2:
            return INVALID_OPERATOR
        operator = value[1]
        records = sorted(self.m.records, key=lambda r: r[0])
        if operator == 1:
            return records if len(value) == 2 else INVALID_OPERAND
        if operator in (5, 6):
            if len(value) != 2:
                return INVALID_OPERAND
            if not records:
                return []
            by_time = sorted(records, key=lambda r: r[1])
            return [by_time[0]] if operator == 5 else [by_time[-1]]
        if operator not in (2, 3, 4):
            return OPERATOR_NOT_SUPPORTED if operator <= 6 else INVALID_OPERATOR
        if len(value) < 3:
            return INVALID_OPERAND
        kind = value[2]
        operand = value[3:]
        if kind == 1:
            size = 4 if operator == 4 else 2
            if len(operand) != size:
                return INVALID_OPERAND
            lo = int.from_bytes(operand[:2], "little")
            hi = int.from_bytes(operand[2:4], "little") if operator == 4 else None
            key = lambda r: r[0]  # noqa: E731
        elif kind == 2 and self.m.time_filter:
            size = 14 if operator == 4 else 7
            if len(operand) != size:
                return INVALID_OPERAND
            try:
                lo = datetime.datetime(operand[0] | operand[1] << 8, *operand[2:7])
                hi = datetime.datetime(operand[7] | operand[8] << 8, *operand[9:14]) if operator == 4 else None
            except ValueError:
                return INVALID_OPERAND
            key = lambda r: r[1]  # noqa: E731
        else:
            return OPERAND_NOT_SUPPORTED
        if operator == 2:
            return [r for r in records if key(r) <= lo]
        if operator == 3:
            return [r for r in records if key(r) >= lo]
        return [r for r in records if lo <= key(r) <= hi]

    async def send(self, connection, characteristic, value):
        if self.m.notification_delay:
            await asyncio.sleep(self.m.notification_delay)
        await self.device.notify_subscriber(connection, characteristic, value)

    async def respond(self, connection, value):
        if self.m.notification_delay:
            await asyncio.sleep(self.m.notification_delay)
        self.event(f"racp response {value.hex()}")
        await self.device.indicate_subscriber(connection, self.racp, value)
        if self.o.disconnect_after_racp and value[0] == RACP_RESPONSE and value[2] == RACP_REPORT:
            self.event("disconnecting right after the RACP response")
            await connection.disconnect()

    async def procedure(self, connection, value):
        try:
            await asyncio.sleep(0.02)
            opcode = value[0] if value else 0
            if opcode == RACP_ABORT:
                await self.respond(connection, bytes([RACP_RESPONSE, 0, opcode, SUCCESS]))
                return
            if opcode not in (RACP_REPORT, RACP_COUNT):
                await self.respond(connection, bytes([RACP_RESPONSE, 0, opcode, OPCODE_NOT_SUPPORTED]))
                return
            if self.o.racp_error is not None and opcode == RACP_REPORT:
                await self.respond(connection, bytes([RACP_RESPONSE, 0, opcode, self.o.racp_error]))
                return
            selected = self.select(value)
            if isinstance(selected, int):
                await self.respond(connection, bytes([RACP_RESPONSE, 0, opcode, selected]))
                return
            if opcode == RACP_COUNT:
                if not selected and self.m.zero_count_as_no_records:
                    await self.respond(connection, bytes([RACP_RESPONSE, 0, opcode, NO_RECORDS]))
                else:
                    await self.respond(connection, bytes([RACP_COUNT_RESPONSE, 0]) + len(selected).to_bytes(2, "little"))
                return
            if not selected:
                await self.respond(connection, bytes([RACP_RESPONSE, 0, opcode, NO_RECORDS]))
                return
            if not (self.subscribed(self.measurement)):
                raise ATT_Error(ErrorCode.CCCD_IMPROPERLY_CONFIGURED)
            if self.m.newest_first:
                selected = list(reversed(selected))
            sent = 0
            for seq, _, measurement, context in selected:
                if self.m.drop_link_after is not None and sent == self.m.drop_link_after and (
                        self.m.drop_link_times is None or self.drops < self.m.drop_link_times):
                    self.drops += 1
                    self.event(f"dropping the link after {sent} measurements")
                    # A radio delivers the PDUs already queued before LL_TERMINATE_IND, a connection event
                    # or more later; the emulator has no radio timing and would hand the kernel the data
                    # and the disconnection at once (bluetoothd then handles the hang-up before the data).
                    await asyncio.sleep(0.1)
                    await connection.disconnect(hci.HCI_ErrorCode.REMOTE_USER_TERMINATED_CONNECTION_ERROR)
                    return
                if self.m.fail_procedure_after is not None and sent == self.m.fail_procedure_after:
                    await self.respond(connection, bytes([RACP_RESPONSE, 0, opcode, PROCEDURE_NOT_COMPLETED]))
                    return
                ctx = context if self.m.context_characteristic else None
                if ctx is not None and self.m.context_before:
                    await self.send(connection, self.context, ctx)
                await self.send(connection, self.measurement, measurement)
                if ctx is not None and not self.m.context_before:
                    await self.send(connection, self.context, ctx)
                sent += 1
            self.event(f"sent {sent} records")
            await self.respond(connection, bytes([RACP_RESPONSE, 0, opcode, SUCCESS]))
        finally:
            self.busy = False

    # --- advertising, connections, control ---------------------------------------------------------------

    def advertising_data(self):
        return bytes(AdvertisingData([
            (AdvertisingData.FLAGS, bytes([0x06])),
            (AdvertisingData.COMPLETE_LIST_OF_16_BIT_SERVICE_CLASS_UUIDS, bytes([0x08, 0x18])),
            (AdvertisingData.COMPLETE_LOCAL_NAME, self.m.name.encode()[:20]),
        ]))

    async def advertise(self, on):
        if self.connection is not None:
            return
        try:
            if on and not self.device.is_advertising:
                own = hci.OwnAddressType.PUBLIC if self.m.address_type == "public" else hci.OwnAddressType.RANDOM
                await self.device.start_advertising(own_address_type=own, advertising_data=self.advertising_data(),
                                                    advertising_interval_min=500, advertising_interval_max=500)
                self.event("advertising")
            elif not on and self.device.is_advertising:
                await self.device.stop_advertising()
                self.event("advertising stopped")
        except Exception as e:  # a command the emulator refuses must not end the meter
            self.event(f"advertising change failed: {e}")

    async def bursts(self):
        while self.m.advertising[0] == "bursts":
            _, on, off = self.m.advertising
            if self.advertise_wanted:
                await self.advertise(True)
            await asyncio.sleep(on)
            if self.m.advertising[0] != "bursts":
                break
            await self.advertise(False)
            await asyncio.sleep(off)

    def on_connection(self, connection):
        self.connection = connection
        self.event(f"connected {connection.peer_address}")
        connection.on("disconnection", self.on_disconnection)
        connection.on("pairing", lambda keys: self.event(f"paired {self.o.pairing}"))
        connection.on("pairing_failure", lambda reason: self.on_pairing_failure(connection, reason))
        connection.on("connection_encryption_change", lambda: self.event(f"encrypted {connection.encryption}"))
        connection.on("connection_encryption_failure", lambda e: self.event(f"encryption failed {e!r}"))
        connection.on("connection_att_mtu_update", lambda: self.event(f"att mtu {connection.att_mtu}"))
        if self.o.security_request:
            self.event("security request")
            self.device.request_pairing(connection)

    def on_pairing_failure(self, connection, reason):
        """A failed pairing ends the link, as many meters do. (Bumble 0.0.236 would not complete a second
        pairing on the same link: encrypted, but its session never ends, and the central waits.)"""
        self.event(f"pairing failed {reason!r}")

        async def drop():
            await asyncio.sleep(0.2)
            if self.connection is connection:
                await connection.disconnect()
        spawn(drop())

    def on_disconnection(self, reason):
        self.event(f"disconnected 0x{int(reason):02x}")
        self.connection = None
        self.busy = False
        if self.m.advertising[0] == "always" and self.advertise_wanted:
            spawn(self.advertise(True))

    async def command(self, line):
        if line == "forget":
            for name, _ in await self.device.keystore.get_all():
                await self.device.keystore.delete(name)
            self.event("bonds forgotten")
        elif line in ("advertise on", "advertise off"):
            self.advertise_wanted = line.endswith("on")
            await self.advertise(self.advertise_wanted)
        elif line == "advertise always":
            # Back to advertising all the time (the bursts loop ends at its next turn).
            self.m.advertising = ("always", 0.0, 0.0)
            self.advertise_wanted = True
            await self.advertise(True)
        elif line.startswith("bursts "):
            # Advertising in bursts from now on (a meter that wakes now and then), ON and OFF seconds.
            on, off = (float(x) for x in line.split()[1:3])
            first = self.m.advertising[0] != "bursts"
            self.m.advertising = ("bursts", on, off)
            self.advertise_wanted = True
            if first:
                spawn(self.bursts())
            self.event(f"advertising in bursts: {on:g} s on, {off:g} s off")
        elif line == "disconnect" and self.connection is not None:
            await self.connection.disconnect()
        elif line.startswith("load "):
            # Time passing between syncs: the readings taken since, and the clock as the user left it (set
            # forward or back, or untouched). The meter keeps its bonds, as a real one does, and its GATT
            # database: the clock's kind and everything but the records and the clock's time stay as started.
            try:
                new = meter_file.load(line[5:])
            except meter_file.MeterFileError as e:
                self.event(f"load failed: {e}")
                return
            if new.address != self.m.address:
                return
            self.m.records = new.records
            self.m.clock_utc_offset = new.clock_utc_offset
            self.clock_skew = new.clock_skew
            self.event(f"loaded {len(new.records)} records, clock UTC{new.clock_utc_offset:+d} min"
                       f"{new.clock_skew:+g} s")
        elif line:
            self.event(f"unknown command {line}")

    async def start(self, link):
        """This meter's own controller on the link, its host, GATT database and advertising."""
        own = hci.Address(self.m.address, hci.Address.PUBLIC_DEVICE_ADDRESS
                          if self.m.address_type == "public" else hci.Address.RANDOM_DEVICE_ADDRESS)
        controller = Controller(self.m.address, link=link,
                                public_address=self.m.address if self.m.address_type == "public" else None)
        legacy_features(controller)
        # A meter with a public address still has a (static random) one of its own, never used here.
        unused = hci.Address("F0" + self.m.address[2:], hci.Address.RANDOM_DEVICE_ADDRESS)
        self.device = MeterDevice.with_hci(self.m.name, own if self.m.address_type == "random" else unused,
                                           controller, controller)
        self.device.keystore = MemoryKeyStore()
        method, fault = self.o.pairing, self.o.pairing_fault
        delegate = Delegate(self, method, fault)
        self.device.pairing_config_factory = lambda connection: PairingConfig(
            sc=method != "legacy-passkey", mitm=method != "just-works", bonding=self.m.bonding, delegate=delegate)
        if fault == "silent":
            self.device.smp_session_proxy = SilentSession
        elif fault == "cancel" and method in ("sc-passkey", "legacy-passkey"):
            self.device.smp_session_proxy = CancellingSession
        self.device.on("connection", self.on_connection)
        # A small embedded stack: the ATT MTU stays at LE's minimum, 23.
        self.device.gatt_server.max_mtu = 23
        self.build_gatt()
        await self.device.power_on()
        self.event(f"ready {method}{' security-request' if self.o.security_request else ''}"
                   f"{' fault=' + fault if fault else ''}")
        if self.m.advertising[0] == "bursts":
            spawn(self.bursts())
        elif self.advertise_wanted:
            await self.advertise(True)


async def gateway_controller(args, link):
    """The kernel's controller: hci0 through /dev/vhci."""
    transport = await open_transport("vhci")
    gateway_address = None if args.gateway_address == "none" else args.gateway_address
    gateway = Controller("gateway", host_source=transport.source, host_sink=transport.sink, link=link,
                         public_address=gateway_address)
    legacy_features(gateway)
    return gateway


async def control(path, meters):
    """Commands, one a line, for every meter: forget (every bond), advertise on|off|always, bursts ON OFF,
    disconnect, load FILE."""
    loop = asyncio.get_running_loop()
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", 0))
    while True:
        line = (await reader.readline()).decode().strip()
        for meter in meters:
            await meter.command(line)


async def serve(args, meters, make_gateway=gateway_controller):
    link = ConnectionAddressLink()
    gateway = await make_gateway(args, link)
    for meter in meters:
        await meter.start(link)
    if args.control:
        spawn(control(args.control, meters))
    event(f"all {len(meters)} meter(s) ready")
    await asyncio.get_running_loop().create_future()
    return gateway


METHODS = ["sc-passkey", "legacy-passkey", "just-works", "numeric-comparison"]


def meter_options(spec, defaults, m):
    """FILE[,pairing=METHOD][,fault=cancel|silent][,security-request][,racp-error=CODE]
    [,disconnect-after-racp][,address=ADDRESS][,name=NAME]: one meter and how it behaves. The options
    given here win over the file's "pairing", which wins over the command line's defaults."""
    parts = spec.split(",")
    o = argparse.Namespace(**vars(defaults))
    o.file, o.address, o.name = parts[0], None, None
    if m.pairing is not None:
        o.pairing, o.security_request, o.pairing_fault = m.pairing
    for part in parts[1:]:
        key, _, value = part.partition("=")
        if key == "pairing" and value in METHODS:
            o.pairing = value
        elif key == "fault" and value in ("cancel", "silent"):
            o.pairing_fault = value
        elif key == "security-request" and not value:
            o.security_request = True
        elif key == "racp-error" and value:
            o.racp_error = int(value, 0)
        elif key == "disconnect-after-racp" and not value:
            o.disconnect_after_racp = True
        elif key in ("address", "name") and value:
            setattr(o, key, value)
        else:
            raise meter_file.MeterFileError(f"--meter {spec}: cannot use '{part}'")
    return o


def arguments(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--meter", required=True, action="append",
                   help="meter file (the simulator's format), with options: see meter_options (repeatable)")
    p.add_argument("--pairing", default="sc-passkey", choices=METHODS)
    p.add_argument("--security-request", action="store_true", help="send an SMP Security Request on connection")
    p.add_argument("--pairing-fault", choices=["cancel", "silent"])
    p.add_argument("--racp-error", type=lambda s: int(s, 0), help="answer every report request with this code")
    p.add_argument("--disconnect-after-racp", action="store_true", help="drop the link right after a report's response")
    p.add_argument("--gateway-address", default="00:AA:01:00:00:00",
                   help='the public address of the kernel\'s controller ("none": no public address)')
    p.add_argument("--control", help="a FIFO of commands (forget, advertise on|off|always, bursts ON OFF, disconnect, load FILE)")
    p.add_argument("--debug", action="store_true")
    return p.parse_args(argv)


def load_meters(args):
    meters = []
    for spec in args.meter:
        m = meter_file.load(spec.split(",")[0])
        o = meter_options(spec, args, m)
        if o.address:
            m.address = o.address.upper()
        if o.name:
            m.name = o.name
        meters.append(Meter(o, m))
    return meters


def main():
    a = arguments()
    logging.basicConfig(level=logging.DEBUG if a.debug else logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        meters = load_meters(a)
    except meter_file.MeterFileError as e:
        sys.exit(f"meter.py: {e}")
    asyncio.run(serve(a, meters))


if __name__ == "__main__":
    main()
