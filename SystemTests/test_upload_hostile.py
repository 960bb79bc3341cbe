"""System tests of `glucose-gateway upload` against hostile loopback servers (SystemTests/hostile_http.py): numbers
in a token exchange that would overflow, and a server that never stops answering "100 Continue". Each command
is bounded by a generous liveness timeout; nothing asserts a speed."""
import json
import os
import signal
import subprocess
import sys

import pytest

from test_mqtt import make_certificates
from test_upload_cli import binary, seed, states

HERE = os.path.dirname(os.path.abspath(__file__))
TOKEN = "gateway-3f9c1d2e8a7b6c5d"


class Hostile:
    """hostile_http.py as a child process, stopped by pid."""

    def __init__(self, *args):
        self.proc = subprocess.Popen([sys.executable, os.path.join(HERE, "hostile_http.py"), *args],
                                     stdout=subprocess.PIPE, text=True)
        self.port = json.loads(self.proc.stdout.readline())["port"]

    def stop(self):
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)


@pytest.fixture
def hostile():
    servers = []

    def start(*args):
        s = Hostile(*args)
        servers.append(s)
        return s

    yield start
    for s in servers:
        s.stop()


def write_config(tmp_path, url, api="v3", ca=None, network="network_timeout_ms = 2000\nretry_count = 0\nrecovery_mode = false"):
    db = str(tmp_path / "gateway.sqlite3")
    token_file = tmp_path / "ns.token"
    token_file.write_text(TOKEN + "\n")
    os.chmod(token_file, 0o600)
    path = tmp_path / "gateway.toml"
    extra = 'ca_file = "%s"\n' % ca if ca else ""
    path.write_text('[gateway]\ndatabase = "%s"\n[nightscout]\nurl = "%s"\napi = "%s"\ntoken_file = "%s"\n%s[network]\n%s\n'
                    % (db, url, api, token_file, extra, network))
    os.chmod(path, 0o600)
    return str(path), db


def run(config, *args):
    return subprocess.run([binary(), "--config", config, "upload", *args], capture_output=True, text=True, timeout=60)


EXCHANGES = [
    '{"token":"a.b.c","iat":-9223372036854775808,"exp":9223372036854775807}',
    '{"token":"a.b.c","iat":-1,"exp":9223372036854775807}',
    '{"token":"a.b.c","iat":-9223372036854775807,"exp":2}',
]


@pytest.mark.parametrize("scheme", ["http", "https"])
@pytest.mark.parametrize("exchange", EXCHANGES, ids=["min-max", "minus-one-max", "minus-max-two"])
def test_numbers_in_the_token_exchange_never_end_the_process(hostile, tmp_path, scheme, exchange):
    args = ["--mode", "token", "--exchange", exchange]
    ca = None
    if scheme == "https":
        ca = make_certificates(tmp_path, ["127.0.0.1"])
        args += ["--tls", str(tmp_path / "server.pem"), str(tmp_path / "server.key")]
    server = hostile(*args)
    config, db = write_config(tmp_path, "%s://127.0.0.1:%d" % (scheme, server.port), ca=ca)
    seed(db, 3)
    check = run(config, "--check")
    assert check.returncode == 0, (check.returncode, check.stdout + check.stderr)
    out = run(config)
    assert out.returncode == 0, (out.returncode, out.stdout + out.stderr)
    assert states(db) == {"acknowledged": 3}


def test_a_server_that_never_stops_answering_100_continue_meets_the_timeout(hostile, tmp_path):
    server = hostile("--mode", "continue")
    config, db = write_config(tmp_path, "http://127.0.0.1:%d" % server.port, api="v3")
    seed(db, 2)
    # --wait=20 is the session's bound; the liveness bound here is the subprocess timeout (60 s).
    out = run(config, "--wait=20")
    assert out.returncode == 75, (out.returncode, out.stdout + out.stderr)
    assert "answer headers longer than 64 KiB" in out.stdout + out.stderr, out.stdout + out.stderr
    assert states(db) == {"pending": 2}
    check = run(config, "--check")
    assert check.returncode == 75, (check.returncode, check.stdout + check.stderr)
    assert "answer headers longer than 64 KiB" in check.stdout, check.stdout + check.stderr


def test_the_daemon_survives_overflowing_numbers_in_the_token_exchange(hostile, private_bus, tmp_path):
    from gg_daemon import Gateway, wait_until
    server = hostile("--mode", "token", "--exchange", EXCHANGES[0])
    token_file = tmp_path / "ns.token"
    token_file.write_text(TOKEN + "\n")
    os.chmod(token_file, 0o600)
    gateway = Gateway(tmp_path, private_bus, extra_config=(
        '[nightscout]\nurl = "http://127.0.0.1:%d"\napi = "v3"\ntoken_file = "%s"\n'
        '[network]\nretry_count = 0\nnetwork_timeout_ms = 2000\n' % (server.port, token_file)))
    seed(gateway.database, 3)
    try:
        gateway.start()
        wait_until("the readings to be acknowledged", lambda: states(gateway.database) == {"acknowledged": 3} or gateway.exited(),
                   timeout=30)
        assert not gateway.exited(), (gateway.process.returncode, gateway.log())
        assert states(gateway.database) == {"acknowledged": 3}
    finally:
        gateway.stop()
