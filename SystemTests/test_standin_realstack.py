"""What the first runs on the real Linux Bluetooth stack (kernel, bluetoothd 5.66) showed, played by the
stand-in so that the fast suite keeps the gateway honest about it."""

from gg_dbus import standin_control as control
from gg_download import Gateway, meter, records

ADDRESS = "C0:26:DA:01:02:03"


def test_sync_when_bluetoothd_never_signals_connected(private_bus, standin, meter_file, tmp_path):
    # BlueZ 5.66: Connect succeeds but Connected=true is never signalled for the whole connection.
    standin("--meter", meter_file(meter(records_list=records(1, 5))))
    gw = Gateway(private_bus, tmp_path)
    gw.pair(ADDRESS)
    control(private_bus, "SetQuirks", "sas", [ADDRESS, ["silent-connected"]])
    result = gw.sync(ADDRESS)
    assert ADDRESS + ": 5 new readings" in result.stdout
    assert "disconnected before its services were resolved" not in result.stderr
    assert gw.sequences() == [1, 2, 3, 4, 5]


def test_records_arriving_after_the_racp_response_are_stored(private_bus, standin, meter_file, tmp_path):
    # A BlueZ peripheral indicates the RACP response at once but batches the notifications: the
    # response overtakes the records it ends.
    standin("--meter", meter_file(meter(records_list=records(1, 5))))
    gw = Gateway(private_bus, tmp_path)
    gw.pair(ADDRESS)
    control(private_bus, "SetQuirks", "sas", [ADDRESS, ["response-before-records"]])
    first = gw.sync(ADDRESS)
    assert ADDRESS + ": 5 new readings" in first.stdout
    assert gw.sequences() == [1, 2, 3, 4, 5]
    # A new record alone in its report is not lost either.
    control(private_bus, "AddRecord", "ss", [ADDRESS, '{"time": "2024-03-06T09:00:00", "mgdl": 123}'])
    second = gw.sync(ADDRESS)
    assert ADDRESS + ": 1 new reading" in second.stdout
    assert gw.sequences() == [1, 2, 3, 4, 5, 6]


def test_a_stalled_pairing_is_not_called_a_wrong_pin(private_bus, standin, meter_file, tmp_path):
    standin("--meter", meter_file(meter()))
    gw = Gateway(private_bus, tmp_path)
    control(private_bus, "SetQuirks", "sas", [ADDRESS, ["pairing-stalls"]])
    result = gw.run("pair", ADDRESS, "--pin", "123456", "--wait", "10")
    assert result.returncode == 69, result.stderr
    assert "the meter did not answer in time; press its Bluetooth button and try again" in result.stderr
    assert "wrong PIN" not in result.stderr
    assert gw.run("meters", "--json").stdout.strip() == "[]"
    # Once the meter answers, the same PIN pairs.
    control(private_bus, "SetQuirks", "sas", [ADDRESS, []])
    gw.pair(ADDRESS)


def test_repairing_a_bonded_meter_keeps_the_bond_and_says_so(private_bus, standin, meter_file, tmp_path):
    standin("--meter", meter_file(meter()))
    gw = Gateway(private_bus, tmp_path)
    gw.pair(ADDRESS)
    again = gw.run("pair", ADDRESS, "--pin", "654321", "--wait", "10")
    assert again.returncode == 0, again.stderr
    assert not again.stdout.startswith("paired")
    assert "was paired already: kept the existing bond" in again.stdout
    assert "the PIN was not checked" in again.stdout
    # The bond still works.
    assert ADDRESS + ": 5 new readings" in gw.sync(ADDRESS).stdout


def test_simulate_meter_help_tells_how_the_pin_is_imposed_on_real_bluez():
    import subprocess
    from gg_bus import simulator_binary
    result = subprocess.run([simulator_binary(), "--help"], capture_output=True, text=True, timeout=20)
    assert result.returncode == 0
    assert "cannot be imposed" not in result.stdout
    assert "KeyboardOnly agent" in result.stdout
    assert "--display-passkey" in result.stdout
    assert "--address is not needed" in result.stdout


def test_bluez_front_end_takes_the_adapters_address(bluezoo, private_bus, tmp_path):
    from gg_bus import Simulator
    sim = Simulator(["--bluez", "--adapter", "hci1", "--bus", private_bus, "--name", "meter+bluez", "--records", "3"],
                    log_path=str(tmp_path / "meter.log"))
    try:
        sim.wait_for_line("ready", timeout=20)
        gw = Gateway(private_bus, tmp_path, extra_config='adapter = "hci0"\n')
        found = gw.run("scan", "--timeout", "3", "--json")
        assert found.returncode == 0, found.stderr
        assert '"address": "%s"' % bluezoo[1] in found.stdout
        assert "meter+bluez" in found.stdout
    finally:
        sim.stop()
    # Usage errors stay usage errors.
    import subprocess
    from gg_bus import simulator_binary
    both = subprocess.run([simulator_binary(), "--bluez", "--bus", private_bus, "--pin", "123456",
                           "--display-passkey"], capture_output=True, text=True, timeout=20)
    assert both.returncode == 64 and "--display-passkey" in both.stderr


def test_status_and_daemon_notice_a_bluetoothd_that_stops_answering(private_bus, standin, meter_file, tmp_path):
    import os
    from gg_daemon import Gateway as Daemon, wait_until

    standin("--meter", meter_file(meter()))
    alerts = tmp_path / "alerts.txt"
    script = tmp_path / "alert.sh"
    script.write_text('#!/bin/sh\necho "$GATEWAY_ERROR_CODE $GATEWAY_ERROR_MESSAGE" >> %s\n' % alerts)
    os.chmod(script, 0o755)
    daemon = Daemon(tmp_path, private_bus, extra_config='[network]\non_network_error = "%s"\n' % script,
                    args=["--health-interval", "0.5"])
    daemon.start()
    try:
        # bluetoothd keeps org.bluez but answers nothing for 8 s (as after a kernel BUG). The daemon checks
        # every 0.5 s with a 5 s timeout: its first check (within 0.5 s) times out, so does the next one
        # (5.5 to 10.5 s: the calls bluetoothd left unanswered stay unanswered), which leaves seconds to
        # see the alert in status and the run-state file; the one after gets the answer.
        control(private_bus, "StopAnswering", "d", [8.0])
        statuses = []

        def status_says_so():
            statuses.append(daemon.command("status", timeout=30))
            return "bluetooth: bluetoothd not answering" in statuses[-1].stdout
        wait_until("status to say so", status_says_so, timeout=10)
        assert statuses[-1].returncode == 0
        wait_until("the alert", lambda: alerts.exists() and "2001 bluetoothd holds org.bluez" in alerts.read_text(), timeout=20)
        assert "did not answer" in daemon.log()
        # The run-state file follows right after the alert.
        wait_until("the run-state file", lambda: daemon.state()["radio"].get("bluetoothd_answering") is False, timeout=10)
        assert daemon.process.poll() is None
        # Once it answers again the daemon says so; the alert was raised once.
        wait_until("recovery", lambda: "bluetoothd answers again" in daemon.log(), timeout=20)
        assert alerts.read_text().count("2001") == 1
        assert '"bluetoothd_answering": true' in daemon.command("status", "--json").stdout
    finally:
        daemon.stop()


def test_daemon_profile_mode_when_bluetoothd_never_signals_connected(private_bus, standin, meter_file, tmp_path):
    # bluetoothd connects the bonded meter itself (GattProfile1), and with the BlueZ 5.66 race the only
    # sign of it is ServicesResolved=true.
    from gg_daemon import Gateway as Daemon, wait_until
    m = meter(records_list=records(1, 4), advertising="off")
    standin("--time-scale", "20", "--meter", meter_file(m))
    daemon = Daemon(tmp_path, private_bus, extra_config='scan_mode = "profile"\n',
                    args=["--quiet-after", "1", "--time-scale", "20"])
    try:
        control(private_bus, "Advertise", "sd", [ADDRESS, 60.0])
        daemon.pair(ADDRESS, "123456")
        control(private_bus, "SetQuirks", "sas", [ADDRESS, ["silent-connected"]])
        daemon.start()
        wait_until("watching by profile", lambda: daemon.state()["radio"]["watching"] == "profile", timeout=10)
        control(private_bus, "Advertise", "sd", [ADDRESS, 20.0])
        wait_until("the download", lambda: daemon.sequences(ADDRESS) == [1, 2, 3, 4], timeout=20)
    finally:
        daemon.stop()


def test_daemon_discovers_again_after_bluetoothd_was_killed(private_bus, standin, meter_file, tmp_path):
    # A killed bluetoothd leaves its discovery running in the kernel; the new one refuses discovery with
    # InProgress until that ends, and keeps no session for the gateway.
    from gg_daemon import Gateway as Daemon, wait_until
    standin("--time-scale", "20", "--meter", meter_file(meter(records_list=records(1, 5))))
    daemon = Daemon(tmp_path, private_bus, args=["--quiet-after", "1", "--time-scale", "20"])
    try:
        daemon.pair(ADDRESS, "123456")
        daemon.start()
        wait_until("the first download", lambda: daemon.sequences(ADDRESS) == [1, 2, 3, 4, 5], timeout=20)
        control(private_bus, "CrashBluetoothd")
        wait_until("bluetoothd back", lambda: "bluetoothd is running" in daemon.log().split("left the bus")[-1], timeout=20)
        control(private_bus, "AddRecord", "ss", [ADDRESS, '{"time": "2024-03-06T09:00:00", "mgdl": 123}'])
        wait_until("the new record", lambda: daemon.sequences(ADDRESS) == [1, 2, 3, 4, 5, 6], timeout=20)
    finally:
        daemon.stop()


def test_values_bluetoothd_dropped_at_a_full_socket_are_asked_for_again(private_bus, standin, meter_file, tmp_path):
    # bluetoothd drops a notification that finds its AcquireNotify socket full. The meter counted 20
    # records and sent them all; two never reached the gateway, below records that did.
    standin("--meter", meter_file(meter(records_list=records(1, 20))))
    gw = Gateway(private_bus, tmp_path)
    gw.pair(ADDRESS)
    control(private_bus, "SetQuirks", "sas", [ADDRESS, ["full-socket"]])
    first = gw.sync(ADDRESS)
    assert ADDRESS + ": 18 new readings" in first.stdout
    assert "2 of 20 announced records did not arrive; the next sync asks again" in first.stderr
    assert gw.sequences() == [1, 2, 3, 4] + list(range(7, 21))
    # The first download asked for everything: so will the next (-1: from sequence 0), shown as none.
    assert gw.query("SELECT highest_sequence FROM meter")[0][0] == -1
    assert "highest sequence none" in gw.run("status").stdout
    log = control(private_bus, "CallLog")[0]
    assert any(line.startswith("org.bluez.GattCharacteristic1.AcquireNotify ") for line in log)
    # The next sync asks for the same range again: the two arrive, nothing is stored twice.
    second = gw.sync(ADDRESS)
    assert ADDRESS + ": 2 new readings" in second.stdout
    assert gw.sequences() == list(range(1, 21))
    assert gw.query("SELECT count(*) FROM reading")[0][0] == 20
    # Complete now: the sync after that asks only for what is new.
    third = gw.sync(ADDRESS)
    assert ADDRESS + ": 0 new readings" in third.stdout
    # Missing records in an incremental download: the next one asks again from where this one started.
    for minute in range(10):
        control(private_bus, "AddRecord", "ss", [ADDRESS, '{"time": "2024-03-06T09:%02d:00", "mgdl": 123}' % minute])
    control(private_bus, "SetQuirks", "sas", [ADDRESS, ["full-socket"]])
    fourth = gw.sync(ADDRESS)
    assert ADDRESS + ": 8 new readings" in fourth.stdout
    assert gw.query("SELECT highest_sequence FROM meter")[0][0] == 20
    fifth = gw.sync(ADDRESS)
    assert ADDRESS + ": 2 new readings" in fifth.stdout
    assert gw.sequences() == list(range(1, 31))


def test_without_acquire_notify_the_records_come_over_the_bus(private_bus, standin, meter_file, tmp_path):
    # A stand-in that does not offer AcquireNotify (as an old bluetoothd would not): StartNotify for all.
    standin("--no-acquire-notify", "--meter", meter_file(meter(records_list=records(1, 8))))
    gw = Gateway(private_bus, tmp_path)
    gw.pair(ADDRESS)
    control(private_bus, "ClearCallLog")
    result = gw.sync(ADDRESS)
    assert ADDRESS + ": 8 new readings" in result.stdout
    assert gw.sequences() == list(range(1, 9))
    log = control(private_bus, "CallLog")[0]
    assert not any(line.startswith("org.bluez.GattCharacteristic1.AcquireNotify ") for line in log)
    assert len([line for line in log if line.startswith("org.bluez.GattCharacteristic1.StartNotify ")]) >= 2
