"""`pair` against the stand-in playing each pairing method a meter may use: passkey entry (LE Secure
Connections and legacy), Just Works, numeric comparison (on a terminal, without one, with --confirm), a
meter that starts pairing itself, and the failures (a meter that cancels, one that never answers), each
with its own one-line message and exit status. The PIN never appears in what `pair` prints."""
import json
import os
import pty
import select
import subprocess
import time

from gg_download import Gateway, meter

ADDRESS = "C0:26:DA:01:02:03"
PIN = "123456"


def paired(gw):
    return [m["address"] for m in json.loads(gw.run("meters", "--json").stdout)]


def pair_meter(private_bus, standin, meter_file, tmp_path, pairing, *args):
    standin("--time-scale", "30", "--meter", meter_file(meter(pin=PIN, pairing=pairing)))
    gw = Gateway(private_bus, tmp_path)
    return gw, gw.run("pair", ADDRESS, "--wait", "10", *args)


def one_line(result):
    """The one line that says what went wrong (after the progress line saying what `pair` waits for)."""
    lines = [l for l in result.stderr.strip().splitlines() if not l.startswith("waiting for ")]
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_secure_connections_passkey_entry_pairs_with_the_pin(private_bus, standin, meter_file, tmp_path):
    gw, result = pair_meter(private_bus, standin, meter_file, tmp_path, "passkey-entry", "--pin", PIN)
    assert result.returncode == 0, result.stderr
    assert "paired %s (" % ADDRESS in result.stdout and " by passkey entry, " in result.stdout
    assert PIN not in result.stdout + result.stderr
    assert paired(gw) == [ADDRESS]


def test_legacy_passkey_entry_pairs_with_the_pin(private_bus, standin, meter_file, tmp_path):
    gw, result = pair_meter(private_bus, standin, meter_file, tmp_path, "legacy-passkey-entry", "--pin", PIN)
    assert result.returncode == 0, result.stderr
    assert " by passkey entry, " in result.stdout
    assert PIN not in result.stdout + result.stderr
    assert paired(gw) == [ADDRESS]


def test_just_works_pairs_without_a_pin_and_says_so(private_bus, standin, meter_file, tmp_path):
    gw, result = pair_meter(private_bus, standin, meter_file, tmp_path, "just-works")
    assert result.returncode == 0, result.stderr
    assert " by Just Works, " in result.stdout
    assert "nothing proved that the device is your meter" in result.stderr
    assert paired(gw) == [ADDRESS]


def test_a_pin_given_to_a_just_works_meter_is_not_used(private_bus, standin, meter_file, tmp_path):
    gw, result = pair_meter(private_bus, standin, meter_file, tmp_path, "just-works", "--pin", "654321")
    assert result.returncode == 0, result.stderr
    assert "the PIN given was not used" in result.stderr
    assert "654321" not in result.stdout + result.stderr


def test_a_meter_that_shows_a_pin_without_pin_given_is_a_usage_error(private_bus, standin, meter_file, tmp_path):
    gw, result = pair_meter(private_bus, standin, meter_file, tmp_path, "passkey-entry")
    assert result.returncode == 64, result.stderr
    line = one_line(result)
    assert "needs the PIN the meter shows" in line and "--pin PIN" in line
    assert PIN not in result.stdout + result.stderr
    assert paired(gw) == []


def test_numeric_comparison_without_a_terminal_is_refused_unless_confirmed(private_bus, standin, meter_file, tmp_path):
    gw, result = pair_meter(private_bus, standin, meter_file, tmp_path, "numeric-comparison")
    assert result.returncode == 64, result.stderr
    line = one_line(result)
    assert "compare six digits" in line and "--confirm" in line
    assert paired(gw) == []
    # --confirm prints the digits both screens show and accepts them.
    confirmed = gw.run("pair", ADDRESS, "--wait", "10", "--confirm")
    assert confirmed.returncode == 0, confirmed.stderr
    assert "the meter should show %s" % PIN in confirmed.stdout
    assert " by numeric comparison, " in confirmed.stdout
    assert paired(gw) == [ADDRESS]


def test_numbers_refused_on_the_meter(private_bus, standin, meter_file, tmp_path):
    gw, result = pair_meter(private_bus, standin, meter_file, tmp_path,
                            {"method": "numeric-comparison", "answer": "cancels"}, "--confirm")
    assert result.returncode == 1, result.stderr
    assert "the meter did not accept the numbers" in one_line(result)
    assert paired(gw) == []


def test_a_meter_that_cancels(private_bus, standin, meter_file, tmp_path):
    gw, result = pair_meter(private_bus, standin, meter_file, tmp_path,
                            {"method": "passkey-entry", "answer": "cancels"}, "--pin", PIN)
    assert result.returncode == 1, result.stderr
    line = one_line(result)
    assert "refused or cancelled the pairing" in line and "wrong PIN" not in line
    assert PIN not in result.stdout + result.stderr


def test_a_meter_that_never_answers(private_bus, standin, meter_file, tmp_path):
    gw, result = pair_meter(private_bus, standin, meter_file, tmp_path,
                            {"method": "passkey-entry", "answer": "never-answers"}, "--pin", PIN)
    assert result.returncode == 69, result.stderr
    line = one_line(result)
    assert "did not answer in time" in line and "wrong PIN" not in line


def test_wrong_pin_on_a_legacy_meter(private_bus, standin, meter_file, tmp_path):
    gw, result = pair_meter(private_bus, standin, meter_file, tmp_path, "legacy-passkey-entry", "--pin", "654321")
    assert result.returncode == 1, result.stderr
    assert "wrong PIN" in one_line(result)
    assert "654321" not in result.stdout + result.stderr


def test_a_meter_that_starts_pairing_itself(private_bus, standin, meter_file, tmp_path):
    gw, result = pair_meter(private_bus, standin, meter_file, tmp_path,
                            {"method": "just-works", "startsPairing": True})
    assert result.returncode == 0, result.stderr
    assert " by Just Works, " in result.stdout
    assert paired(gw) == [ADDRESS]


def run_on_terminal(gw, args, answer, timeout=30):
    """Runs `pair` with a pseudo-terminal as its standard input and error; types `answer` when asked."""
    controller, terminal = pty.openpty()
    process = subprocess.Popen(gw.command(*args), env=gw.env, stdin=terminal, stderr=terminal,
                               stdout=subprocess.PIPE, text=True)
    os.close(terminal)
    seen = b""
    deadline = time.monotonic() + timeout
    answered = False
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(controller, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                seen += chunk
                if not answered and b"[y/N]" in seen:
                    os.write(controller, answer.encode() + b"\n")
                    answered = True
            if process.poll() is not None:
                break
        stdout = process.communicate(timeout=max(1, deadline - time.monotonic()))[0]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(controller)
    return process.returncode, stdout, seen.decode(errors="replace")


def test_numeric_comparison_on_a_terminal_asks_the_person(private_bus, standin, meter_file, tmp_path):
    standin("--meter", meter_file(meter(pin=PIN, pairing="numeric-comparison")))
    gw = Gateway(private_bus, tmp_path)
    status, stdout, terminal = run_on_terminal(gw, ["pair", ADDRESS, "--wait", "10"], "n")
    assert "does the meter show %s?" % PIN in terminal
    assert status == 1, terminal
    assert "the numbers did not match" in terminal
    assert paired(gw) == []
    status, stdout, terminal = run_on_terminal(gw, ["pair", ADDRESS, "--wait", "10"], "y")
    assert status == 0, terminal
    assert " by numeric comparison, " in stdout
    assert paired(gw) == [ADDRESS]
