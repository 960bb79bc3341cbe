#!/usr/bin/python3
"""Joins two VMs' Bluetooth controllers into one btvirt "air" over a virtio-serial port.

  hci_bridge.py air PORT SOCKET   (the VM running `btvirt -s`) copies the H4 byte stream between PORT and
                                  btvirt's server socket; btvirt makes the far end one of its controllers.
  hci_bridge.py vhci PORT         (the other VM) creates a controller through /dev/vhci and passes whole
                                  H4 packets between it and PORT.
                                  SIGUSR1 removes the controller (closes /dev/vhci: the kernel unregisters
                                  hciN, as when a USB dongle is pulled), SIGUSR2 adds it again with the
                                  same address (the btvirt device on the far side lives on).

virtio-serial is lossless and flow-controlled by its virtqueues, unlike an emulated UART without RTS/CTS.
"""
import errno
import os
import select
import signal
import socket
import sys
import time


def log(*args):
    print(f"[{time.monotonic():9.3f}] hci_bridge:", *args, file=sys.stderr, flush=True)


def packet_length(buf):
    """Length of the first complete H4 packet in buf, or 0 when more bytes are needed."""
    if not buf:
        return 0
    kind = buf[0]
    if kind == 0x04:  # event: code, length
        header, size = 3, (buf[2] if len(buf) >= 3 else None)
    elif kind in (0x01, 0x03):  # command (opcode x2, length), SCO (handle x2, length)
        header, size = 4, (buf[3] if len(buf) >= 4 else None)
    elif kind == 0x02:  # ACL: handle x2, length x2
        header, size = 5, (buf[3] | buf[4] << 8 if len(buf) >= 5 else None)
    elif kind == 0x05:  # ISO
        header, size = 5, ((buf[3] | buf[4] << 8) & 0x3FFF if len(buf) >= 5 else None)
    else:
        raise ValueError(f"unknown H4 packet type 0x{kind:02x}")
    if size is None or len(buf) < header + size:
        return 0
    return header + size


class Port:
    """The virtio-serial port: reads return 0 while the host side is not connected yet."""

    def __init__(self, path):
        self.fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)

    def write_all(self, data):
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.fd, view)
                view = view[n:]
            except BlockingIOError:
                select.select([], [self.fd], [], 0.5)
            except OSError as e:
                if e.errno in (errno.EPIPE, errno.ENOTCONN):
                    time.sleep(0.05)  # the other VM is not connected yet
                else:
                    raise


def run_air(port_path, sock_path):
    port = Port(port_path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(sock_path)
    log("air: joined", port_path, "to", sock_path)
    while True:
        r, _, _ = select.select([port.fd, sock], [], [], 1.0)
        if sock in r:
            data = sock.recv(65536)
            if not data:
                log("btvirt closed the socket")
                return 1
            port.write_all(data)
        if port.fd in r:
            try:
                data = os.read(port.fd, 65536)
            except BlockingIOError:
                data = None
            if data:
                sock.sendall(data)
            elif data == b"":
                time.sleep(0.05)


def run_vhci(port_path):
    port = Port(port_path)
    state = {"want": True, "vhci": None}

    def open_vhci():
        fd = os.open("/dev/vhci", os.O_RDWR)
        os.write(fd, bytes([0xFF, 0x00]))  # vendor packet: create a primary controller
        reply = os.read(fd, 16)
        index = reply[2] | reply[3] << 8 if len(reply) >= 4 else -1
        log(f"controller added: hci{index}")
        return fd

    def on_usr1(*_):
        state["want"] = False

    def on_usr2(*_):
        state["want"] = True

    signal.signal(signal.SIGUSR1, on_usr1)
    signal.signal(signal.SIGUSR2, on_usr2)
    buf = b""
    while True:
        if state["want"] and state["vhci"] is None:
            state["vhci"] = open_vhci()
        elif not state["want"] and state["vhci"] is not None:
            os.close(state["vhci"])
            state["vhci"] = None
            log("controller removed")
        fds = [port.fd] + ([state["vhci"]] if state["vhci"] is not None else [])
        try:
            r, _, _ = select.select(fds, [], [], 0.5)
        except InterruptedError:
            continue
        vhci = state["vhci"]
        if vhci is not None and vhci in r:
            try:
                packet = os.read(vhci, 65536)
            except OSError as e:
                log("vhci read:", e)
                packet = b""
            if packet:
                port.write_all(packet)
        if port.fd in r:
            try:
                data = os.read(port.fd, 65536)
            except BlockingIOError:
                data = None
            if data == b"":
                time.sleep(0.05)
            elif data:
                buf += data
                while True:
                    n = packet_length(buf)
                    if not n:
                        break
                    packet, buf = buf[:n], buf[n:]
                    # While removed, the controller's answers are dropped, as on a pulled dongle; a
                    # late answer to a controller whose set-up the kernel gave up on is refused (ENXIO).
                    if state["vhci"] is not None:
                        try:
                            os.write(state["vhci"], packet)
                        except OSError as e:
                            log(f"vhci refused a packet (type 0x{packet[0]:02x}): {e}")


def main(argv):
    if len(argv) == 4 and argv[1] == "air":
        return run_air(argv[2], argv[3])
    if len(argv) == 3 and argv[1] == "vhci":
        return run_vhci(argv[2])
    print(__doc__, file=sys.stderr)
    return 64


if __name__ == "__main__":
    sys.exit(main(sys.argv))
