#!/usr/bin/python3
"""snoop_summary.py FILE [--all]: a one-line-per-frame summary of a `btmon -w` trace (btsnoop, monitor
format): HCI commands and events with their opcodes and status, mgmt commands and events of each
client socket, and the log lines bluetoothd sends to the monitor. ACL data is left out unless --all.
(btmon -r of BlueZ 5.66 crashes on some of these traces.)"""
import struct
import sys

HCI = {0x0406: "Disconnect", 0x0c03: "Reset", 0x200b: "LE Set Scan Parameters", 0x200c: "LE Set Scan Enable",
       0x2005: "LE Set Random Address", 0x200a: "LE Set Advertise Enable", 0x200d: "LE Create Connection",
       0x200e: "LE Create Connection Cancel", 0x2019: "LE Start Encryption", 0x201a: "LE LTK Reply",
       0x2016: "LE Read Remote Features", 0x2013: "LE Connection Update", 0x2027: "LE Add Device To Resolving List",
       0x2029: "LE Clear Resolving List", 0x202d: "LE Set Address Resolution Enable", 0x2011: "LE Add To Accept List",
       0x2010: "LE Clear Accept List", 0x2012: "LE Remove From Accept List", 0x2041: "LE Set Ext Scan Params",
       0x2042: "LE Set Ext Scan Enable", 0x0c01: "Set Event Mask", 0x2001: "LE Set Event Mask"}
MGMT = {0x0005: "Set Powered", 0x0023: "Start Discovery", 0x0024: "Stop Discovery", 0x003a: "Start Service Discovery", 0x002f: "Set Privacy", 0x0019: "Pair Device",
        0x001b: "Unpair Device", 0x0033: "Add Device", 0x0034: "Remove Device",
        0x0004: "Read Info", 0x0013: "Load Long Term Keys",
        0x0030: "Load IRKs", 0x0035: "Load Conn Params", 0x000e: "Disconnect", 0x0040: "Set External Config",
        0x004b: "Read Ext Index List", 0x0051: "Set Default System Config", 0x003b: "Read Ext Info"}
MGMT_EV = {0x0001: "Command Complete", 0x0002: "Command Status", 0x0006: "New Settings", 0x000b: "Device Connected",
           0x000c: "Device Disconnected", 0x000d: "Connect Failed", 0x0012: "Device Found", 0x0013: "Discovering",
           0x0011: "Auth Failed", 0x000a: "New Long Term Key", 0x0004: "Index Added", 0x0005: "Index Removed"}


def main(path, show_all):
    data = open(path, "rb").read()
    if data[:8] != b"btsnoop\0":
        sys.exit("not a btsnoop file")
    pos, t0, n = 16, None, 0
    while pos + 24 <= len(data):
        _orig, incl, flags, _drops, ts = struct.unpack(">IIIIq", data[pos:pos + 24])
        body = data[pos + 24:pos + 24 + incl]
        pos += 24 + incl
        n += 1
        t0 = ts if t0 is None else t0
        t = (ts - t0) / 1e6
        index, op = flags >> 16, flags & 0xFFFF
        line = None
        if op == 2 and len(body) >= 3:
            code = struct.unpack("<H", body[:2])[0]
            line = f"hci{index} < HCI Cmd 0x{code:04x} {HCI.get(code, '')} {body[3:].hex()}"
        elif op == 3 and len(body) >= 2:
            ev = body[0]
            if ev == 0x0E and len(body) >= 6:
                code = struct.unpack("<H", body[3:5])[0]
                line = f"hci{index} > Cmd Complete 0x{code:04x} {HCI.get(code, '')} status 0x{body[5]:02x}"
            elif ev == 0x0F and len(body) >= 6:
                code = struct.unpack("<H", body[4:6])[0]
                line = f"hci{index} > Cmd Status 0x{code:04x} {HCI.get(code, '')} status 0x{body[2]:02x}"
            elif ev == 0x3E:
                sub = body[2] if len(body) > 2 else -1
                if sub == 0x02 and not show_all:
                    line = f"hci{index} > LE Advertising Report"
                else:
                    line = f"hci{index} > LE Meta 0x{sub:02x} {body[3:].hex()}"
            elif ev == 0x13 and not show_all:
                line = None
            else:
                line = f"hci{index} > HCI Event 0x{ev:02x} {body[2:].hex()}"
        elif op in (4, 5):
            if show_all:
                line = f"hci{index} {'<' if op == 4 else '>'} ACL {body.hex()}"
        elif op == 0:
            line = f"hci{index} new index"
        elif op == 1:
            line = f"hci{index} deleted index"
        elif op in (8, 9):
            line = f"hci{index} {'open' if op == 8 else 'close'} index"
        elif op == 12:
            line = "note: " + body.rstrip(b"\0").decode(errors="replace")
        elif op == 13 and len(body) >= 2:
            ident_len = body[1]
            text = body[2 + ident_len:].rstrip(b"\0").decode(errors="replace")
            ident = body[2:2 + ident_len].rstrip(b"\0").decode(errors="replace")
            line = f"log: {ident}: {text.strip()}"
        elif op == 14 and len(body) >= 4:
            line = f"ctrl open cookie {struct.unpack('<I', body[:4])[0]} {body[4:].hex()}"
        elif op == 15 and len(body) >= 4:
            line = f"ctrl close cookie {struct.unpack('<I', body[:4])[0]}"
        elif op == 16 and len(body) >= 6:
            cookie, code = struct.unpack("<IH", body[:6])
            line = f"hci{index} mgmt[{cookie}] < {MGMT.get(code, hex(code))} {body[6:].hex()}"
        elif op == 17 and len(body) >= 6:
            cookie, code = struct.unpack("<IH", body[:6])
            extra = ""
            if code in (1, 2) and len(body) >= 9:
                cmd = struct.unpack("<H", body[6:8])[0]
                extra = f"{MGMT.get(cmd, hex(cmd))} status 0x{body[8]:02x} {body[9:].hex()}"
            elif code != 0x12 or show_all:
                extra = body[6:].hex()
            if code == 0x12 and not show_all:
                line = f"hci{index} mgmt[{cookie}] > Device Found"
            else:
                line = f"hci{index} mgmt[{cookie}] > {MGMT_EV.get(code, hex(code))} {extra}"
        if line:
            print(f"#{n:<5} {t:9.3f} {line}")


if __name__ == "__main__":
    main(sys.argv[1], "--all" in sys.argv[2:])
