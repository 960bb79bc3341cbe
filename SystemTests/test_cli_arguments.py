"""The command line of the real binary in any order: options before, between or after positionals, `--`,
`-h`, a repeated `--config`, a bad option value. Without a bus or a meter: each line is compared with the
same line in its documented order (same exit status, same stderr), so an option value taken as a
positional shows as a different error."""
import itertools
import os
import subprocess

import pytest

from gg_bus import gateway_binary

ADDRESS = "C0:26:DA:01:02:03"


@pytest.fixture
def gw(tmp_path):
    config = tmp_path / "gateway.toml"
    config.write_text('[gateway]\ndatabase = "%s"\n' % (tmp_path / "gateway.sqlite3"))
    env = {k: v for k, v in os.environ.items() if k != "GLUCOSE_GATEWAY_CONFIG"}
    # No bus: meter commands fail at once with "Bluetooth is not available" (69), after parsing.
    env["DBUS_SYSTEM_BUS_ADDRESS"] = "unix:path=%s" % (tmp_path / "no-bus")

    def run(*args, config_option=True):
        prefix = ["--config", str(config)] if config_option else []
        return subprocess.run([gateway_binary()] + prefix + list(args), capture_output=True, text=True,
                              timeout=60, env=env)
    run.config = str(config)
    return run


def groups_in_every_order(groups):
    """Every order of the argument groups (an option stays with its value), as flat lists."""
    for order in itertools.permutations(groups):
        yield [token for group in order for token in group]


# The documented order first; then every other order must give the same result.
LINES = [
    pytest.param("sync", [["--wait", "20"]], (0, "no paired meters"), id="sync --wait 20"),
    pytest.param("sync", [[ADDRESS], ["--wait", "2"]], (1, "not a paired meter"), id="sync ADDRESS --wait 2"),
    pytest.param("sync", [[ADDRESS], ["--adapter", "hci0"], ["--wait", "1"]], (1, "not a paired meter"),
                 id="sync ADDRESS --adapter hci0 --wait 1"),
    pytest.param("pair", [[ADDRESS], ["--pin", "123456"]], (69, "Bluetooth is not available"), id="pair ADDRESS --pin"),
    pytest.param("pair", [[ADDRESS], ["--pin", "123456"], ["--timezone", "UTC"], ["--adapter", "hci0"], ["--wait", "1"]],
                 (69, "Bluetooth is not available"), id="pair ADDRESS --pin --timezone --adapter --wait"),
    pytest.param("unpair", [[ADDRESS], ["--adapter", "hci0"]], (1, "no paired meter"), id="unpair ADDRESS --adapter"),
    pytest.param("readings", [["--meter", ADDRESS], ["--since", "24h"], ["--limit", "5"], ["--csv"]],
                 (1, "no meter " + ADDRESS), id="readings --meter --since --limit --csv"),
    pytest.param("decode", [["--compact"], ["2a52"], ["06000101"]], (0, ""), id="decode --compact 2a52 HEX"),
]


@pytest.mark.parametrize("command,groups,expected", LINES)
def test_options_and_positionals_in_any_order(gw, command, groups, expected):
    status, text = expected
    first = gw(command, *[t for g in groups for t in g])
    assert first.returncode == status, first.stderr
    assert text in first.stdout + first.stderr
    positionals = [g for g in groups if not g[0].startswith("--")]
    for tokens in groups_in_every_order(groups):
        # Positionals keep their own order (CHARACTERISTIC before HEX).
        if [t for t in tokens if t in sum(positionals, [])] != sum(positionals, []):
            continue
        again = gw(command, *tokens)
        assert (again.returncode, again.stdout, again.stderr) == (first.returncode, first.stdout, first.stderr), tokens


def test_a_negative_wait_is_reported_as_a_bad_value(gw):
    for tokens in (["--wait", "-1"], ["--wait=-1"], ["--wait", "-1", ADDRESS], [ADDRESS, "--wait", "-1"]):
        r = gw("sync", *tokens)
        assert r.returncode == 64, tokens
        assert r.stderr == "glucose-gateway sync: --wait must be a number of seconds between 0 and 3600, got '-1'\n"


def test_a_missing_value_names_the_option(gw):
    r = gw("sync", "--wait", "--adapter", "hci0")
    assert r.returncode == 64
    assert r.stderr == "glucose-gateway sync: --wait needs a value\n"


def test_double_dash_ends_the_options(gw, tmp_path):
    # After `--`, `--help` is a PATH, not a request for help.
    r = gw("config", "check", "--", "--help")
    assert r.returncode == 78, r.stdout
    assert r.stdout == ""
    assert "--help" in r.stderr
    # `-h` likewise.
    r = gw("config", "check", "--", "-h")
    assert r.returncode == 78
    assert r.stderr.startswith("-h")


@pytest.mark.parametrize("args", [["-h"], ["--help"], ["-h", "sync"], ["sync", "-h"], ["sync", "--wait", "3", "-h"],
                                  ["pair", "-h", ADDRESS], ["sync", "--bogus", "-h"]])
def test_short_h_is_help(gw, args):
    r = gw(*args, config_option=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: glucose-gateway")
    if "sync" in args:
        assert r.stdout.startswith("usage: glucose-gateway sync")
    if "pair" in args:
        assert r.stdout.startswith("usage: glucose-gateway pair")
    assert r.stderr == ""


@pytest.mark.parametrize("args", [
    ["--config", "a.toml", "--config", "b.toml", "status"],
    ["--config", "a.toml", "status", "--config", "b.toml"],
    ["--config=a.toml", "status", "--config=b.toml"],
])
def test_a_repeated_config_is_a_usage_error(gw, args):
    r = gw(*args, config_option=False)
    assert r.returncode == 64
    assert "--config" in r.stderr
    assert len(r.stderr.splitlines()) == 1


def test_unknown_options_are_named(gw):
    r = gw("sync", "--wiat", "3")
    assert r.returncode == 64
    assert r.stderr == "glucose-gateway sync: unknown option '--wiat'\n"
    r = gw("--bogus", "status", config_option=False)
    assert r.returncode == 64
    assert r.stderr == "glucose-gateway: unknown option '--bogus'\n"
