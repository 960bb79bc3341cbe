"""A failed write to stdout or stderr is an error: /dev/full (ENOSPC on every write) stands for a full disk
under `readings --csv > file`. Each command exits 1 with one line on stderr instead of 0 with a truncated
or empty file."""
import json
import os
import subprocess

import pytest

from gg_bus import gateway_binary
from gg_download import Gateway, meter

ADDRESS = "C0:26:DA:01:02:03"


@pytest.fixture
def config(tmp_path):
    path = tmp_path / "gateway.toml"
    path.write_text('[gateway]\ndatabase = "%s"\n' % (tmp_path / "gateway.sqlite3"))
    return str(path)


def run_to_full(args, env=None, stderr_full=False):
    full_env = {k: v for k, v in os.environ.items() if k != "GLUCOSE_GATEWAY_CONFIG"}
    full_env.setdefault("DBUS_SYSTEM_BUS_ADDRESS", "unix:path=/nonexistent/bus")
    full_env.update(env or {})
    with open("/dev/full", "w") as full:
        if stderr_full:
            return subprocess.run([gateway_binary()] + args, stdout=subprocess.PIPE, stderr=full, text=True,
                                  timeout=60, env=full_env)
        return subprocess.run([gateway_binary()] + args, stdout=full, stderr=subprocess.PIPE, text=True,
                              timeout=60, env=full_env)


@pytest.mark.parametrize("args", [
    ["readings", "--csv"], ["readings", "--json"], ["readings"], ["meters"], ["meters", "--json"],
    ["status"], ["status", "--json"], ["decode", "2a52", "06000101"], ["--help"], ["sync", "--help"], ["-h"],
    ["config", "check"],
], ids=lambda a: " ".join(a))
def test_a_failed_write_to_stdout_exits_1_with_one_line(config, args):
    r = run_to_full(["--config", config] + args)
    assert r.returncode == 1, r.stderr
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert lines[0].endswith("cannot write to standard output: No space left on device")
    assert lines[0].startswith("glucose-gateway")


def test_the_same_commands_succeed_on_a_writable_stdout(config):
    for args in (["readings", "--csv"], ["meters"], ["status"], ["--help"]):
        r = subprocess.run([gateway_binary(), "--config", config] + args, capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, DBUS_SYSTEM_BUS_ADDRESS="unix:path=/nonexistent/bus"))
        assert r.returncode == 0, (args, r.stderr)
        assert r.stdout


def test_a_failed_write_to_stderr_exits_1(private_bus, standin, meter_file, tmp_path):
    # `pair` tells the user on stderr to press the meter's button; that line cannot be written.
    standin("--meter", meter_file(meter()))
    gw = Gateway(private_bus, tmp_path)
    r = run_to_full(["--config", gw.config, "pair", ADDRESS, "--pin", "123456", "--wait", "10"],
                    env=gw.env, stderr_full=True)
    assert r.returncode == 1
    assert "paired " + ADDRESS in r.stdout
    # Nothing is lost: the pairing was stored.
    assert [m["address"] for m in json.loads(gw.run("meters", "--json").stdout)] == [ADDRESS]


def test_sync_reports_a_failed_store_on_stderr(private_bus, standin, meter_file, tmp_path):
    standin("--meter", meter_file(meter()))
    gw = Gateway(private_bus, tmp_path)
    gw.pair(ADDRESS)
    # The database refuses every reading (as a full or broken disk would), through a real SQLite trigger.
    gw.query("CREATE TRIGGER refuse_readings BEFORE INSERT ON reading BEGIN "
             "SELECT RAISE(ABORT, 'refused by the test'); END")
    sync = gw.run("sync")
    assert sync.returncode == 1, sync.stdout + sync.stderr
    assert "refused by the test" in sync.stderr
    assert "refused by the test" not in sync.stdout
    assert sync.stderr.startswith("glucose-gateway sync: " + ADDRESS + ": download failed")
    assert gw.query("SELECT count(*) FROM reading") == [(0,)]
