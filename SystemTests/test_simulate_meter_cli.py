"""The meter simulator's command line (glucose-gateway-simulator): help for both front ends, meters from flags, usage and file errors."""
import asyncio
import subprocess

from gg_bus import simulator_binary
from gg_dbus import Client


def run_cli(*args, timeout=20):
    return subprocess.run([simulator_binary()] + list(args), capture_output=True, text=True,
                          timeout=timeout)


def test_help_documents_both_front_ends_and_the_control_interface():
    result = run_cli("--help")
    assert result.returncode == 0
    for text in ("--standin", "--bluez", "RegisterApplication", "RegisterAdvertisement", "org.glucosegateway.Simulator1",
                 "RestartBluetoothd", "--time-scale", "--meter FILE", "ready"):
        assert text in result.stdout


def test_usage_and_meter_file_errors(tmp_path):
    assert run_cli("--meter", "x.json").returncode == 64          # no front end chosen
    assert run_cli("--standin", "--bluez", "--address", "C0:26:DA:01:02:03").returncode == 64
    bad = tmp_path / "bad.json"
    bad.write_text('{"address": "C0:26:DA:01:02:03", "name": "m", "pin": "123456", "records": [{"sequence": 1}]}')
    result = run_cli("--standin", "--bus", "unix:path=/nonexistent", "--meter", str(bad))
    assert result.returncode == 65
    assert "records[0].time" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    result = run_cli("--standin", "--bus", "unix:path=/nonexistent", "--address", "C0:26:DA:01:02:03", "--pin", "12")
    assert result.returncode == 64 and "--pin" in result.stderr


def test_meter_from_flags(standin, private_bus):
    standin("--address", "c0:26:da:0a:0b:0c", "--records", "5", "--first-sequence", "100", "--high-at", "101",
            "--no-bonding", "--time-scale", "5")

    async def scenario():
        c = await Client.connect(private_bus)
        (meters,) = await c.control("Meters")
        assert meters == ["C0:26:DA:0A:0B:0C"]
        (records,) = await c.control("Records", "s", ["C0:26:DA:0A:0B:0C"])
        assert records == [100, 101, 102, 103, 104]
        (seq,) = await c.control("AddRecord", "ss", ["C0:26:DA:0A:0B:0C", '{"time": "2024-03-06T08:00:00", "mmol": 6.2}'])
        assert seq == 105
        c.disconnect()

    asyncio.run(asyncio.wait_for(scenario(), 30))
