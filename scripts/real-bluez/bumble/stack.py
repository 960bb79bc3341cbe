"""What the Bumble meter changes in Bumble 0.0.236 (its emulator's link and controllers, one fix of its
host as a peripheral) and how the meter pairs (SMP I/O capabilities and the faults of a meter's user).

Pinned: these reach into the emulator's internals.
"""
import asyncio

from bumble import hci, smp
from bumble.core import PhysicalTransport
from bumble.device import Device
from bumble.link import LocalLink
from bumble.pairing import PairingDelegate


def event(text):
    print(text, flush=True)


class ConnectionAddressLink(LocalLink):
    """Tags LE data with the sender's address on that connection, not its current random address.

    Linux sets a new random address for each active scan, also while it is connected (a daemon that scans
    while it downloads); Bumble's link would then tag the data with the new address and the meter's
    controller, which knows the connection by the old one, would drop it all."""

    def send_acl_data(self, sender_controller, destination_address, transport, data):
        if transport != PhysicalTransport.LE:
            return super().send_acl_data(sender_controller, destination_address, transport, data)
        connection = sender_controller.le_connections.get(destination_address)
        source = connection.self_address if connection else sender_controller.random_address
        destination = self.find_le_controller(destination_address)
        if destination is not None:
            asyncio.get_running_loop().call_soon(destination.on_link_acl_data, source, transport, data)


def legacy_features(controller):
    """Without these bits Linux 6.1 uses legacy scanning and connections: it would otherwise wait for an LE
    Enhanced Connection Complete event, which Bumble's emulator never sends."""
    controller.le_features = controller.le_features & ~(
        hci.LeFeatureMask.LL_PRIVACY | hci.LeFeatureMask.LE_EXTENDED_ADVERTISING
        | hci.LeFeatureMask.LE_PERIODIC_ADVERTISING)


class MeterDevice(Device):
    """Answers the key request of a reconnecting central with the key this meter distributed itself.

    After legacy pairing Bumble 0.0.236 as a peripheral answers with `ltk_peripheral`, which for a
    responder is the key the central distributed: every reconnection then ends with a MIC failure (0x3D).
    A peripheral's LTK is the one it sent in Encryption Information (`ltk_central` in Bumble's naming for
    a responder), matched by the EDIV and Rand it sent with it."""

    async def get_long_term_key(self, connection_handle, rand, ediv):
        connection = self.lookup_connection(connection_handle)
        if connection is None:
            return None
        ltk = self.smp_manager.get_long_term_key(connection, rand, ediv)
        if ltk is not None:
            return ltk
        keys = await self.keystore.get(str(connection.peer_address)) if self.keystore else None
        if keys is None:
            event(f"no key for {connection.peer_address}")
            return None
        if keys.ltk:
            return keys.ltk.value
        own = keys.ltk_central
        if connection.role == hci.Role.PERIPHERAL and own is not None:
            if (own.ediv or 0) == ediv and (own.rand or bytes(8)) == rand:
                return own.value
            event(f"key request with an unknown EDIV/Rand from {connection.peer_address}")
        return None


class Delegate(PairingDelegate):
    def __init__(self, meter, method, fault):
        io = {
            "sc-passkey": PairingDelegate.DISPLAY_OUTPUT_ONLY,
            "legacy-passkey": PairingDelegate.DISPLAY_OUTPUT_ONLY,
            "just-works": PairingDelegate.NO_OUTPUT_NO_INPUT,
            "numeric-comparison": PairingDelegate.DISPLAY_OUTPUT_AND_YES_NO_INPUT,
        }[method]
        super().__init__(io_capability=io)
        self.meter = meter
        self.fault = fault

    async def accept(self):
        self.meter.event("pairing requested")
        return True

    async def generate_passkey(self):
        # A meter shows its own PIN (the meter file's), as the simulator does.
        self.meter.event(f"display passkey {self.meter.m.pin:06d}")
        return self.meter.m.pin

    async def compare_numbers(self, number, digits):
        self.meter.event(f"compare {number:0{digits}d}")
        if self.fault == "cancel":
            self.meter.event("the user cancels on the meter")
            return False
        return True

    async def confirm(self, auto=False):
        self.meter.event("confirm just works")
        return self.fault != "cancel"


class CancellingSession(smp.Session):
    """The user cancels on the meter while its passkey is shown: Pairing Failed, Passkey Entry Failed."""

    async def display_passkey(self):
        event(f"{self.connection.self_address.to_string(False)} the user cancels on the meter")
        self.send_pairing_failed(smp.ErrorCode.PASSKEY_ENTRY_FAILED)


class SilentSession(smp.Session):
    """A meter that never answers a Pairing Request (the central's SMP times out after 30 s)."""

    def on_smp_pairing_request_command(self, command):
        event(f"{self.connection.self_address.to_string(False)} pairing request ignored")
