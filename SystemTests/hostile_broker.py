"""A hostile MQTT broker on 127.0.0.1, for the tests and the memory benchmark of the gateway's MQTT client.

--mode drop: answers each CONNECT with CONNACK 0 and closes the connection --drop-after-ms later.
--mode publish: answers CONNACK 0, then sends a PUBLISH that announces --publish-bytes and streams them.
Prints one JSON line {"port": N, "control_port": 0}; counts connections in --count-file if given."""
import argparse
import json
import socket
import sys
import threading
import time


def read_packet(conn):
    """Reads one MQTT packet; returns its first byte, or None when the peer closed."""
    head = conn.recv(1)
    if not head:
        return None
    length, multiplier = 0, 1
    while True:
        b = conn.recv(1)
        if not b:
            return None
        length += (b[0] & 0x7F) * multiplier
        multiplier *= 128
        if not b[0] & 0x80:
            break
    while length:
        chunk = conn.recv(min(length, 65536))
        if not chunk:
            return None
        length -= len(chunk)
    return head[0]


def varint(n):
    out = bytearray()
    while True:
        byte, n = n % 128, n // 128
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def serve(conn, args, counter):
    try:
        if read_packet(conn) != 0x10:
            return
        with counter["lock"]:
            counter["n"] += 1
            if args.count_file:
                with open(args.count_file, "w") as f:
                    f.write("%d\n" % counter["n"])
        conn.sendall(b"\x20\x02\x00\x00")
        if args.mode == "drop":
            time.sleep(args.drop_after_ms / 1000.0)
            return
        topic = b"x"
        total = args.publish_bytes
        conn.sendall(b"\x30" + varint(total) + len(topic).to_bytes(2, "big") + topic)
        left = total - 2 - len(topic)
        block = b"\x00" * 65536
        while left > 0:
            n = min(left, len(block))
            conn.sendall(block[:n])
            left -= n
        conn.settimeout(30)
        while read_packet(conn) is not None:
            pass
    except OSError:
        pass
    finally:
        conn.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["drop", "publish"], required=True)
    p.add_argument("--drop-after-ms", type=float, default=50)
    p.add_argument("--publish-bytes", type=int, default=60 * 1024 * 1024)
    p.add_argument("--count-file")
    args = p.parse_args()
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    print(json.dumps({"port": listener.getsockname()[1], "control_port": 0}), flush=True)
    counter = {"n": 0, "lock": threading.Lock()}
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve, args=(conn, args, counter), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
