"""The real-stack runner's own command line: what it says before any VM boots."""
import os
import pathlib
import subprocess

REPO = pathlib.Path(__file__).resolve().parent.parent
RUNNER = REPO / "scripts" / "test-real-bluez.sh"


def run(*args, env=None):
    return subprocess.run(["bash", str(RUNNER), *args], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, **(env or {})))


def test_without_a_gateway_binary_it_stops_at_once_with_one_line(tmp_path):
    missing = tmp_path / "no-such-gateway"
    result = run("pair", env={"RB_GATEWAY_BIN": str(missing)})
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and str(missing) in lines[0] and "swift build" in lines[0], result.stderr
    assert "scenario" not in result.stderr


def test_list_needs_no_binary_and_names_every_scenario(tmp_path):
    result = run("--list", env={"RB_GATEWAY_BIN": str(tmp_path / "none")})
    assert result.returncode == 0, result.stderr
    names = {line.split()[0] for line in result.stdout.splitlines() if line and not line.startswith(" ")}
    expected = {p.stem for p in (REPO / "scripts" / "real-bluez" / "scenarios").glob("*.sh")}
    assert names == expected and "pair" in names


def test_unknown_options_and_scenarios_are_usage_errors():
    bad_option = run("--fast")
    assert bad_option.returncode == 64 and "--fast" in bad_option.stderr
    bad_scenario = run("no-such-scenario")
    assert bad_scenario.returncode == 64 and "no-such-scenario" in bad_scenario.stderr
