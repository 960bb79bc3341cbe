"""`glucose-gateway status` without the pieces it reports on: no system bus, no bluetoothd, a daemon that was
killed (its run-state file still says running), and the single-bond warning."""
import json
import subprocess

from gg_bus import gateway_binary
from gg_daemon import Gateway, control, wait_until
from test_daemon_run import A, PIN, meter


def status(config, bus, *extra):
    out = subprocess.run([gateway_binary(), "--config", config, "status"] + list(extra), capture_output=True, text=True,
                         env={"DBUS_SYSTEM_BUS_ADDRESS": bus, "PATH": "/usr/bin:/bin", "TZ": "UTC"}, timeout=30)
    return out


def test_status_without_bus_or_bluetoothd_exits_0_and_says_so(private_bus, tmp_path):
    gw = Gateway(tmp_path, private_bus)
    missing = status(gw.config, "unix:path=" + str(tmp_path / "no-such-bus"), "--json")
    assert missing.returncode == 0, missing.stderr
    report = json.loads(missing.stdout)
    assert report["bluetooth"]["bus_reachable"] is False
    assert report["daemon"]["running"] is False
    assert report["store"]["exists"] is False

    no_bluez = status(gw.config, private_bus)
    assert no_bluez.returncode == 0, no_bluez.stderr
    assert "bluetooth: bluetoothd is not running" in no_bluez.stdout
    assert "daemon: not running" in no_bluez.stdout


def test_status_after_kill_9_and_single_bond_warning(private_bus, standin, meter_file, tmp_path):
    standin("--meter", meter_file(meter(A, count=3, features=["highLow"])))
    gw = Gateway(tmp_path, private_bus, args=("--quiet-after", "1"))
    try:
        control(private_bus, "Advertise", A, 60.0)
        gw.pair(A, PIN)
        gw.start()
        wait_until("the download", lambda: gw.sequences(A) == [1, 2, 3], timeout=20)
        running = json.loads(status(gw.config, private_bus, "--json").stdout)
        assert running["daemon"]["running"] is True
        assert running["bluetooth"]["bluetoothd_running"] is True and running["bluetooth"]["adapter"] == "hci0"
        assert running["meters"][0]["single_bond"] is True
        gw.kill9()
        after = status(gw.config, private_bus)
        assert after.returncode == 0
        assert "daemon: not running" in after.stdout
        assert "keeps one bond only" in after.stdout
        assert "3 readings" in after.stdout
    finally:
        gw.stop()
