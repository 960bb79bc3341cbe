#!/usr/bin/python3
"""Prints bluetoothd's object tree as the gateway sees it: for each object under /org/bluez, its
interfaces with their property names (sorted), and the methods and signals its introspection lists for
the Device1 and Bearer interfaces. One line each, so two BlueZ versions can be compared with diff."""
import re
import sys
import xml.etree.ElementTree as ET

import dbus

bus = dbus.SystemBus()
objects = dbus.Interface(bus.get_object("org.bluez", "/"), "org.freedesktop.DBus.ObjectManager").GetManagedObjects()
for path in sorted(objects):
    # Handles and addresses differ between runs: the shape of the path is what is compared.
    shape = re.sub(r"dev(_[0-9A-F]{2}){6}", "dev_ADDR", str(path))
    shape = re.sub(r"(service|char|desc)[0-9a-f]{4}", r"\1XXXX", shape)
    for iface, props in sorted(objects[path].items()):
        print(f"{shape} {iface} props={','.join(sorted(str(k) for k in props))}")
        if iface.startswith(("org.bluez.Device", "org.bluez.Bearer", "org.bluez.Adapter")):
            xml = dbus.Interface(bus.get_object("org.bluez", path), "org.freedesktop.DBus.Introspectable").Introspect()
            for node in ET.fromstring(str(xml)).findall("interface"):
                if node.get("name") == iface:
                    methods = sorted(m.get("name") for m in node.findall("method"))
                    signals = sorted(s.get("name") for s in node.findall("signal"))
                    print(f"{shape} {iface} methods={','.join(methods)} signals={','.join(signals)}")
sys.stdout.flush()
