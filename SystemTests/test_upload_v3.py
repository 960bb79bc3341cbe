"""System tests of uploads through Nightscout API v3 (`[nightscout] api = "v3"` with an access token) against
the loopback Nightscout double: the token exchange, faults, JWT renewal, permissions and the config check."""
import os
import subprocess

import pytest

import test_upload_cli
from test_upload_cli import binary, seed, states, upload

FULL = "gateway-3f9c1d2e8a7b6c5d"
CARE_ONLY = "careportal-0a1b2c3d4e5f"
ENTRIES_ONLY = "entries-5c4b3a29181706f5"
UNKNOWN = "nobody-9e8d7c6b5a4f3e2d"


class Nightscout(test_upload_cli.Nightscout):
    """fake_nightscout.py with access tokens in place of an API secret: one that may do everything, one for
    treatments only, one for entries only."""

    def __init__(self, jwt_lifetime=8 * 3600):
        super().__init__(credentials=(
            "--access-token", FULL + "=api:entries:create,api:entries:update,api:treatments:create,*:*:read",
            "--access-token", CARE_ONLY + "=api:treatments:create",
            "--access-token", ENTRIES_ONLY + "=api:entries:create",
            "--jwt-lifetime", str(jwt_lifetime)))

    def v3(self):
        return self.get("/__v3")


@pytest.fixture
def nightscout():
    yield from test_upload_cli.started_servers(Nightscout)


def write_config(tmp_path, server, token=FULL, network="network_timeout_ms = 2000", extra=""):
    db = str(tmp_path / "gateway.sqlite3")
    token_file = tmp_path / "ns.token"
    token_file.write_text(token + "\n")
    os.chmod(token_file, 0o600)
    path = tmp_path / "gateway.toml"
    path.write_text('[gateway]\ndatabase = "%s"\n[nightscout]\nurl = "%s"\napi = "v3"\ntoken_file = "%s"\n%s[network]\n%s\n'
                    % (db, server.url, token_file, extra, network))
    os.chmod(path, 0o600)
    return str(path), db


def assert_once(server, count):
    entries = server.v3()["entries"]
    assert len(entries) == count
    assert len({e["identifier"] for e in entries}) == count
    assert all(e["app"] == "glucose-gateway" and e["type"] == "mbg" for e in entries)


def no_secret(*outputs):
    for text in outputs:
        assert FULL not in text and CARE_ONLY not in text and UNKNOWN not in text and ENTRIES_ONLY not in text
        assert "eyJ" not in text   # nor a JWT


def test_every_reading_arrives_once_through_refuse_500_and_commit_then_drop(nightscout, tmp_path):
    server = nightscout()
    config, db = write_config(tmp_path, server, network="network_timeout_ms = 2000\nretry_count = 1\nrecovery_mode = false")
    seed(db, 120)
    # Connection refused: nothing sent, everything still pending.
    server.control(mode="down")
    out = upload(config)
    outputs = [out.stdout, out.stderr]
    assert out.returncode == 75, out.stdout + out.stderr
    assert states(db) == {"pending": 120}
    server.control(mode="up")
    # 10 documents stored, then 500 on the attempt and its one retry: the session ends with the rest pending.
    server.control(mode="status", status=500, times=2, after=10)
    out = upload(config)
    outputs += [out.stdout, out.stderr]
    assert out.returncode == 75, out.stdout + out.stderr
    assert states(db) == {"acknowledged": 10, "pending": 110}
    # 20 more, then the connection drops twice after the server committed the document.
    server.control(mode="commit_drop", times=2, after=20)
    out = upload(config)
    outputs += [out.stdout, out.stderr]
    assert out.returncode == 75, out.stdout + out.stderr
    assert states(db) == {"acknowledged": 30, "pending": 90}
    assert len(server.v3()["entries"]) == 31   # the dropped answer's document is on the server
    out = upload(config)
    outputs += [out.stdout, out.stderr]
    assert out.returncode == 0, out.stdout + out.stderr
    assert states(db) == {"acknowledged": 120}
    assert_once(server, 120)
    assert server.v3()["jwt_refused"] == 0
    no_secret(*outputs)


def test_a_jwt_refused_mid_replay_is_renewed_once_and_nothing_is_sent_twice(nightscout, tmp_path):
    server = nightscout()
    config, db = write_config(tmp_path, server)
    seed(db, 40)
    server.control(expire_jwts_after=15)   # every JWT issued so far stops working after 15 documents
    out = upload(config)
    assert out.returncode == 0, out.stdout + out.stderr
    v3 = server.v3()
    assert v3["exchanges"] == 2, v3
    assert v3["jwt_refused"] == 1, v3
    assert v3["posts"] == 40, v3   # the refused request was not counted as a post; no document went twice
    assert_once(server, 40)
    no_secret(out.stdout, out.stderr)


def test_a_jwt_with_an_implausibly_short_lifetime_is_renewed_only_when_refused(nightscout, tmp_path):
    # JWTs live 4 s, below the one minute the gateway takes as a lifetime: it keeps the JWT (renewing on the
    # default schedule, not every 3 s) and renews it when the server refuses it; each document takes 150 ms,
    # so a session of about 6 s meets at least one refusal. Every renewal answers a refusal, and nothing is
    # sent twice.
    server = nightscout(jwt_lifetime=4)
    config, db = write_config(tmp_path, server)
    seed(db, 40)
    server.control(mode="slow", delay_ms=150)
    out = upload(config)
    assert out.returncode == 0, out.stdout + out.stderr
    v3 = server.v3()
    assert v3["jwt_refused"] >= 1, v3
    assert v3["exchanges"] == v3["jwt_refused"] + 1, v3
    assert_once(server, 40)


def test_a_token_without_permission_gives_one_clear_check_line_and_pauses(nightscout, tmp_path):
    server = nightscout()
    config, db = write_config(tmp_path, server, token=CARE_ONLY)
    seed(db, 10)
    check = upload(config, "--check")
    assert check.returncode == 78, check.stdout + check.stderr
    assert check.stdout == "nightscout: credentials refused: access token lacks permission api:entries:create\n"
    out = upload(config)
    assert out.returncode == 75, out.stdout + out.stderr
    assert "paused" in out.stdout, out.stdout
    assert states(db) == {"pending": 10}
    assert server.v3()["entries"] == []
    no_secret(check.stdout, check.stderr, out.stdout, out.stderr)
    # With the right token the same readings go up, once.
    config, _ = write_config(tmp_path, server, token=FULL)
    check = upload(config, "--check")
    assert check.returncode == 0 and check.stdout == "nightscout: credentials accepted\n", check.stdout + check.stderr
    out = upload(config)
    assert out.returncode == 0, out.stdout + out.stderr
    assert_once(server, 10)


def test_with_treatments_the_check_names_each_missing_permission(nightscout, tmp_path):
    server = nightscout()
    config, _ = write_config(tmp_path, server, token=ENTRIES_ONLY, extra="treatments = true\n")
    check = upload(config, "--check")
    assert check.returncode == 78, check.stdout + check.stderr
    assert check.stdout.splitlines() == [
        "nightscout: credentials accepted",
        "nightscout-treatments: credentials refused: access token lacks permission api:treatments:create"]
    config, _ = write_config(tmp_path, server, token=CARE_ONLY, extra="treatments = true\n")
    check = upload(config, "--check")
    assert check.returncode == 78, check.stdout + check.stderr
    assert check.stdout.splitlines() == [
        "nightscout: credentials refused: access token lacks permission api:entries:create",
        "nightscout-treatments: credentials accepted"]
    config, _ = write_config(tmp_path, server, token=FULL, extra="treatments = true\n")
    check = upload(config, "--check")
    assert check.returncode == 0, check.stdout + check.stderr
    no_secret(check.stdout, check.stderr)


def test_an_unknown_token_is_refused_by_the_check(nightscout, tmp_path):
    server = nightscout()
    config, db = write_config(tmp_path, server, token=UNKNOWN)
    check = upload(config, "--check")
    assert check.returncode == 78, check.stdout + check.stderr
    assert check.stdout == ("nightscout: credentials refused: access token not accepted "
                            "(HTTP 401 from the token exchange)\n")
    no_secret(check.stdout, check.stderr)


@pytest.mark.parametrize("body, message", [
    ('api = "v4"\ntoken = "%s"\n' % FULL, 'nightscout.api: expected "v1" or "v3"'),
    ('api = "v3"\napi_secret = "correct-horse-battery"\n',
     'nightscout.api = "v3" takes an access token (token or token_file), not api_secret'),
])
def test_config_check_names_a_bad_api_setting_in_one_line(tmp_path, body, message):
    cfg = tmp_path / "gw.toml"
    cfg.write_text('[nightscout]\nurl = "https://ns.example"\n' + body)
    os.chmod(cfg, 0o600)
    r = subprocess.run([binary(), "config", "check", str(cfg)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 78
    assert r.stderr.splitlines() == ["%s:3: %s" % (cfg, message), "%s: 1 problem" % cfg], r.stderr
    assert FULL not in r.stdout + r.stderr and "correct-horse-battery" not in r.stdout + r.stderr


def test_config_check_shows_the_api(tmp_path):
    (tmp_path / "ns.token").write_text(FULL + "\n")
    os.chmod(tmp_path / "ns.token", 0o600)
    cfg = tmp_path / "gw.toml"
    cfg.write_text('[nightscout]\nurl = "https://ns.example"\napi = "v3"\ntoken_file = "ns.token"\n')
    os.chmod(cfg, 0o600)
    r = subprocess.run([binary(), "config", "check", str(cfg)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    assert "  api: v3\n" in r.stdout
    assert FULL not in r.stdout + r.stderr
