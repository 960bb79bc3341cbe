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
    assert lines[1] == f"{cfg}:4: network.retry_count: out of range 0..10"
    assert lines[2] == f"{cfg}:5: unknown key in [network]"
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
        f"{cfg}:4: nightscout.api_secret_file: the file is accessible by group or others "
        f"(mode 0640); chmod 600 it")
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
    assert r.stderr.startswith(f"{cfg}:2: network.retry_count: out of range")


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
    assert f"{cfg}:2: network.retry_count: out of range 0..10 (and 1 more;" in lines[0]
    r = run(command, env={"GLUCOSE_GATEWAY_CONFIG": str(tmp_path / "absent.toml")})
    assert r.returncode == 78
    assert r.stderr.splitlines() == [f"glucose-gateway {command}: {tmp_path}/absent.toml: cannot read config file: does not exist"]


SECRET_LINES = [
    "API_SECRET = s3cret-value-0451",      # Nightscout's environment-variable spelling
    "api-secret = s3cret-value-0451",
    "api_secret = s3cret-value-0451",
    "token = s3cret-value-0451",
]


@pytest.mark.parametrize("line", SECRET_LINES)
def test_an_unquoted_secret_is_never_echoed(tmp_path, line):
    cfg = tmp_path / "gw.toml"
    cfg.write_text('[gateway]\ndatabase = "%s"\n[nightscout]\nurl = "https://ns.example"\n%s\n' % (tmp_path / "gw.sqlite3", line))
    outputs = []
    for command in (["config", "check"], ["run"], ["upload"], ["sync"], ["status"], ["meters"]):
        r = run("--config", str(cfg), *command, env={"DBUS_SYSTEM_BUS_ADDRESS": "unix:path=%s/no-bus" % tmp_path})
        outputs.append(r.stdout + r.stderr)
        if command[0] in ("config", "run", "upload", "sync"):
            assert r.returncode == 78, (command, r.stderr)
            if command[0] == "config":
                assert "%s:5: " % cfg in r.stderr, r.stderr   # the line is named
    for text in outputs:
        assert "s3cret" not in text and "0451" not in text, text


def test_config_check_of_a_secret_file_does_not_print_it(tmp_path):
    for i, secret in enumerate(["s3cretvalue0451", "s3cret value 0451", "czNjcmV0dmFsdWUwNDUx==", "[s3cretvalue0451", "s3cret.0451 = 1"]):
        path = tmp_path / ("ns%d.secret" % i)
        path.write_text(secret + "\n")
        r = run("config", "check", str(path))
        assert r.returncode == 78
        assert "s3cret" not in r.stdout + r.stderr and "0451" not in r.stdout + r.stderr, r.stderr
        assert r.stderr.startswith("%s:1: " % path), r.stderr


def test_alert_command_arguments_are_not_printed(tmp_path):
    cfg = tmp_path / "gw.toml"
    cfg.write_text('[network]\non_network_error = ["/bin/sh", "-c", "notify --token=tok-0451"]\n')
    r = run("config", "check", str(cfg))
    assert r.returncode == 0, r.stderr
    assert "  on_network_error: /bin/sh (2 arguments)\n" in r.stdout
    assert "tok-0451" not in r.stdout + r.stderr


@pytest.mark.parametrize("url, fragment", [
    ("http://127.0.0.1:+8080", "invalid port in URL"),
    ("https://b\u00fccher.example", "host name must be ASCII"),
    ("https://ns.example.", "host name must not end with a dot"),
    ("http://300.1.2.3", "looks like an IPv4 address but is not one"),
])
def test_a_url_that_can_never_work_is_a_config_error_with_its_line(tmp_path, url, fragment):
    cfg = tmp_path / "gw.toml"
    cfg.write_text('[nightscout]\n# site\nurl = "%s"\ntoken = "t0ken-value"\n' % url, encoding="utf-8")
    r = run("config", "check", str(cfg))
    assert r.returncode == 78
    assert r.stderr.splitlines()[0] == "%s:3: nightscout.url: %s" % (cfg, fragment) or fragment in r.stderr.splitlines()[0], r.stderr
    assert r.stderr.startswith("%s:3: nightscout.url: " % cfg), r.stderr
    r = run("--config", str(cfg), "upload")
    assert r.returncode == 78 and ":3:" in r.stderr


def test_ca_file_must_hold_a_pem_certificate(tmp_path):
    (tmp_path / "ca.pem").write_text("not a certificate\n")
    cfg = tmp_path / "gw.toml"
    cfg.write_text('[nightscout]\nurl = "https://ns.example"\ntoken = "t0ken-value"\nca_file = "ca.pem"\n')
    r = run("config", "check", str(cfg))
    assert r.returncode == 78
    assert r.stderr.splitlines()[0] == "%s:4: nightscout.ca_file: the file holds no PEM certificate (-----BEGIN CERTIFICATE----- ... -----END CERTIFICATE-----)" % cfg
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\nMIIBszCCAVmgAwIBAgIUJ1c2VkIGZvciB0ZXN0cyBvbmx5\n-----END CERTIFICATE-----\n")
    r = run("config", "check", str(cfg))
    assert r.returncode == 0, r.stderr


def test_health_check_on_another_port_of_the_upload_host_is_accepted(tmp_path):
    cfg = tmp_path / "gw.toml"
    cfg.write_text('[nightscout]\nurl = "http://127.0.0.1:1337"\ntoken = "t0ken-value"\n'
                   '[network]\nhealth_check_url = "http://127.0.0.1:1338/"\n')
    r = run("config", "check", str(cfg))
    assert r.returncode == 0, r.stderr
    assert "  health_check_url: http://127.0.0.1:1338\n" in r.stdout
    cfg.write_text('[nightscout]\nurl = "http://127.0.0.1:1337"\ntoken = "t0ken-value"\n'
                   '[network]\nhealth_check_url = "http://127.0.0.1:1337/generate_204"\n')
    r = run("config", "check", str(cfg))
    assert r.returncode == 78
    assert "must not point at an upload server (same scheme, host and port as nightscout.url)" in r.stderr


UPLOAD_PROBLEMS = [
    ("[nightscout]\nurl = \"https://ns.example\"\n", 3, "[nightscout] needs one of api_secret"),
    ("[fhir]\nenabled = true\nbase_url = \"https://fhir.example\"\n", 4, "fhir.subject is required"),
    ("[network]\nretry_count = 99\n", 4, "network.retry_count: out of range"),
    ("[nightscout]\nurl = \"https://ns.example\"\napi_secret = s3cret-value-0451\n", 3, "(and 1 more)"),
]


@pytest.mark.parametrize("section, line, fragment", UPLOAD_PROBLEMS)
def test_upload_settings_problems_do_not_block_meter_commands(tmp_path, section, line, fragment):
    cfg = tmp_path / "gw.toml"
    cfg.write_text('[gateway]\ndatabase = "%s"\n%s' % (tmp_path / "gw.sqlite3", section))
    env = {"DBUS_SYSTEM_BUS_ADDRESS": "unix:path=%s/no-bus" % tmp_path}
    for command in (["meters"], ["readings"], ["status"], ["scan", "--timeout", "1"],
                    ["pair", "AA:BB:CC:DD:EE:FF", "--pin", "123456"], ["unpair", "AA:BB:CC:DD:EE:FF"]):
        r = run("--config", str(cfg), *command, env=env)
        assert r.returncode != 78, (command, r.stderr)
        warnings = [l for l in r.stderr.splitlines() if "warning: %s:%d:" % (cfg, line) in l]
        assert len(warnings) == 1, (command, r.stderr)
        assert warnings[0].startswith("glucose-gateway %s: warning: %s:%d: " % (command[0], cfg, line)), warnings
        assert fragment in warnings[0]
        assert "ignored by this command" in warnings[0]
        assert "s3cret" not in r.stdout + r.stderr
        if command[0] in ("meters", "readings", "status"):
            assert r.returncode == 0, (command, r.stderr)
        else:
            # Past the config: no bus here (69), or no such paired meter (1).
            assert r.returncode in (1, 69), (command, r.stderr)
    for command in (["run"], ["sync"], ["upload"]):
        r = run("--config", str(cfg), *command, env=env)
        assert r.returncode == 78, (command, r.stderr)


def test_a_gateway_section_problem_still_blocks_meter_commands(tmp_path):
    cfg = tmp_path / "gw.toml"
    cfg.write_text('[gateway]\nlog_level = "loud"\n[network]\nretry_count = 99\n')
    for command in (["meters"], ["status"]):
        r = run("--config", str(cfg), *command)
        assert r.returncode == 78
        assert r.stderr.splitlines()[0].startswith("glucose-gateway %s: %s:2: gateway.log_level" % (command[0], cfg)), r.stderr


@pytest.mark.parametrize("kind", ["fifo", "directory", "device", "proc"])
def test_metrics_file_must_not_name_a_device_fifo_directory_or_proc_file(tmp_path, kind):
    # A stand-in for /dev/null made in the temporary directory (as root), never the real one.
    target = tmp_path / "metrics.prom"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "directory":
        target.mkdir()
    elif kind == "device":
        os.mknod(target, 0o600 | 0o020000, os.makedev(1, 3))
    else:
        target = pathlib.Path("/proc/self/environ")
    cfg = tmp_path / "gw.toml"
    cfg.write_text('[gateway]\ndatabase = "%s"\nmetrics_file = "%s"\n' % (tmp_path / "gw.sqlite3", target))
    r = run("config", "check", str(cfg))
    assert r.returncode == 78, r.stdout + r.stderr
    line = r.stderr.splitlines()[0]
    assert line.startswith(f"{cfg}:3: gateway.metrics_file: "), line
    assert str(target) not in line
    if kind != "proc":
        assert not target.is_file()


def test_a_symbolic_link_loop_as_a_secret_file_says_so(tmp_path):
    os.symlink(tmp_path / "b", tmp_path / "a")
    os.symlink(tmp_path / "a", tmp_path / "b")
    cfg = tmp_path / "gw.toml"
    cfg.write_text('[nightscout]\nurl = "http://127.0.0.1:9"\napi_secret_file = "a"\n')
    r = run("config", "check", str(cfg))
    assert r.returncode == 78, r.stdout + r.stderr
    assert r.stderr.splitlines()[0] == f"{cfg}:3: nightscout.api_secret_file: the file is a symbolic link loop"
