"""`glucose-gateway config check`: exit statuses, PATH:LINE problems, config path precedence, no secrets."""
import os
import pathlib
import subprocess

import pytest

BIN = os.environ.get("GLUCOSE_GATEWAY_BIN", str(pathlib.Path(__file__).resolve().parents[1] / ".build/debug/glucose-gateway"))
EXAMPLE = pathlib.Path(__file__).resolve().parents[1] / "config" / "glucose-gateway.toml"


def run(*args, env=None):
    full_env = {k: v for k, v in os.environ.items() if k != "GLUCOSE_GATEWAY_CONFIG"}
    full_env.update(env or {})
    return subprocess.run([BIN, *args], capture_output=True, text=True, timeout=30, env=full_env)


def test_example_config_is_valid():
    r = run("config", "check", str(EXAMPLE))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"{EXAMPLE}: ok\n")
    assert "  retry_count: 3\n" in r.stdout
    assert "no upload destination is enabled" in r.stdout


def test_every_problem_is_reported_with_its_line(tmp_path):
    cfg = tmp_path / "gw.toml"
    cfg.write_text('[gateway]\nlog_level = "loud"\n[network]\nretry_count = 11\nnope = 1\n')
    r = run("config", "check", str(cfg))
    assert r.returncode == 78
    lines = r.stderr.splitlines()
    assert lines[0].startswith(f"{cfg}:2: gateway.log_level:")
    assert lines[1] == f"{cfg}:4: network.retry_count: 11 is out of range 0..10"
    assert lines[2] == f"{cfg}:5: unknown key 'nope' in [network]"
    assert lines[3] == f"{cfg}: 3 problems"
    assert r.stdout == ""


def test_secrets_are_summarised_never_printed(tmp_path):
    secret = "s3cret-value-never-shown"
    (tmp_path / "ns.secret").write_text(secret + "\n")
    os.chmod(tmp_path / "ns.secret", 0o600)
    cfg = tmp_path / "gw.toml"
    cfg.write_text('[nightscout]\nurl = "https://ns.example"\napi_secret_file = "ns.secret"\n'
                   f'[fhir]\nbearer_token = "{secret}"\n')
    os.chmod(cfg, 0o644)
    r = run("config", "check", str(cfg))
    assert r.returncode == 0, r.stderr
    assert f"api_secret: (set, from {tmp_path}/ns.secret)" in r.stdout
    assert "bearer_token: (set)" in r.stdout
    assert "warning: fhir.bearer_token is written in a file every local user can read (mode 0644)" in r.stdout
    assert secret not in r.stdout + r.stderr


def test_group_readable_secret_file_is_refused_with_its_line(tmp_path):
    (tmp_path / "ns.secret").write_text("0123456789abcdef\n")
    os.chmod(tmp_path / "ns.secret", 0o640)
    cfg = tmp_path / "gw.toml"
    cfg.write_text('[nightscout]\nurl = "https://ns.example"\n# the secret\napi_secret_file = "ns.secret"\n')
    r = run("config", "check", str(cfg))
    assert r.returncode == 78
    assert r.stderr.splitlines()[0] == (
        f"{cfg}:4: nightscout.api_secret_file: {tmp_path}/ns.secret is accessible by group or others "
        f"(mode 0640); run chmod 600 {tmp_path}/ns.secret")
    assert "0123456789abcdef" not in r.stderr


@pytest.mark.parametrize("how", ["positional", "option", "environment"])
def test_config_path_sources(tmp_path, how):
    cfg = tmp_path / "gw.toml"
    cfg.write_text("[network]\nretry_count = 99\n")
    if how == "positional":
        r = run("config", "check", str(cfg))
    elif how == "option":
        r = run("--config", str(cfg), "config", "check")
    else:
        r = run("config", "check", env={"GLUCOSE_GATEWAY_CONFIG": str(cfg)})
    assert r.returncode == 78
    assert r.stderr.startswith(f"{cfg}:2: network.retry_count: 99 is out of range")


def test_option_wins_over_environment(tmp_path):
    good = tmp_path / "good.toml"
    good.write_text("[network]\nretry_count = 1\n")
    bad = tmp_path / "bad.toml"
    bad.write_text("[network]\nretry_count = 99\n")
    r = run("--config", str(good), "config", "check", env={"GLUCOSE_GATEWAY_CONFIG": str(bad)})
    assert r.returncode == 0, r.stderr
    assert "  retry_count: 1\n" in r.stdout


def test_missing_file_is_a_config_error(tmp_path):
    r = run("config", "check", str(tmp_path / "absent.toml"))
    assert r.returncode == 78
    assert r.stderr.splitlines()[0] == f"{tmp_path}/absent.toml: cannot read config file: does not exist"


def test_usage_errors_exit_64():
    assert run("config").returncode == 64
    assert run("config", "show").returncode == 64
    assert run("config", "check", "a", "b").returncode == 64


# Commands that read the config: a bad file stops them with one line on stderr and exit 78.
CONFIG_READERS = ["upload"]


@pytest.mark.parametrize("command", CONFIG_READERS)
def test_bad_config_stops_a_command_with_one_line_and_78(tmp_path, command):
    cfg = tmp_path / "gw.toml"
    cfg.write_text("[network]\nretry_count = 99\nbogus = 1\n")
    r = run("--config", str(cfg), command)
    assert r.returncode == 78
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    assert f"{cfg}:2: network.retry_count: 99 is out of range 0..10 (and 1 more;" in lines[0]
    r = run(command, env={"GLUCOSE_GATEWAY_CONFIG": str(tmp_path / "absent.toml")})
    assert r.returncode == 78
    assert r.stderr.splitlines() == [f"glucose-gateway {command}: {tmp_path}/absent.toml: cannot read config file: does not exist"]
