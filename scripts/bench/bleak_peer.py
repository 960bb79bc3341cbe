#!/usr/bin/env python3
"""A minimal glucose gateway written with bleak: the peer `glucose-gateway-bench sync-vs-peer` measures
the gateway against.

It does the job of one `glucose-gateway sync` with upload, and no more: connect to the meter, subscribe
to Glucose Measurement (0x2A18), Measurement Context (0x2A34) and the RACP (0x2A52) indications, ask how
many records there are, report all of them, decode each measurement (sequence, base time + offset,
SFLOAT concentration), store each one with its raw bytes in SQLite (WAL, synchronous=FULL, a commit every
200 records and at the end), then POST them to Nightscout (`/api/v1/entries`, batches of 200 like the gateway, SHA-1 of
the API secret, one kept-alive connection) and check that the server returned every entry.

Notifications come the way bleak takes them by default (StartNotify, each value a D-Bus signal); with
--acquire, 0x2A18 and 0x2A34 come through AcquireNotify sockets, as the gateway takes them.

Runs with bleak from the test virtual environment; the bus is $DBUS_SYSTEM_BUS_ADDRESS.
Usage: bleak_peer.py --address AA:BB:.. --database PATH --url http://127.0.0.1:PORT --secret S [--acquire]
Prints "stored N uploaded M" and exits 0, or one line on stderr and exits 1.
"""
import argparse
import asyncio
import datetime
import hashlib
import http.client
import json
import sqlite3
import struct
import sys
import urllib.parse

from bleak import BleakClient

GM = "00002a18-0000-1000-8000-00805f9b34fb"
GMC = "00002a34-0000-1000-8000-00805f9b34fb"
RACP = "00002a52-0000-1000-8000-00805f9b34fb"
# Readings per POST: the gateway's largest batch, so both do the same number of requests.
BATCH = 200


def sfloat(raw):
    mantissa = raw & 0x0FFF
    exponent = raw >> 12
    if mantissa >= 0x0800:
        mantissa -= 0x1000
    if exponent >= 0x8:
        exponent -= 0x10
    if raw in (0x07FF, 0x0800, 0x07FE, 0x0802, 0x0801):
        return None
    return mantissa * 10.0 ** exponent


def decode(m):
    """(sequence, ISO local time, mg/dL or None) of one 0x2A18 value."""
    flags = m[0]
    seq, year, month, day, hour, minute, second = struct.unpack_from("<HHBBBBB", m, 1)
    at = 10
    when = datetime.datetime(year, month, day, hour, minute, second)
    if flags & 0x01:
        (offset,) = struct.unpack_from("<h", m, at)
        when += datetime.timedelta(minutes=offset)
        at += 2
    mgdl = None
    if flags & 0x02:
        (raw,) = struct.unpack_from("<H", m, at)
        value = sfloat(raw)
        if value is not None and not flags & 0x04:  # kg/L
            mgdl = round(value * 100000, 1)
    return seq, when.isoformat(), mgdl


async def download(address, acquire):
    measurements, contexts = [], []
    responses = asyncio.Queue()
    sockets = {"bluez": {"use_start_notify": False}} if acquire else {}
    async with BleakClient(address, timeout=20) as client:
        await client.start_notify(GM, lambda _, d: measurements.append(bytes(d)), **sockets)
        await client.start_notify(GMC, lambda _, d: contexts.append(bytes(d)), **sockets)
        await client.start_notify(RACP, lambda _, d: responses.put_nowait(bytes(d)))
        await client.write_gatt_char(RACP, b"\x04\x01", response=True)
        count_answer = await asyncio.wait_for(responses.get(), 20)
        if count_answer[0] != 0x05:
            raise RuntimeError("unexpected RACP answer " + count_answer.hex())
        (count,) = struct.unpack_from("<H", count_answer, 2)
        await client.write_gatt_char(RACP, b"\x01\x01", response=True)
        done = await asyncio.wait_for(responses.get(), 60)
        if done[:3] != b"\x06\x00\x01":
            raise RuntimeError("unexpected RACP answer " + done.hex())
        # Notifications may trail the indication: wait for every announced record (at most 2 s).
        for _ in range(200):
            if len(measurements) >= count:
                break
            await asyncio.sleep(0.01)
    return measurements, contexts


def store(path, measurements):
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    db.execute("CREATE TABLE IF NOT EXISTS readings (sequence INTEGER, time TEXT, mgdl REAL, raw BLOB, "
               "uploaded INTEGER DEFAULT 0, UNIQUE (sequence, time))")
    rows = []
    db.execute("BEGIN")
    for n, m in enumerate(measurements, 1):
        seq, when, mgdl = decode(m)
        db.execute("INSERT OR IGNORE INTO readings (sequence, time, mgdl, raw) VALUES (?, ?, ?, ?)",
                   (seq, when, mgdl, m))
        rows.append((seq, when, mgdl))
        if n % 200 == 0:
            db.execute("COMMIT")
            db.execute("BEGIN")
    db.execute("COMMIT")
    return db, rows


def upload(db, rows, url, secret, address):
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    headers = {"Content-Type": "application/json", "api-secret": hashlib.sha1(secret.encode()).hexdigest()}
    uploaded = 0
    entries = [r for r in rows if r[2] is not None]
    for start in range(0, len(entries), BATCH):
        batch = entries[start:start + BATCH]
        body = []
        for seq, when, mgdl in batch:
            instant = datetime.datetime.fromisoformat(when).replace(tzinfo=datetime.timezone.utc)
            body.append({"type": "mbg", "mbg": int(round(mgdl)), "date": int(instant.timestamp() * 1000),
                         "dateString": instant.isoformat(timespec="milliseconds"),
                         "device": "bleak-peer", "identifier": "%s-%d-%s" % (address, seq, when)})
        conn.request("POST", "/api/v1/entries", json.dumps(body), headers)
        answer = conn.getresponse()
        data = answer.read()
        if answer.status != 200:
            raise RuntimeError("upload answered %d" % answer.status)
        returned = {e.get("identifier") for e in json.loads(data) if isinstance(e, dict)}
        confirmed = [(seq, when) for (seq, when, _), sent in zip(batch, body) if sent["identifier"] in returned]
        db.execute("BEGIN")
        db.executemany("UPDATE readings SET uploaded = 1 WHERE sequence = ? AND time = ?", confirmed)
        db.execute("COMMIT")
        uploaded += len(confirmed)
    conn.close()
    return uploaded


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", required=True)
    parser.add_argument("--database", required=True)
    parser.add_argument("--url", required=True)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--acquire", action="store_true", help="measurement and context through AcquireNotify")
    args = parser.parse_args()
    try:
        measurements, _ = asyncio.run(download(args.address, args.acquire))
        db, rows = store(args.database, measurements)
        uploaded = upload(db, rows, args.url, args.secret, args.address)
        db.close()
    except Exception as error:  # one line, non-zero exit
        print("bleak peer: %s" % error, file=sys.stderr)
        return 1
    print("stored %d uploaded %d" % (len(rows), uploaded))
    return 0


if __name__ == "__main__":
    sys.exit(main())
