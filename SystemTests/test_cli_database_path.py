"""A `database` path that is not a usable file: a directory (left untouched, never chmod 0600), a symbolic
link to nothing, a file with a negative schema version. Every command refuses it with the same one-line
error and exit 1; `status` agrees instead of saying "(not created yet)"."""
import os
import sqlite3
import stat
import subprocess

import pytest

from gg_bus import gateway_binary

COMMANDS = [["status"], ["status", "--json"], ["meters"], ["readings"], ["sync"], ["unpair", "C0:26:DA:01:02:03"],
            ["upload"]]


def run(config, args):
    env = {k: v for k, v in os.environ.items() if k != "GLUCOSE_GATEWAY_CONFIG"}
    env["DBUS_SYSTEM_BUS_ADDRESS"] = "unix:path=/nonexistent/bus"
    return subprocess.run([gateway_binary(), "--config", config] + args, capture_output=True, text=True, timeout=60,
                          env=env)


def config_for(tmp_path, database):
    path = tmp_path / "gateway.toml"
    # upload needs a destination to get as far as the database; nothing listens there.
    path.write_text('[gateway]\ndatabase = "%s"\n[nightscout]\nurl = "http://127.0.0.1:9"\napi_secret = "0123456789abcdef"\n'
                    % database)
    return str(path)


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_directory_is_refused_and_left_alone(tmp_path, args):
    directory = tmp_path / "data"
    directory.mkdir()
    os.chmod(directory, 0o755)
    r = run(config_for(tmp_path, directory), args)
    assert r.returncode == 1, r.stdout + r.stderr
    assert len(r.stderr.splitlines()) == 1, r.stderr
    assert "database %s is a directory, not a database file" % directory in r.stderr
    assert stat.S_IMODE(os.stat(directory).st_mode) == 0o755
    assert os.listdir(directory) == []


@pytest.mark.parametrize("target", ["missing-dir/gateway.sqlite3", "gateway-target.sqlite3"])
@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_link_to_nothing_is_the_same_error_everywhere(tmp_path, args, target):
    link = tmp_path / "gateway.sqlite3"
    os.symlink(str(tmp_path / target), str(link))
    r = run(config_for(tmp_path, link), args)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.splitlines() == [
        "glucose-gateway %s: database %s is a symbolic link to %s, which does not exist" % (args[0], link, tmp_path / target)]
    assert "not created yet" not in r.stdout
    # Nothing was created behind the link.
    assert not os.path.exists(str(tmp_path / target))


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_negative_schema_version_is_refused(tmp_path, args):
    database = tmp_path / "gateway.sqlite3"
    db = sqlite3.connect(str(database))
    db.execute("PRAGMA user_version = -3")
    db.close()
    r = run(config_for(tmp_path, database), args)
    assert r.returncode == 1, r.stdout + r.stderr
    assert len(r.stderr.splitlines()) == 1, r.stderr
    assert "schema version -3 is invalid" in r.stderr
    db = sqlite3.connect(str(database))
    try:
        assert db.execute("PRAGMA user_version").fetchone() == (-3,)
        assert db.execute("SELECT count(*) FROM sqlite_master").fetchone() == (0,)
    finally:
        db.close()
