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


def test_a_failed_scenarios_failing_lines_are_repeated_after_the_summary(tmp_path):
    # The runner itself, beside a stand-in for its VM library and two scenarios: one passes, one prints
    # a failing check far above the end of its output and fails.
    (tmp_path / "real-bluez" / "scenarios").mkdir(parents=True)
    (tmp_path / "test-real-bluez.sh").write_text(RUNNER.read_text())
    (tmp_path / "real-bluez" / "lib.sh").write_text(
        "RB_SKIP=77\nrb_gateway_bin() { echo /bin/true; }\nrb_prepare() { return 0; }\nrb_kernel_has_vhci() { return 0; }\n")
    scenarios = tmp_path / "real-bluez" / "scenarios"
    (scenarios / "good.sh").write_text("# rb-about: passes\n# rb-ci: yes\necho '[vm] RB-CHECK fine: ok'\n")
    (scenarios / "bad.sh").write_text(
        "# rb-about: fails\n# rb-ci: yes\n"
        "echo '[vm] RB-CHECK the daemon stored all 5 readings: FAIL (exit 1, wanted 0)'\n"
        "for i in $(seq 300); do echo \"[vm] RB-NOTE line $i\"; done\n"
        "echo '[vm] RB-CHECK stopped cleanly: ok'\nexit 3\n")
    result = subprocess.run(["bash", str(tmp_path / "test-real-bluez.sh"), "--ci"], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    tail = result.stdout.splitlines()[-8:]
    # Under --ci every run is named SCENARIO@RELEASE, as CI runs a scenario on several releases.
    assert any(line.startswith("bad@bookworm ") and "FAILED (exit 3)" in line for line in tail), tail
    assert "--- bad@bookworm (exit 3):" in tail
    assert "    [vm] RB-CHECK the daemon stored all 5 readings: FAIL (exit 1, wanted 0)" in tail
    assert not any("RB-NOTE" in line or "stopped cleanly" in line or "good" in line.split(":")[0] for line in tail
                   if line.startswith("    [")), tail
    assert tail[-1] == "1 passed, 1 failed"
