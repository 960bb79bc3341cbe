"""Shared code of the download system tests: run gateway commands against the BlueZ stand-in."""
import datetime
import json
import os
import sqlite3
import subprocess

from gg_bus import gateway_binary


class Gateway:
    """The gateway's command line with its own config and database in `directory`, on the private bus."""

    def __init__(self, bus_address, directory, time_zone="UTC", extra_config=""):
        self.bus_address = bus_address
        self.directory = str(directory)
        self.database = os.path.join(self.directory, "gateway.sqlite3")
        self.config = os.path.join(self.directory, "gateway.toml")
        with open(self.config, "w") as f:
            f.write('[gateway]\ndatabase = "%s"\ndownload_idle_timeout_s = 5\n%s' % (self.database, extra_config))
        self.env = dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS=bus_address, TZ=time_zone)
        self.env.pop("GLUCOSE_GATEWAY_CONFIG", None)

    def command(self, *args):
        return [gateway_binary(), "--config", self.config] + [str(a) for a in args]

    def run(self, *args, timeout=60):
        return subprocess.run(self.command(*args), env=self.env, capture_output=True, text=True, timeout=timeout)

    def start(self, *args):
        """A command running in the background (stopped by pid by the caller)."""
        return subprocess.Popen(self.command(*args), env=self.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def pair(self, address, pin="123456", time_zone=None):
        args = ["pair", address, "--pin", pin, "--wait", "10"]
        if time_zone:
            args += ["--timezone", time_zone]
        result = self.run(*args)
        assert result.returncode == 0, result.stderr
        return result

    def sync(self, *args, expect=0):
        result = self.run("sync", *args)
        assert result.returncode == expect, "sync exited %s: %s %s" % (result.returncode, result.stdout, result.stderr)
        return result

    def readings(self, *args):
        result = self.run("readings", "--json", *args)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    def query(self, sql, params=()):
        db = sqlite3.connect(self.database, timeout=10)
        try:
            return db.execute(sql, params).fetchall()
        finally:
            db.close()

    def sequences(self):
        return sorted(r["sequence"] for r in self.readings())


def records(first, count, start_hour=7, offset=60, **extra):
    """`count` ordinary meter-file records from sequence `first`, one per hour from 2024-03-05T07:00."""
    out = []
    base = datetime.datetime(2024, 3, 5)
    for i in range(count):
        when = base + datetime.timedelta(hours=start_hour + i)
        record = {"sequence": first + i, "time": when.strftime("%Y-%m-%dT%H:%M:%S"), "timeOffset": offset,
                  "mgdl": 90 + (first + i) % 100}
        record.update(extra)
        out.append(record)
    return out


def meter(address="C0:26:DA:01:02:03", pin="123456", records_list=None, **extra):
    m = {"address": address, "name": "meter+" + address.replace(":", "")[-6:], "pin": pin,
         "deviceInformation": {"manufacturer": "Simulated Meters", "model": "GlucoSim 1", "serial": "SIM%s" % address[-2:]},
         "records": records_list if records_list is not None else records(1, 5)}
    m.update(extra)
    return m
