#!/usr/bin/python3
"""Meter-side helpers next to `glucose-gateway-simulator --bluez`, on the meter VM's bluetoothd.

  meter_aid.py [--pin NNNNNN] [--rotate [--name NAME]] [--adapter hciN]

  --pin     registers a KeyboardOnly agent as bluetoothd's default agent that answers RequestPasskey with
            the meter's PIN: SMP then runs passkey entry with both sides typing the same six digits, which
            the gateway cannot tell from a meter displaying them. Every request is printed.
  --rotate  registers a second, small advertisement on the adapter. btvirt sends advertising reports only
            when advertising is (re)enabled or scanning starts, and the kernel drops reports that arrive
            before its discovery is set up; with two legacy advertisements the kernel rotates them every
            ~2 s, and each switch gives the scanner fresh reports (a property of the emulated controller,
            not of real radios). --name: the advertisement's local name (default "meter-r"); the meter's
            own name makes every advertisement the gateway sees carry it, as a real meter's do (the
            gateway's handling of a Fora TN'G goes by the name).
Runs until SIGTERM.
"""
import argparse
import signal
import sys
import time

import dbus
import dbus.mainloop.glib
import dbus.service
from gi.repository import GLib

T0 = time.monotonic()


def say(*args):
    print(f"[{time.monotonic() - T0:6.2f}] meter_aid:", *args, flush=True)


class Agent(dbus.service.Object):
    def __init__(self, bus, path, pin):
        super().__init__(bus, path)
        self.pin = pin

    @dbus.service.method("org.bluez.Agent1", in_signature="o", out_signature="u")
    def RequestPasskey(self, device):
        say(f"request passkey for {device} -> {self.pin:06d}")
        return dbus.UInt32(self.pin)

    @dbus.service.method("org.bluez.Agent1", in_signature="ouq", out_signature="")
    def DisplayPasskey(self, device, passkey, entered):
        say(f"display passkey {passkey:06d} for {device}")

    @dbus.service.method("org.bluez.Agent1", in_signature="ou", out_signature="")
    def RequestConfirmation(self, device, passkey):
        say(f"confirmation {passkey:06d} for {device}: accepted")

    @dbus.service.method("org.bluez.Agent1", in_signature="o", out_signature="")
    def RequestAuthorization(self, device):
        say(f"authorization for {device}: accepted")

    @dbus.service.method("org.bluez.Agent1", in_signature="os", out_signature="")
    def AuthorizeService(self, device, uuid):
        pass

    @dbus.service.method("org.bluez.Agent1", in_signature="", out_signature="")
    def Cancel(self):
        say("pairing cancelled")

    @dbus.service.method("org.bluez.Agent1", in_signature="", out_signature="")
    def Release(self):
        say("agent released")


class Advertisement(dbus.service.Object):
    def __init__(self, bus, path, name):
        super().__init__(bus, path)
        self.path = path
        self.name = name

    @dbus.service.method("org.freedesktop.DBus.Properties", in_signature="ss", out_signature="v")
    def Get(self, interface, name):
        return self.GetAll(interface)[name]

    @dbus.service.method("org.freedesktop.DBus.Properties", in_signature="s", out_signature="a{sv}")
    def GetAll(self, interface):
        return {"Type": dbus.String("peripheral"),
                "ServiceUUIDs": dbus.Array(["1808"], signature="s"),
                "LocalName": dbus.String(self.name)}

    @dbus.service.method("org.bluez.LEAdvertisement1", in_signature="", out_signature="")
    def Release(self):
        say("rotation advertisement released")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--pin", type=int)
    parser.add_argument("--rotate", action="store_true")
    parser.add_argument("--name", default="meter-r")
    parser.add_argument("--adapter", default="hci0")
    args = parser.parse_args()
    dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
    bus = dbus.SystemBus()
    loop = GLib.MainLoop()
    signal.signal(signal.SIGTERM, lambda *_: loop.quit())
    keep = []
    if args.pin is not None:
        agent = Agent(bus, "/rb/keypad", args.pin)
        keep.append(agent)
        manager = dbus.Interface(bus.get_object("org.bluez", "/org/bluez"), "org.bluez.AgentManager1")
        manager.RegisterAgent("/rb/keypad", "KeyboardOnly")
        manager.RequestDefaultAgent("/rb/keypad")
        say(f"KeyboardOnly default agent answering {args.pin:06d}")
    if args.rotate:
        adv = Advertisement(bus, "/rb/rotation", args.name)
        keep.append(adv)
        manager = dbus.Interface(bus.get_object("org.bluez", f"/org/bluez/{args.adapter}"),
                                 "org.bluez.LEAdvertisingManager1")
        # Asynchronous: bluetoothd reads the advertisement's properties from this process meanwhile.
        manager.RegisterAdvertisement(adv.path, {}, reply_handler=lambda: say("rotation advertisement on"),
                                      error_handler=lambda e: say(f"rotation advertisement failed: {e}"))
    print("ready", flush=True)
    loop.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
