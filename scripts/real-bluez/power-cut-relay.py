#!/usr/bin/env python3
"""TCP over one virtio-serial port, for a VM without a network: the power-cut scenario's Nightscout
double runs on the host (a server is another machine: it keeps its state when the gateway loses power),
the gateway in the VM reaches it on the guest's loopback.

  host:  power-cut-relay.py host SOCKET HOST:PORT [HOST:PORT ...]
         listens on the unix socket SOCKET, which qemu connects to as the chardev of a virtserialport
         (-chardev socket,id=ID,path=SOCKET,server=off); each VM that connects (a new one after each
         power cut) gets its streams relayed to the targets. Prints "relay ready"; stops on SIGTERM.
  guest: power-cut-relay.py guest DEVICE PORT [PORT ...]
         listens on 127.0.0.1:PORT in the guest (the n-th port leads to the host's n-th target) and
         carries every connection over DEVICE (/dev/virtio-ports/NAME). Prints "relay ready".

Frames in both directions: stream id (4 bytes), kind (1 byte: 0 open, 1 data, 2 close), length (4 bytes),
payload, all big-endian; an open frame's payload is the target's index (1 byte). A VM killed mid-stream simply disappears: the host side closes that VM's
connections to the server, as a lost power supply would leave them.
"""
import asyncio
import os
import signal
import struct
import sys

HEADER = struct.Struct(">IBI")
OPEN, DATA, CLOSE = 0, 1, 2


class Mux:
    """One framed link; streams are asyncio writers keyed by id."""

    def __init__(self, reader, writer):
        self.reader = reader
        self.writer = writer
        self.streams = {}

    def send(self, sid, kind, payload=b""):
        self.writer.write(HEADER.pack(sid, kind, len(payload)) + payload)

    async def pump(self, sid, reader):
        """Stream -> link until the stream ends."""
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                self.send(sid, DATA, data)
                await self.writer.drain()
        except (ConnectionError, OSError):
            pass
        if self.streams.pop(sid, None) is not None:
            self.send(sid, CLOSE)

    async def frames(self, on_open):
        """Link -> streams until the link ends."""
        try:
            while True:
                header = await self.reader.readexactly(HEADER.size)
                sid, kind, length = HEADER.unpack(header)
                payload = await self.reader.readexactly(length) if length else b""
                if kind == OPEN:
                    await on_open(sid, payload)
                elif kind == DATA:
                    w = self.streams.get(sid)
                    if w is not None:
                        w.write(payload)
                elif kind == CLOSE:
                    w = self.streams.pop(sid, None)
                    if w is not None:
                        w.close()
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        for w in self.streams.values():
            w.close()
        self.streams.clear()


async def host(socket_path, targets):
    addresses = [(t.rsplit(":", 1)[0], int(t.rsplit(":", 1)[1])) for t in targets]

    async def vm(reader, writer):
        mux = Mux(reader, writer)

        async def on_open(sid, payload):
            try:
                host_name, port = addresses[payload[0]]
                r, w = await asyncio.open_connection(host_name, port)
            except (OSError, IndexError):
                mux.send(sid, CLOSE)
                return
            mux.streams[sid] = w
            asyncio.ensure_future(mux.pump(sid, r))

        await mux.frames(on_open)
        writer.close()

    if os.path.exists(socket_path):
        os.unlink(socket_path)
    server = await asyncio.start_unix_server(vm, path=socket_path)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    asyncio.get_running_loop().add_signal_handler(signal.SIGINT, stop.set)
    print("relay ready", flush=True)
    async with server:
        await stop.wait()
    os.unlink(socket_path)


async def guest(device, ports):
    fd = os.open(device, os.O_RDWR | os.O_NOCTTY)
    loop = asyncio.get_running_loop()
    link_file = os.fdopen(fd, "r+b", buffering=0)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), link_file)
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, os.fdopen(os.dup(fd), "wb", buffering=0))
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    mux = Mux(reader, writer)
    next_id = [1]

    def client_for(index):
        async def client(r, w):
            sid = next_id[0]
            next_id[0] += 1
            mux.streams[sid] = w
            mux.send(sid, OPEN, bytes([index]))
            await mux.pump(sid, r)
        return client

    async def no_open(sid, payload):
        mux.send(sid, CLOSE)

    for index, port in enumerate(ports):
        await asyncio.start_server(client_for(index), "127.0.0.1", port)
    print("relay ready", flush=True)
    await mux.frames(no_open)


def main():
    if len(sys.argv) < 4 or sys.argv[1] not in ("host", "guest"):
        print("usage: power-cut-relay.py host SOCKET HOST:PORT... | guest DEVICE PORT...", file=sys.stderr)
        return 64
    if sys.argv[1] == "host":
        asyncio.run(host(sys.argv[2], sys.argv[3:]))
    else:
        asyncio.run(guest(sys.argv[2], [int(p) for p in sys.argv[3:]]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
