"""`glucose-gateway run` and a second process writing to its database: a manual `sync` while the daemon
runs leaves its upload to the daemon (which holds the upload lock), so the daemon must notice rows that
another process committed and upload them, without waiting for a download of its own.

Real parts: the daemon, the BlueZ stand-in on a private bus, a loopback Nightscout double, the SQLite file.
"""
import os
import subprocess
import time
from pathlib import Path


from gg_daemon import Gateway, control, gateways, nightscout, wait_until  # noqa: F401 (fixtures)

A = "C0:26:DA:01:02:03"
PIN = "123456"


def meter(address, count):
    records = [{"sequence": 1 + i, "time": "2024-03-05T06:%02d:00" % i, "timeOffset": 0, "mgdl": 90 + i} for i in range(count)]
    return {"address": address, "name": "meter+" + address[-5:].replace(":", ""), "pin": PIN, "bonding": True,
            "records": records, "advertising": "off"}


def test_readings_a_manual_sync_stores_are_uploaded_by_the_running_daemon(private_bus, standin, meter_file, tmp_path,
                                                                          gateways, nightscout):
    sim = standin("--verbose", "--time-scale", "20", "--meter", meter_file(meter(A, 6)))
    gw = Gateway(tmp_path, private_bus, nightscout_url=nightscout.url, secret=nightscout.secret,
                 args=("--quiet-after", "0.3", "--time-scale", "20"))
    gateways.append(gw)
    control(private_bus, "Advertise", A, 20.0)
    gw.pair(A, PIN)
    # The pairing burst (20 simulated seconds) is over: the meter is silent until it is told to advertise.
    wait_until("the pairing burst to end", lambda: "meter %s advertising off" % A in Path(sim.log_path).read_text())
    control(private_bus, "ClearCallLog")

    # The sync takes the meter's lock before it looks for the meter, and the daemon starts after it: when
    # the meter advertises, the daemon finds it busy and leaves it to the sync.
    sync = subprocess.Popen(gw.command_line("sync", A, "--wait", "20"), env=gw.env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        lock = "%s.meter-%s.lock" % (gw.database, A.replace(":", ""))
        wait_until("the sync to hold the meter", lambda: os.path.exists(lock), timeout=10)
        wait_until("the sync to look for the meter",
                   lambda: "org.bluez.Adapter1.StartDiscovery" in control(private_bus, "CallLog"), timeout=10)
        gw.start()
        control(private_bus, "Advertise", A, 20.0)
        out, err = sync.communicate(timeout=60)
    finally:
        if sync.poll() is None:
            sync.kill()
            sync.wait()
    assert sync.returncode == 0, out + err
    assert A + ": 6 new readings" in out
    assert "uploads are left to the running gateway daemon" in out
    assert gw.sequences(A) == [1, 2, 3, 4, 5, 6]
    committed_ms = gw.query("SELECT max(created_at) FROM outbox")[0][0]

    def uploaded():
        return len(nightscout.entries()) == 6 and time.time()

    seen = wait_until("the daemon to upload what the sync stored", uploaded, timeout=15, interval=0.02)
    # The goal is 2 s from the sync's commit; reported here (pytest -s), not asserted tightly.
    print("\nupload of another process's readings: %d ms after its commit" % (seen * 1000 - committed_ms))
    # The server stores the entries before the daemon has read its answer: wait on the daemon's own state.
    wait_until("the daemon to acknowledge them",
               lambda: gw.query("SELECT count(*) FROM outbox WHERE state = 'acknowledged'")[0][0] == 6, timeout=10)
    assert "another process wrote to the database" in gw.log()
    wait_until("status clean", lambda: gw.status()["destinations"][0]["pending"] == 0, timeout=10)
    assert gw.stop() == 0


def test_a_row_queued_by_another_writer_is_uploaded_and_the_daemon_own_writes_do_not_loop(private_bus, standin, meter_file,
                                                                                        tmp_path, gateways, nightscout):
    """A writer that is not the gateway (here the sqlite3 shell re-queueing an acknowledged upload, as an
    operator would) is noticed the same way; afterwards the daemon settles: its own writes fire its watch
    but never count as another process's."""
    standin("--time-scale", "20", "--meter", meter_file(meter(A, 3)))
    gw = Gateway(tmp_path, private_bus, nightscout_url=nightscout.url, secret=nightscout.secret,
                 args=("--quiet-after", "0.3", "--time-scale", "20"))
    gateways.append(gw)
    control(private_bus, "Advertise", A, 20.0)
    gw.pair(A, PIN)
    gw.start()
    control(private_bus, "Advertise", A, 20.0)
    wait_until("downloaded and uploaded", lambda: len(nightscout.entries()) == 3, timeout=30)
    # Re-queue only once the daemon has acknowledged all three: a row still in flight would be acknowledged
    # over the re-queue and never sent again.
    wait_until("acknowledged", lambda: gw.query("SELECT count(*) FROM outbox WHERE state = 'acknowledged'")[0][0] == 3,
               timeout=10)
    posts = nightscout.stats()["elements_received"]

    shell = subprocess.run(["sqlite3", gw.database,
                            "PRAGMA busy_timeout = 5000; UPDATE outbox SET state = 'pending' WHERE id = (SELECT min(id) FROM outbox);"],
                           capture_output=True, text=True, timeout=30)
    assert shell.returncode == 0, shell.stderr
    wait_until("the re-queued row sent again", lambda: nightscout.stats()["elements_received"] == posts + 1, timeout=15, interval=0.02)
    wait_until("acknowledged again", lambda: gw.query("SELECT count(*) FROM outbox WHERE state = 'acknowledged'")[0][0] == 3,
               timeout=10)
    assert gw.log().count("another process wrote to the database") == 1
    # A second outside write that queues nothing and leaves every row as it was: once the daemon has
    # noticed it, it has handled every change before it, its own writes of the resend included.
    shell = subprocess.run(["sqlite3", gw.database,
                            "PRAGMA busy_timeout = 5000; BEGIN IMMEDIATE; CREATE TABLE probe (x); DROP TABLE probe; COMMIT;"],
                           capture_output=True, text=True, timeout=30)
    assert shell.returncode == 0, shell.stderr
    wait_until("the second outside write noticed", lambda: gw.log().count("another process wrote to the database") >= 2,
               timeout=15)
    assert nightscout.stats()["elements_received"] == posts + 1
    assert gw.log().count("another process wrote to the database") == 2
    assert len(nightscout.entries()) == 3
    assert gw.stop() == 0
