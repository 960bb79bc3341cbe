"""A meter that forgets its bond (a reset, or paired with another device) while the gateway keeps its key:
the daemon against the BlueZ stand-in, whose ForgetBond plays what BlueZ does then (each connection refused
at encryption, Disconnected reason Authentication, Paired/Bonded kept). The meter's state becomes
re-pair needed in `status --json`, the metrics file and the on_meter_error hook (once, with the meter's
address); the daemon stops connecting to it; `sync` names the fix; `pair` clears it."""
import json

import pytest

from gg_daemon import Gateway, control, gateways, wait_until  # noqa: F401 (fixtures)
from test_daemon_run import A, B, PIN, meter


def connects(bus, address):
    path = "dev_" + address.replace(":", "_")
    return [line for line in control(bus, "CallLog").splitlines() if "org.bluez.Device1.Connect " in line and path in line]


# BlueZ 5.83+ (a Disconnected signal, the stale device removed when asked), and BlueZ 5.82 (Raspberry Pi OS
# trixie: no signal, and after the meter refused the key RemoveDevice leaves the device paired until its
# next link ends).
BLUEZ_SHAPES = {"5.83": (), "5.82": ("--no-disconnected-signal", "--deferred-removal")}


@pytest.mark.parametrize("bluez", sorted(BLUEZ_SHAPES))
def test_lost_bond_is_a_state_until_the_meter_is_paired_again(private_bus, standin, meter_file, tmp_path, gateways, bluez):
    standin("--time-scale", "20", "--meter", meter_file(meter(A, count=3)), "--meter", meter_file(meter(B, count=2, first=10, day=6)),
            *BLUEZ_SHAPES[bluez])
    hook = tmp_path / "meter-alert.txt"
    gw = Gateway(tmp_path, private_bus, args=("--quiet-after", "0.3", "--time-scale", "20"), extra_config=(
        'on_meter_error = ["/bin/sh", "-c", "echo $GATEWAY_ERROR_CODE $GATEWAY_METER \\"$GATEWAY_ERROR_MESSAGE\\" >> %s"]\n' % hook))
    gateways.append(gw)
    for address in (A, B):
        control(private_bus, "Advertise", address, 3600.0)
        gw.pair(address, PIN)
    gw.start()
    wait_until("the first downloads", lambda: gw.sequences(A) == [1, 2, 3] and gw.sequences(B) == [10, 11], timeout=30)
    wait_until("the sessions end", lambda: gw.state()["active_sessions"] == [], timeout=20)

    control(private_bus, "ForgetBond", A)
    control(private_bus, "AddGeneratedRecord", A)
    control(private_bus, "ClearCallLog")
    control(private_bus, "Advertise", A, 3600.0)
    # The daemon's next session finds the bond lost.
    wait_until("re-pair needed", lambda: gw.status()["meters"][0]["state"] == "re-pair-needed", timeout=30)
    status = gw.status()
    assert status["meters"][0]["bond_lost_at"] is not None and status["meters"][1]["state"] == "ok"
    assert status["problems"] == ["meter %s: re-pair needed (the meter lost its bond with this gateway); run: glucose-gateway pair %s --pin PIN" % (A, A)]
    listed = json.loads(gw.command("meters", "--json").stdout)
    assert [m["state"] for m in listed] == ["re-pair-needed", "ok"]
    assert "%s: re-pair needed (the meter lost its bond); run: glucose-gateway pair %s --pin PIN" % (A, A) in gw.command("meters").stdout
    text = gw.command("status").stdout
    assert text.startswith("PROBLEM: meter %s: re-pair needed" % A)
    assert "re-pair needed since" in text
    wait_until("the meter alert", lambda: hook.exists() and hook.read_text().strip() != "", timeout=10)
    wait_until("the metrics file", lambda: "glucose_gateway_meters_repair_needed 1\n" in open(gw.metrics).read(), timeout=10)
    state = gw.state()
    assert state["repair_needed"] == [A]
    # One session's refusals are no verdict: a later session, some seconds on, confirms them.
    sessions = state["counters"]["failures"].get("bond-lost")
    assert sessions >= 2
    refused = len(connects(private_bus, A))
    assert refused == 3 * sessions

    # Both meters advertise again: B is downloaded (the daemon is at work), A is left alone.
    for address in (A, B):
        control(private_bus, "Advertise", address, 3600.0)
    control(private_bus, "AddGeneratedRecord", B)
    wait_until("B's new reading", lambda: gw.sequences(B) == [10, 11, 12], timeout=30)
    assert len(connects(private_bus, A)) == refused
    lines = hook.read_text().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("2003 %s %s: re-pair needed: " % (A, A))
    assert "glucose-gateway pair %s --pin PIN" % A in lines[0]
    assert gw.sequences(A) == [1, 2, 3]

    # A manual sync tries once more, fails with one line naming the fix and exit 69 (meter unavailable).
    synced = gw.command("sync", A, check=False)
    assert synced.returncode == 69, synced.stdout + synced.stderr
    errors = [line for line in synced.stderr.splitlines() if line.startswith("glucose-gateway sync:")]
    assert len(errors) == 1, synced.stdout + synced.stderr
    assert errors[0].startswith("glucose-gateway sync: %s: re-pair needed: " % A)
    assert errors[0].endswith("pair it again: glucose-gateway pair %s --pin PIN" % A)

    # Pairing again removes the stale key, pairs with the PIN, and clears the state; the daemon downloads.
    control(private_bus, "Advertise", A, 3600.0)
    paired = gw.pair(A, PIN)
    assert "lost its bond" in paired.stderr
    control(private_bus, "Advertise", A, 3600.0)
    wait_until("the new reading", lambda: gw.sequences(A) == [1, 2, 3, 4], timeout=30)
    status = gw.status()
    assert status["meters"][0]["state"] == "ok" and status["problems"] == []
    wait_until("the metrics file cleared", lambda: "glucose_gateway_meters_repair_needed 0\n" in open(gw.metrics).read(), timeout=10)
    assert len(hook.read_text().splitlines()) == 1
    assert gw.stop() == 0
