"""`glucose-gateway run` against the BlueZ stand-in and a loopback Nightscout: meters that advertise only
after a measurement, two meters, the receiver down and back, bluetoothd restarting, the adapter unplugged,
SIGTERM in the middle of a download, SIGHUP with a bad config, and kill -9 at random moments.

Simulated time is compressed (the stand-in's --time-scale, the daemon's --time-scale for upload backoff);
state is polled through the sqlite file (a WAL reader), the run-state file and `status --json`, with
bounded waits."""
import json
import os
import random
import signal
import time


from gg_daemon import Gateway, control, gateways, nightscout, wait_until  # noqa: F401 (fixtures)

A = "C0:26:DA:01:02:03"
B = "C0:26:DA:0A:0B:0C"
PIN = "123456"


def meter(address, count=5, first=1, day=5, **extra):
    # Nightscout keeps one entry per {sysTime, type}: each meter measures on its own day.
    records = [{"sequence": first + i, "time": "2024-03-%02dT%02d:%02d:00" % (day, 6 + i // 60, i % 60), "timeOffset": 0,
                "mgdl": 90 + i % 50} for i in range(count)]
    m = {"address": address, "name": "meter+" + address[-5:].replace(":", ""), "pin": PIN, "bonding": True,
         "records": records, "advertising": "off"}
    m.update(extra)
    return m


def meter_records(bus, address):
    out = control(bus, "Records", address)
    return [int(line.split()[-1]) for line in out.splitlines() if line.strip().startswith("uint16")]


def paired_gateway(gateways, tmp_path, bus, addresses, nightscout=None, args=("--quiet-after", "0.3", "--time-scale", "20")):
    gw = Gateway(tmp_path, bus, nightscout_url=nightscout.url if nightscout else None,
                 secret=nightscout.secret if nightscout else None, args=args)
    gateways.append(gw)
    for address in addresses:
        control(bus, "Advertise", address, 60.0)
        gw.pair(address, PIN)
    return gw


def assert_uploaded_exactly_once(gw, nightscout):
    readings = gw.query("SELECT count(*) FROM reading")[0][0]
    entries = nightscout.entries()
    identifiers = [e.get("identifier") for e in entries]
    assert len(identifiers) == len(set(identifiers)), "duplicate uploads"
    assert len(entries) == readings
    assert nightscout.stats()["inserted"] == readings


# The hour of measurements below, compressed: a measurement every 5 simulated minutes is one every
# 300/HOUR_SCALE real seconds, and the advertising burst after it (30 simulated seconds) lasts 30/HOUR_SCALE.
HOUR_SCALE = 120


def test_meter_advertising_after_measurements_over_an_hour(private_bus, standin, meter_file, tmp_path, gateways, nightscout):
    """One simulated hour at HOUR_SCALE x: a measurement every 5 min, each followed by a short advertising burst."""
    scale = str(HOUR_SCALE)
    hour = 12 * 300 / HOUR_SCALE
    standin("--time-scale", scale, "--meter", meter_file(meter(A, count=5, newRecords={"everySeconds": 300, "limit": 12})))
    # A burst lasts 30/HOUR_SCALE s here (1/4 s); the quiet period after a download must outlast it, and
    # end well before the next measurement (300/HOUR_SCALE s).
    gw = paired_gateway(gateways, tmp_path, private_bus, [A], nightscout, args=("--quiet-after", "0.5", "--time-scale", scale))
    gw.start()
    started = time.monotonic()
    wait_until("12 measurements downloaded", lambda: len(gw.sequences(A)) == 17, timeout=hour + 30)
    elapsed = time.monotonic() - started
    assert gw.sequences(A) == meter_records(private_bus, A) == list(range(1, 18))
    # Wait on the daemon's own state, not the server's count: the server stores an entry before the
    # daemon has read the answer and acknowledged it.
    wait_until("every reading acknowledged", lambda: gw.status()["destinations"][0]["uploaded"] == 17, timeout=20)
    assert_uploaded_exactly_once(gw, nightscout)
    state = gw.state()
    # About one connection per burst (the quiet period covers the rest of it); a burst missed under load
    # is caught up by the next one.
    assert 6 <= state["counters"]["connects"] <= 14
    # The goal (under 100 ms from advertisement to Connect) is measured by the soak benchmark; here, on a
    # shared loaded machine, only that it is reported and far below a burst.
    assert state["last_reaction_ms"] is not None and state["last_reaction_ms"] < 500
    status = gw.status()
    assert status["daemon"]["running"] is True
    assert status["meters"][0]["highest_sequence"] == 17
    assert status["destinations"][0]["pending"] == 0
    assert status["destinations"][0]["last_success_at"] is not None
    wait_until("the metrics file", lambda: 'glucose_gateway_uploaded_total{destination="nightscout"} 17' in open(gw.metrics).read(),
               timeout=5)
    # The last measurement is downloaded soon after the meter makes it, not minutes later.
    assert elapsed < hour + 20
    assert gw.stop() == 0


def test_two_meters_and_the_receiver_down_then_back(private_bus, standin, meter_file, tmp_path, gateways, nightscout):
    standin("--time-scale", "20", "--meter", meter_file(meter(A, count=10)), "--meter", meter_file(meter(B, count=30, first=100, day=6)))
    # Upload backoff at 1/60: base 0.5 s, cap 15 s (15 min in the product).
    gw = paired_gateway(gateways, tmp_path, private_bus, [A, B], nightscout, args=("--quiet-after", "0.3", "--time-scale", "60"))
    gw.start()

    def advertise_until(what, condition, timeout):
        # The meters advertise until the condition holds, however long a loaded machine takes to get there
        # (a burst of a few real seconds can end before a busy daemon connects); then they stop.
        for address in (A, B):
            control(private_bus, "Advertise", address, 3600.0)
        try:
            return wait_until(what, condition, timeout=timeout)
        finally:
            for address in (A, B):
                control(private_bus, "Advertise", address, 0.0)

    advertise_until("both meters downloaded", lambda: len(gw.sequences(A)) == 10 and len(gw.sequences(B)) == 30, timeout=90)
    wait_until("uploaded", lambda: len(nightscout.entries()) == 40, timeout=60)

    nightscout.set_mode(mode="down")
    for _ in range(3):
        control(private_bus, "AddGeneratedRecord", A)
        control(private_bus, "AddGeneratedRecord", B)
    advertise_until("new readings stored while the receiver is down",
                    lambda: len(gw.sequences(A)) == 13 and len(gw.sequences(B)) == 33, timeout=90)

    def failing():
        d = gw.status()["destinations"][0]
        return d if d["pending"] == 6 and d["last_error"] and d["last_error"]["code"] in (1001, 1002) else None
    down = wait_until("the error code in status", failing, timeout=60)
    assert down["oldest_unsent_age_seconds"] is not None
    wait_until("the code in the metrics file", lambda: "glucose_gateway_network_state 100" in open(gw.metrics).read(), timeout=30)
    assert len(nightscout.entries()) == 40

    nightscout.set_mode(mode="up")
    # The replay comes from the long-term backoff running out (its cap is 15 s at this scale; the bound
    # itself is tested with a manual clock in the Swift tests), not from a new reading: none is added.
    wait_until("the replay", lambda: len(nightscout.entries()) == 46, timeout=120)
    assert len(gw.sequences(A)) == 13 and len(gw.sequences(B)) == 33
    assert_uploaded_exactly_once(gw, nightscout)
    wait_until("status clean", lambda: gw.status()["destinations"][0]["pending"] == 0, timeout=30)
    assert gw.stop() == 0


def test_bluetoothd_restart_and_adapter_replug(private_bus, standin, meter_file, tmp_path, gateways):
    standin("--time-scale", "20", "--meter", meter_file(meter(A, count=3)))
    gw = paired_gateway(gateways, tmp_path, private_bus, [A])
    gw.start()
    control(private_bus, "Advertise", A, 20.0)
    wait_until("first download", lambda: gw.sequences(A) == [1, 2, 3], timeout=20)

    control(private_bus, "RestartBluetoothd")
    wait_until("the restart noticed", lambda: gw.state()["counters"]["bluetoothd_restarts"] == 1, timeout=20)
    wait_until("watching again", lambda: gw.state()["radio"]["watching"] == "discovery", timeout=20)
    control(private_bus, "AddGeneratedRecord", A)
    wait_until("download after the restart", lambda: gw.sequences(A) == [1, 2, 3, 4], timeout=20)

    control(private_bus, "RemoveAdapter")
    wait_until("no adapter", lambda: gw.state()["radio"]["adapter"] is None, timeout=20)
    assert gw.status()["bluetooth"]["adapter"] is None
    control(private_bus, "AddAdapter")
    wait_until("watching the new adapter", lambda: gw.state()["radio"]["watching"] == "discovery", timeout=20)
    control(private_bus, "AddGeneratedRecord", A)
    wait_until("download after the re-plug", lambda: gw.sequences(A) == [1, 2, 3, 4, 5], timeout=20)
    log = gw.log()
    assert "waiting for one to be plugged in" in log
    assert gw.stop() == 0


def test_sigterm_mid_download_then_restart(private_bus, standin, meter_file, tmp_path, gateways):
    standin("--meter", meter_file(meter(A, count=300, faults={"notificationDelayMs": 15})))
    gw = paired_gateway(gateways, tmp_path, private_bus, [A])
    gw.start()
    control(private_bus, "Advertise", A, 120.0)
    wait_until("a download under way", lambda: len(gw.sequences(A)) >= 20, timeout=20)
    stopped = time.monotonic()
    gw.signal(signal.SIGTERM)
    code = gw.process.wait(timeout=10)
    took = time.monotonic() - stopped
    assert code == 0
    assert took < 5
    kept = gw.sequences(A)
    assert 20 <= len(kept) < 300
    assert kept == list(range(1, len(kept) + 1))
    log = gw.log()
    assert "stopping: 1 download(s) to end" in log
    assert "interrupted (gateway stopping)" in log
    assert gw.state()["phase"] == "stopped"

    gw.start()
    control(private_bus, "Advertise", A, 120.0)
    wait_until("the rest after the restart", lambda: len(gw.sequences(A)) == 300, timeout=40)
    assert gw.sequences(A) == list(range(1, 301))
    assert gw.stop() == 0


def test_sighup_with_a_bad_config_keeps_the_running_one(private_bus, standin, meter_file, tmp_path, gateways):
    standin("--meter", meter_file(meter(A, count=2)))
    gw = paired_gateway(gateways, tmp_path, private_bus, [A])
    gw.start()
    good = open(gw.config).read()
    with open(gw.config, "a") as f:
        f.write("unknown_key = 1\n")
    gw.signal(signal.SIGHUP)
    wait_until("the refusal", lambda: gw.state().get("last_reload_error"), timeout=10)
    # The problem names the line and the section, never what the file says there.
    assert gw.state()["last_reload_error"].endswith(":5: unknown key in [gateway]")
    assert gw.process.poll() is None
    assert "configuration not reloaded, keeping the running one" in gw.log()
    # `status` with a valid config shows the refusal too.
    good_copy = str(tmp_path / "good.toml")
    open(good_copy, "w").write(good)
    status = json.loads(gw.command("--config", good_copy, "status", "--json", prefix=False).stdout)
    assert status["daemon"]["last_reload_error"].endswith(":5: unknown key in [gateway]")

    open(gw.config, "w").write(good)
    gw.signal(signal.SIGHUP)
    wait_until("the reload", lambda: gw.state()["counters"]["reloads"] == 1, timeout=10)
    assert gw.state()["last_reload_error"] is None
    control(private_bus, "Advertise", A, 60.0)
    wait_until("still downloading", lambda: gw.sequences(A) == [1, 2], timeout=20)
    assert gw.stop() == 0


def test_sighup_with_an_unquoted_secret_never_shows_it(private_bus, standin, meter_file, tmp_path, gateways):
    standin("--meter", meter_file(meter(A, count=1)))
    gw = paired_gateway(gateways, tmp_path, private_bus, [A])
    gw.start()
    good = open(gw.config).read()
    # Nightscout's environment-variable spelling, unquoted: the parser must not echo the value.
    with open(gw.config, "a") as f:
        f.write("[nightscout]\nurl = \"https://ns.example\"\nAPI_SECRET = s3cret-value-0451\n")
    gw.signal(signal.SIGHUP)
    wait_until("the refusal", lambda: gw.state().get("last_reload_error"), timeout=10)
    assert gw.process.poll() is None
    shown = [gw.state()["last_reload_error"], gw.log(), open(gw.database + ".daemon.json").read()]
    bad = gw.command("status", check=False)   # the bad file itself: [nightscout] ignored with a warning
    assert bad.returncode == 0, bad.stderr
    shown += [bad.stdout, bad.stderr]
    good_copy = str(tmp_path / "good.toml")
    open(good_copy, "w").write(good)
    shown.append(gw.command("--config", good_copy, "status", prefix=False).stdout)
    shown.append(gw.command("--config", good_copy, "status", "--json", prefix=False).stdout)
    for text in shown:
        assert "s3cret" not in text and "0451" not in text, text
    assert gw.stop() == 0


def test_kill_9_at_random_moments_loses_and_duplicates_nothing(private_bus, standin, meter_file, tmp_path, gateways, nightscout):
    standin("--time-scale", "50", "--meter",
            meter_file(meter(A, count=40, advertising="always", newRecords={"everySeconds": 10, "limit": 60},
                             faults={"notificationDelayMs": 5})))
    gw = paired_gateway(gateways, tmp_path, private_bus, [A], nightscout, args=("--quiet-after", "0.1", "--time-scale", "50"))
    rng = random.Random(int(os.environ.get("GG_SEED", "7")))
    for cycle in range(20):
        gw.start()
        time.sleep(rng.uniform(0.05, 1.2))
        gw.kill9()
        stored = gw.sequences(A)
        assert stored == list(range(1, len(stored) + 1)), "gap or duplicate after cycle %d" % cycle
    gw.start()
    # The meter stops measuring after 60 new records; then everything it holds must be here once.
    wait_until("the meter's last record", lambda: len(meter_records(private_bus, A)) == 100, timeout=30)
    wait_until("caught up", lambda: gw.sequences(A) == list(range(1, 101)), timeout=30)
    wait_until("all uploaded", lambda: len(nightscout.entries()) == gw.query("SELECT count(*) FROM reading")[0][0], timeout=30)
    assert_uploaded_exactly_once(gw, nightscout)
    assert gw.stop() == 0


def test_profile_mode_lets_bluetoothd_connect_the_meter(private_bus, standin, meter_file, tmp_path, gateways):
    """scan_mode = "profile": a GattProfile1 for 0x1808, no discovery; the stand-in connects the bonded meter
    when it advertises, and the daemon downloads over that link."""
    standin("--time-scale", "20", "--meter", meter_file(meter(A, count=4)))
    # Without a destination, extra_config continues the [gateway] section.
    gw = Gateway(tmp_path, private_bus, extra_config='scan_mode = "profile"\n', args=("--quiet-after", "1", "--time-scale", "20"))
    gateways.append(gw)
    control(private_bus, "Advertise", A, 60.0)
    gw.pair(A, PIN)
    control(private_bus, "ClearCallLog")
    gw.start()
    wait_until("watching by profile", lambda: gw.state()["radio"]["watching"] == "profile", timeout=10)
    control(private_bus, "Advertise", A, 20.0)
    wait_until("the download", lambda: gw.sequences(A) == [1, 2, 3, 4], timeout=20)
    assert gw.state()["radio"]["discovering"] is False
    calls = control(private_bus, "CallLog")
    assert "GattManager1.RegisterApplication" in calls
    assert "StartDiscovery" not in calls
    assert gw.stop() == 0


def test_a_link_left_by_a_killed_daemon_is_closed_at_start(private_bus, standin, meter_file, tmp_path, gateways):
    standin("--meter", meter_file(meter(A, count=200, faults={"notificationDelayMs": 15})))
    gw = paired_gateway(gateways, tmp_path, private_bus, [A])
    gw.start()
    control(private_bus, "Advertise", A, 120.0)
    wait_until("a download under way", lambda: len(gw.sequences(A)) >= 10, timeout=20)
    gw.kill9()
    # bluetoothd keeps the link of a client that died (bluez #89); the next start closes it first.
    gw.start()
    wait_until("the stale link closed", lambda: "closed a connection left from before" in gw.log(), timeout=10)
    control(private_bus, "Advertise", A, 120.0)
    wait_until("the rest", lambda: gw.sequences(A) == list(range(1, 201)), timeout=40)
    assert gw.stop() == 0


def test_started_before_bluetoothd_and_before_the_adapter(private_bus, standin, meter_file, tmp_path, gateways):
    state = str(tmp_path / "bonds.json")
    description = meter_file(meter(A, count=3))
    first = standin("--state", state, "--meter", description)
    gw = paired_gateway(gateways, tmp_path, private_bus, [A])
    first.stop()

    gw.start()
    wait_until("waiting for bluetoothd", lambda: gw.state()["radio"]["bluetoothd_running"] is False, timeout=10)
    assert "bluetoothd is not running; waiting for it" in gw.log()
    assert gw.state()["radio"]["watching"] is None
    assert gw.status()["bluetooth"]["bluetoothd_running"] is False

    standin("--state", state, "--meter", description)
    control(private_bus, "RemoveAdapter")
    wait_until("bluetoothd seen, no adapter", lambda: gw.state()["radio"]["bluetoothd_running"] is True
               and gw.state()["radio"]["adapter"] is None, timeout=20)
    control(private_bus, "AddAdapter")
    wait_until("watching", lambda: gw.state()["radio"]["watching"] == "discovery", timeout=20)
    control(private_bus, "Advertise", A, 30.0)
    wait_until("the download", lambda: gw.sequences(A) == [1, 2, 3], timeout=20)
    assert gw.stop() == 0


def test_a_meter_another_process_is_downloading_is_left_alone_until_it_is_done(private_bus, standin, meter_file, tmp_path, gateways):
    """A manual `sync` holds the meter's lock file; the daemon must not start a second procedure on it."""
    import fcntl
    standin("--time-scale", "20", "--meter", meter_file(meter(A, count=5)))
    gw = paired_gateway(gateways, tmp_path, private_bus, [A])
    lock_path = "%s.meter-%s.lock" % (gw.database, A.replace(":", ""))
    fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        gw.start()
        control(private_bus, "Advertise", A, 400.0)
        busy = "another glucose-gateway process is downloading from this meter"
        wait_until("the daemon saw the meter busy", lambda: busy in gw.log(), timeout=20)
        # The other download goes on and the daemon keeps checking, without touching the meter: its next
        # look (a second busy verdict, after the retry delay) is the event that it moved on.
        wait_until("the daemon looked again", lambda: gw.log().count(busy) >= 2, timeout=30)
        assert gw.sequences(A) == []
        assert "connected" not in gw.log()
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    wait_until("downloaded once the lock is free", lambda: gw.sequences(A) == [1, 2, 3, 4, 5], timeout=30)
    assert gw.stop() == 0
