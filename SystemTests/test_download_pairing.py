"""Pairing through the stand-in's agent calls: right PIN, wrong PIN, a meter that never advertises;
and the command line's refusals of bad input."""
import asyncio
import json

from gg_dbus import Client
from gg_download import Gateway, meter

ADDRESS = "C0:26:DA:01:02:03"


def call_log(bus):
    async def call():
        client = await Client.connect(bus)
        try:
            return (await client.control("CallLog"))[0]
        finally:
            client.bus.disconnect()
    return asyncio.run(call())


def test_right_pin_pairs_through_the_agent(private_bus, standin, meter_file, tmp_path):
    standin("--meter", meter_file(meter(features=["highLow"])))
    gw = Gateway(private_bus, tmp_path, time_zone="America/New_York")
    result = gw.run("pair", ADDRESS.lower(), "--pin", "123456")
    assert result.returncode == 0, result.stderr
    assert "paired " + ADDRESS in result.stdout
    assert "time zone America/New_York" in result.stdout
    # Multiple bond not supported: the user is warned about the phone app.
    assert "single bond" in result.stderr
    log = call_log(private_bus)
    assert any("AgentManager1.RegisterAgent" in line for line in log)
    assert any("Device1.Pair" in line for line in log)
    meters = json.loads(gw.run("meters", "--json").stdout)
    assert [m["address"] for m in meters] == [ADDRESS]
    # The same config through the environment instead of --config.
    import subprocess
    from gg_bus import gateway_binary
    via_env = subprocess.run([gateway_binary(), "meters", "--json"], capture_output=True, text=True, timeout=30,
                             env=dict(gw.env, GLUCOSE_GATEWAY_CONFIG=gw.config))
    assert via_env.returncode == 0, via_env.stderr
    assert json.loads(via_env.stdout) == meters
    assert meters[0]["time_zone"] == "America/New_York"
    assert meters[0]["timeZone"] == "America/New_York"   # deprecated key, kept for one release
    assert meters[0]["serial"] == "SIM03"
    assert meters[0]["model"] == "GlucoSim 1"
    scan = gw.run("scan", "--timeout", "1")
    assert scan.returncode == 0
    line = next(l for l in scan.stdout.splitlines() if l.startswith(ADDRESS))
    assert line.split()[-1] == "yes"


def test_multiple_bond_meter_gets_no_warning(private_bus, standin, meter_file, tmp_path):
    standin("--meter", meter_file(meter(features=["highLow", "multipleBond"])))
    gw = Gateway(private_bus, tmp_path)
    result = gw.run("pair", ADDRESS, "--pin", "123456", "--timezone", "Europe/Berlin")
    assert result.returncode == 0, result.stderr
    assert "single bond" not in result.stderr


def test_wrong_pin_fails_clearly_and_stores_nothing(private_bus, standin, meter_file, tmp_path):
    standin("--meter", meter_file(meter()))
    gw = Gateway(private_bus, tmp_path)
    result = gw.run("pair", ADDRESS, "--pin", "654321")
    assert result.returncode == 1
    assert "wrong PIN" in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2
    assert json.loads(gw.run("meters", "--json").stdout) == []
    # The right PIN still works afterwards.
    assert gw.run("pair", ADDRESS, "--pin", "123456").returncode == 0


def test_meter_that_never_advertises_times_out(private_bus, standin, meter_file, tmp_path):
    standin("--meter", meter_file(meter(advertising="off")))
    gw = Gateway(private_bus, tmp_path)
    result = gw.run("pair", ADDRESS, "--pin", "123456", "--wait", "1")
    assert result.returncode == 69
    assert "not seen" in result.stderr
    assert json.loads(gw.run("meters", "--json").stdout) == []


def test_unpair_keeps_the_readings(private_bus, standin, meter_file, tmp_path):
    standin("--meter", meter_file(meter()))
    gw = Gateway(private_bus, tmp_path)
    gw.pair(ADDRESS)
    gw.sync()
    result = gw.run("unpair", ADDRESS)
    assert result.returncode == 0, result.stderr
    assert json.loads(gw.run("meters", "--json").stdout) == []
    assert len(gw.readings("--meter", ADDRESS)) == 5
    assert any("RemoveDevice" in line for line in call_log(private_bus))
    again = gw.run("unpair", ADDRESS)
    assert again.returncode == 1
    assert "no paired meter" in again.stderr


def test_bad_input_is_refused_in_one_line(private_bus, tmp_path):
    gw = Gateway(private_bus, tmp_path)
    cases = [
        (["pair", "C0:26:DA:01:02", "--pin", "123456"], 64),
        (["pair", ADDRESS, "--pin", "12345"], 64),
        (["pair", ADDRESS, "--pin", "12a456"], 64),
        (["pair", ADDRESS, "--pin"], 64),
        (["pair", ADDRESS, "--confirm=yes"], 64),
        (["pair", ADDRESS, "--pin", "123456", "--timezone", "Nowhere/City"], 64),
        (["sync", "not-an-address"], 64),
        (["sync", ADDRESS], 1),
        (["readings", "--since", "tomorrow"], 64),
        (["readings", "--json", "--csv"], 64),
        (["unpair"], 64),
    ]
    for args, status in cases:
        result = gw.run(*args)
        assert result.returncode == status, (args, result.returncode, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1, (args, result.stderr)
    bad_config = tmp_path / "bad.toml"
    bad_config.write_text("[gateway]\ndatabase = 42\n")
    gw.config = str(bad_config)
    result = gw.run("meters")
    assert result.returncode == 78
    assert "bad.toml:2:" in result.stderr


def test_scan_lists_only_meters_advertising_now(private_bus, standin, meter_file, tmp_path):
    quiet = "C0:26:DA:01:02:04"
    standin("--meter", meter_file(meter()), "--meter", meter_file(meter(address=quiet, advertising="off")))
    gw = Gateway(private_bus, tmp_path)
    result = gw.run("scan", "--timeout", "1", "--json")
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert [m["address"] for m in found] == [ADDRESS]
    assert found[0]["paired"] is False
    assert isinstance(found[0]["rssi"], int)
    assert found[0]["name"].startswith("meter+")
