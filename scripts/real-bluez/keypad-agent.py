#!/usr/bin/env python3
"""The meter side's pairing agent for a VM with one bluetoothd: KeyboardOnly, answers every passkey
request with a fixed PIN, and made the default agent, so the meter's PIN is known in advance (both sides
type it: SMP passkey entry) and the gateway pairs with `pair --pin PIN` as it does with a real meter.

Usage: keypad-agent.py PIN       prints "agent ready" once it is the default agent; stops on SIGTERM.
"""
import signal
import sys

import dbus
import dbus.service
from dbus.mainloop.glib import DBusGMainLoop
from gi.repository import GLib

PATH = "/org/glucosegateway/testbed/keypad"


class Agent(dbus.service.Object):
    def __init__(self, bus, pin):
        super().__init__(bus, PATH)
        self.pin = pin

    @dbus.service.method("org.bluez.Agent1", in_signature="o", out_signature="u")
    def RequestPasskey(self, device):
        print("passkey requested for %s" % device, flush=True)
        return dbus.UInt32(self.pin)

    @dbus.service.method("org.bluez.Agent1", in_signature="ouq", out_signature="")
    def DisplayPasskey(self, device, passkey, entered):
        pass

    @dbus.service.method("org.bluez.Agent1", in_signature="ou", out_signature="")
    def RequestConfirmation(self, device, passkey):
        pass

    @dbus.service.method("org.bluez.Agent1", in_signature="o", out_signature="")
    def RequestAuthorization(self, device):
        pass

    @dbus.service.method("org.bluez.Agent1", in_signature="os", out_signature="")
    def AuthorizeService(self, device, uuid):
        pass

    @dbus.service.method("org.bluez.Agent1", in_signature="", out_signature="")
    def Cancel(self):
        pass

    @dbus.service.method("org.bluez.Agent1", in_signature="", out_signature="")
    def Release(self):
        pass


def main():
    if len(sys.argv) != 2 or not sys.argv[1].isdigit() or len(sys.argv[1]) != 6:
        print("usage: keypad-agent.py PIN (six digits)", file=sys.stderr)
        return 64
    DBusGMainLoop(set_as_default=True)
    bus = dbus.SystemBus()
    Agent(bus, int(sys.argv[1]))
    manager = dbus.Interface(bus.get_object("org.bluez", "/org/bluez"), "org.bluez.AgentManager1")
    manager.RegisterAgent(PATH, "KeyboardOnly")
    manager.RequestDefaultAgent(PATH)
    print("agent ready", flush=True)
    loop = GLib.MainLoop()
    GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, signal.SIGTERM, loop.quit)
    loop.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
