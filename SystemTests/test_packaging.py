"""Packaging: install.sh / uninstall.sh into a temporary root, the systemd unit, udev rules, D-Bus policy
and sysusers entry. Uses systemd-analyze and a private dbus-daemon where this machine has them."""
import configparser
import os
import pathlib
import pwd
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
BIN = os.environ.get("GLUCOSE_GATEWAY_BIN", str(REPO / ".build/debug/glucose-gateway"))
UNIT = REPO / "config" / "glucose-gateway.service"
RULES = REPO / "udev" / "90-glucose-gateway.rules"
POLICY = REPO / "config" / "glucose-gateway-dbus.conf"
SYSUSERS = REPO / "config" / "glucose-gateway.sysusers"

# Every file install.sh puts under the root, with its mode.
INSTALLED_FILES = {
    "usr/local/bin/glucose-gateway": 0o755,
    "etc/systemd/system/glucose-gateway.service": 0o644,
    "etc/udev/rules.d/90-glucose-gateway.rules": 0o644,
    "etc/dbus-1/system.d/glucose-gateway.conf": 0o644,
    "etc/sysusers.d/glucose-gateway.conf": 0o644,
    "etc/glucose-gateway/glucose-gateway.toml": 0o640,
    "usr/local/share/doc/glucose-gateway/README.md": 0o644,
    "usr/local/share/doc/glucose-gateway/docs/install.md": 0o644,
    "usr/local/share/doc/glucose-gateway/docs/configuration.md": 0o644,
    "usr/local/share/doc/glucose-gateway/docs/meters.md": 0o644,
    "usr/local/share/doc/glucose-gateway/docs/uploads.md": 0o644,
    "usr/local/share/doc/glucose-gateway/docs/unattended.md": 0o644,
}
OWN_DIRECTORIES = {
    "etc/glucose-gateway": 0o750,
    "var/lib/glucose-gateway": 0o700,
    "usr/local/share/doc/glucose-gateway": 0o755,
}


def sh(*args, **kw):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=kw.pop("timeout", 60), **kw)


def tree(root):
    """{relative path: (is_dir, mode)} for everything under root."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = pathlib.Path(dirpath) / name
            st = p.lstat()
            out[str(p.relative_to(root))] = (stat.S_ISDIR(st.st_mode), stat.S_IMODE(st.st_mode))
    return out


def files_in(root):
    return {k: mode for k, (is_dir, mode) in tree(root).items() if not is_dir}


# ---------------------------------------------------------------- install / uninstall

def test_install_then_uninstall_into_a_root(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    r = sh(str(REPO / "scripts/install.sh"), "--root", str(root), "--binary", BIN)
    assert r.returncode == 0, r.stderr

    assert files_in(root) == INSTALLED_FILES
    t = tree(root)
    for d, mode in OWN_DIRECTORIES.items():
        assert t[d] == (True, mode), d
    sources = {
        "usr/local/bin/glucose-gateway": pathlib.Path(BIN),
        "etc/systemd/system/glucose-gateway.service": UNIT,
        "etc/udev/rules.d/90-glucose-gateway.rules": RULES,
        "etc/dbus-1/system.d/glucose-gateway.conf": POLICY,
        "etc/sysusers.d/glucose-gateway.conf": SYSUSERS,
        "etc/glucose-gateway/glucose-gateway.toml": REPO / "config/glucose-gateway.toml",
        "usr/local/share/doc/glucose-gateway/README.md": REPO / "README.md",
        **{f"usr/local/share/doc/glucose-gateway/docs/{page}.md": REPO / "docs" / f"{page}.md"
           for page in ("install", "configuration", "meters", "uploads", "unattended")},
    }
    assert set(sources) == set(INSTALLED_FILES)
    for rel, src in sources.items():
        assert (root / rel).read_bytes() == src.read_bytes(), rel

    # The installed binary runs and accepts the installed config.
    installed = root / "usr/local/bin/glucose-gateway"
    r = sh(str(installed), "config", "check", str(root / "etc/glucose-gateway/glucose-gateway.toml"))
    assert r.returncode == 0, r.stderr

    # A second install keeps the administrator's config and changes nothing else.
    config = root / "etc/glucose-gateway/glucose-gateway.toml"
    config.write_text("[network]\nretry_count = 5\n")
    db = root / "var/lib/glucose-gateway/gateway.sqlite3"
    db.write_bytes(b"SQLite format 3\x00")
    os.chmod(db, 0o600)
    r = sh(str(REPO / "scripts/install.sh"), "--root", str(root), "--binary", BIN)
    assert r.returncode == 0, r.stderr
    assert "kept the existing /etc/glucose-gateway/glucose-gateway.toml" in r.stdout
    assert config.read_text() == "[network]\nretry_count = 5\n"
    assert files_in(root) == {**INSTALLED_FILES, "var/lib/glucose-gateway/gateway.sqlite3": 0o600}

    # Uninstall keeps the database and nothing else of ours.
    r = sh(str(REPO / "scripts/uninstall.sh"), "--root", str(root))
    assert r.returncode == 0, r.stderr
    assert "kept /var/lib/glucose-gateway/" in r.stdout
    assert files_in(root) == {"var/lib/glucose-gateway/gateway.sqlite3": 0o600}
    left = tree(root)
    assert "etc/glucose-gateway" not in left
    assert "usr/local/share/doc/glucose-gateway" not in left

    # Again: nothing to do, still fine. Then --purge removes the database.
    assert sh(str(REPO / "scripts/uninstall.sh"), "--root", str(root)).returncode == 0
    r = sh(str(REPO / "scripts/uninstall.sh"), "--root", str(root), "--purge")
    assert r.returncode == 0, r.stderr
    assert files_in(root) == {}
    assert "var/lib/glucose-gateway" not in tree(root)


def test_install_script_refuses_bad_arguments(tmp_path):
    assert sh(str(REPO / "scripts/install.sh"), "--bogus").returncode == 64
    assert sh(str(REPO / "scripts/install.sh"), "--root", str(tmp_path / "absent"), "--binary", BIN).returncode == 64
    (tmp_path / "r").mkdir()
    r = sh(str(REPO / "scripts/install.sh"), "--root", str(tmp_path / "r"), "--binary", str(tmp_path / "none"))
    assert r.returncode == 66
    assert files_in(tmp_path / "r") == {}
    assert sh(str(REPO / "scripts/uninstall.sh"), "--bogus").returncode == 64


# ---------------------------------------------------------------- systemd unit

def read_unit(path):
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",), comment_prefixes=("#", ";"))
    parser.optionxform = str
    # Repeated keys (SystemCallFilter=) are legal in units; keep the last for lookups, collect all separately.
    parser.read_string(path.read_text())
    multi = {}
    section = None
    for line in path.read_text().splitlines():
        if line.startswith("["):
            section = line.strip("[]")
        elif "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            multi.setdefault((section, k), []).append(v)
    return parser, multi


def test_unit_has_the_required_settings():
    unit, multi = read_unit(UNIT)
    s = unit["Service"]
    assert s["Type"] == "notify"
    assert s["Restart"] == "on-failure"
    assert int(s["WatchdogSec"]) > 0
    assert s["ExecStart"].split()[0] == "/usr/local/bin/glucose-gateway"
    assert s["ExecStart"].split()[-1] == "run"
    assert s["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert s["User"] == "glucose-gateway"
    assert "bluetooth" in s["SupplementaryGroups"].split()
    assert s["StateDirectory"] == "glucose-gateway"
    assert s["StateDirectoryMode"] == "0700"
    assert s["ProtectSystem"] == "strict"
    assert s["NoNewPrivileges"] == "yes"
    assert s["PrivateTmp"] == "yes"
    assert s["RestrictAddressFamilies"].split() == ["AF_UNIX", "AF_INET", "AF_INET6", "AF_NETLINK"]
    assert s["CapabilityBoundingSet"] == ""
    assert s["PrivateMounts"] == "yes"
    assert s["ProcSubset"] == "pid"
    filters = multi[("Service", "SystemCallFilter")]
    assert filters[0] == "@system-service"
    assert "~@privileged" in filters and "~@resources" in filters
    assert s["SystemCallErrorNumber"] == "EPERM"
    assert "78" in s["RestartPreventExitStatus"].split()
    u = unit["Unit"]
    assert "bluetooth.service" in u["After"].split()
    assert "bluetooth.service" in u["Wants"].split()
    assert not any(k[1] in ("Requires", "BindsTo", "Requisite", "PartOf") for k in multi), "must not stop with bluetoothd"
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_unit_passes_systemd_analyze(tmp_path):
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        # Without systemd-analyze the settings test above is the whole check; make that visible.
        assert read_unit(UNIT)[0]["Service"]["Type"] == "notify"
        return
    # verify checks that ExecStart exists, so point it at the built binary in a copy.
    copy = tmp_path / "glucose-gateway.service"
    copy.write_text(UNIT.read_text().replace("/usr/local/bin/glucose-gateway", BIN))
    r = sh(analyze, "verify", str(copy))
    assert r.returncode == 0
    assert r.stdout + r.stderr == "", "systemd-analyze verify complained:\n" + r.stdout + r.stderr
    r = sh(analyze, "security", "--offline=true", "--no-pager", str(copy))
    m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", r.stdout)
    assert m, r.stdout + r.stderr
    # 1.3 with systemd 252 (1.6 before PrivateMounts, ProcSubset and ~@resources).
    assert float(m.group(1)) <= 1.3, r.stdout


# ---------------------------------------------------------------- udev rules

UDEV_MATCH_ONLY = {"ACTION", "DEVPATH", "KERNEL", "KERNELS", "SUBSYSTEM", "SUBSYSTEMS", "DRIVER", "DRIVERS",
                   "ATTRS", "TAGS", "TEST", "PROGRAM", "RESULT", "CONST"}
UDEV_ASSIGN_ONLY = {"OWNER", "GROUP", "MODE", "SECLABEL", "RUN", "LABEL", "GOTO", "IMPORT", "OPTIONS"}
UDEV_EITHER = {"NAME", "SYMLINK", "ATTR", "SYSCTL", "ENV", "TAG"}
UDEV_WITH_ATTRIBUTE = {"ATTR", "ATTRS", "SYSCTL", "ENV", "TEST", "IMPORT", "RUN", "SECLABEL", "CONST"}
UDEV_TOKEN = re.compile(r'\s*([A-Z_]+)(\{([^}]*)\})?\s*(==|!=|\+=|-=|:=|=)\s*"((?:[^"\\]|\\.)*)"\s*')


def check_udev_rules(text):
    """Problems in a rules file, as (line, message): the syntax of udev(7), plus our house rules
    (every rule has a comment above it, a match and an action; SYSTEMD_WANTS comes with the systemd tag;
    RUN programs are absolute and --no-block for systemctl)."""
    problems = []
    lines = text.split("\n")
    rules = []
    i = 0
    while i < len(lines):
        start = i
        line = lines[i]
        while line.endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line[:-1] + lines[i]
        i += 1
        rules.append((start + 1, line))
    previous = ""
    for number, line in rules:
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            previous = stripped
            continue
        if not previous.startswith("#"):
            problems.append((number, "rule without a comment above it"))
        previous = stripped
        pos, matches, actions, tokens = 0, 0, 0, []
        while pos < len(line):
            m = UDEV_TOKEN.match(line, pos)
            if not m:
                problems.append((number, f"cannot parse at column {pos + 1}: {line[pos:pos + 30]!r}"))
                break
            key, _, attr, op, value = m.groups()
            tokens.append((key, attr, op, value))
            pos = m.end()
            if pos < len(line):
                if line[pos] != ",":
                    problems.append((number, f"expected ',' at column {pos + 1}"))
                    break
                pos += 1
            known = UDEV_MATCH_ONLY | UDEV_ASSIGN_ONLY | UDEV_EITHER
            if key not in known:
                problems.append((number, f"unknown key {key}"))
                continue
            if (attr is not None) != (key in UDEV_WITH_ATTRIBUTE) and key not in ("RUN", "IMPORT", "TEST"):
                problems.append((number, f"{key} {'needs' if attr is None else 'takes no'} {{attribute}}"))
            is_match = op in ("==", "!=")
            if is_match and key in UDEV_ASSIGN_ONLY:
                problems.append((number, f"{key} cannot be matched"))
            if not is_match and key in UDEV_MATCH_ONLY:
                problems.append((number, f"{key} cannot be assigned"))
            if is_match:
                matches += 1
            else:
                actions += 1
            if key == "RUN":
                program = value.split()[0] if value.split() else ""
                if not program.startswith("/"):
                    problems.append((number, f"RUN program must be an absolute path: {program!r}"))
                if program.endswith("systemctl") and "--no-block" not in value.split():
                    problems.append((number, "systemctl from udev must use --no-block"))
                if value.count("'") % 2:
                    problems.append((number, "unbalanced single quotes in RUN"))
        if matches == 0 or actions == 0:
            problems.append((number, "a rule needs at least one match and one action"))
        keys = {(k, a) for k, a, _, _ in tokens}
        if ("ENV", "SYSTEMD_WANTS") in keys and not any(k == "TAG" and v == "systemd" for k, _, _, v in tokens):
            problems.append((number, "SYSTEMD_WANTS needs TAG+=\"systemd\" in the same rule"))
    return problems


def test_udev_rules_syntax():
    assert check_udev_rules(RULES.read_text()) == []
    udevadm = shutil.which("udevadm")
    if udevadm and sh(udevadm, "verify", "--help").returncode == 0:
        r = sh(udevadm, "verify", str(RULES))
        assert r.returncode == 0, r.stdout + r.stderr


def test_udev_rules_cover_adapter_and_autosuspend():
    rules = [l for l in RULES.read_text().splitlines() if l and not l.startswith("#")]
    adapter = [r for r in rules if 'SUBSYSTEM=="bluetooth"' in r]
    assert adapter and all('ENV{DEVTYPE}=="host"' in r and 'ACTION=="add"' in r for r in adapter)
    assert any('ENV{SYSTEMD_WANTS}+="glucose-gateway.service"' in r for r in adapter)
    assert any("try-restart glucose-gateway.service" in r for r in adapter)
    usb = [r for r in rules if 'SUBSYSTEM=="usb"' in r]
    assert any('ATTR{power/control}="on"' in r and 'ATTR{bDeviceClass}=="e0"' in r for r in usb)
    assert any("bInterfaceClass" in r and "power/control" in r for r in usb)
    for r in rules:
        for program in re.findall(r'RUN\+="(\S+)', r):
            assert os.path.isabs(program)


@pytest.mark.parametrize("text,fragment", [
    ('ACTION=="add", RUN+="/bin/true"\n', "without a comment"),
    ('# c\nACTION=="add", RUN+="/bin/true"', None),
    ('# c\nACTION=="add" RUN+="/bin/true"\n', "expected ','"),
    ('# c\nACTION="add", RUN+="/bin/true"\n', "ACTION cannot be assigned"),
    ('# c\nACTION=="add", RUN=="/bin/true"\n', "RUN cannot be matched"),
    ('# c\nACTION=="add", FOO="x"\n', "unknown key FOO"),
    ('# c\nACTION=="add", ENV="x"\n', "needs {attribute}"),
    ('# c\nACTION=="add", RUN+="systemctl start x"\n', "absolute path"),
    ('# c\nACTION=="add", RUN+="/bin/systemctl start x"\n', "--no-block"),
    ('# c\nACTION=="add", ENV{SYSTEMD_WANTS}+="x.service"\n', "needs TAG"),
    ('# c\nACTION=="add", SUBSYSTEM=="usb"\n', "at least one match and one action"),
    ('# c\nACTION=="add", RUN+="/bin/true\n', "cannot parse"),
])
def test_udev_checker_catches_mistakes(text, fragment):
    problems = check_udev_rules(text)
    if fragment is None:
        assert problems == []
    else:
        assert any(fragment in message for _, message in problems), problems


# ---------------------------------------------------------------- D-Bus policy and sysusers

def test_dbus_policy_allows_the_service_user_to_call_bluez():
    tree_ = ET.parse(POLICY)
    assert "busconfig.dtd" in POLICY.read_text().split("<busconfig>")[0]
    root = tree_.getroot()
    assert root.tag == "busconfig"
    policies = root.findall("policy")
    assert [p.attrib for p in policies] == [{"user": "glucose-gateway"}]
    assert [a.attrib for a in policies[0]] == [{"send_destination": "org.bluez"}]


def test_sysusers_entry_makes_the_user_a_member_of_bluetooth(tmp_path):
    lines = [l.split() for l in SYSUSERS.read_text().splitlines() if l.strip() and not l.startswith("#")]
    assert lines[0][:2] == ["u", "glucose-gateway"]
    assert ["m", "glucose-gateway", "bluetooth"] in lines
    sysusers = shutil.which("systemd-sysusers")
    if sysusers:
        (tmp_path / "etc").mkdir()
        r = sh(sysusers, "--dry-run", f"--root={tmp_path}", str(SYSUSERS))
        assert r.returncode == 0, r.stderr
        assert "Creating user 'glucose-gateway'" in r.stdout + r.stderr


BUS_CONFIG = """<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path={socket}</listen>
  <auth>EXTERNAL</auth>
  <!-- the defaults of the system bus: no one owns names or sends method calls unless allowed -->
  <policy context="default">
    <allow user="*"/>
    <deny own="*"/>
    <deny send_type="method_call"/>
    <allow send_type="signal"/>
    <allow send_requested_reply="true" send_type="method_return"/>
    <allow send_requested_reply="true" send_type="error"/>
    <allow receive_type="method_call"/>
    <allow receive_type="method_return"/>
    <allow receive_type="error"/>
    <allow receive_type="signal"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus"/>
    <allow send_destination="org.freedesktop.DBus" send_interface="org.freedesktop.DBus.Introspectable"/>
  </policy>
  <!-- bluetoothd's part of bluetooth.conf: its user owns org.bluez -->
  <policy user="{owner}">
    <allow own="org.bluez"/>
  </policy>
  {include}
</busconfig>
"""


def call_bluez_as(user, address):
    dbus_send = shutil.which("dbus-send")
    entry = pwd.getpwnam(user)
    become = []
    if entry.pw_uid != os.geteuid():
        become = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups"]
    return sh(*become, dbus_send, f"--bus={address}", "--print-reply", "--reply-timeout=3000",
              "--dest=org.bluez", "/", "org.freedesktop.DBus.Peer.Ping", timeout=10)


@pytest.mark.parametrize("with_policy", [True, False])
def test_policy_on_a_system_style_bus(with_policy):
    """A private dbus-daemon with the system bus's default-deny policy: the service user can call
    org.bluez only when our policy file is included. A stand-in user replaces glucose-gateway."""
    daemon = shutil.which("dbus-daemon")
    assert daemon and shutil.which("dbus-send")
    # As root, a different user ("nobody") stands in for glucose-gateway; otherwise the test's own user
    # plays both bluetoothd and the gateway (the owner's policy grants no sends, so the check still holds).
    me = pwd.getpwuid(os.geteuid()).pw_name
    user = "nobody" if os.geteuid() == 0 else me
    workdir = tempfile.mkdtemp(prefix="gw-bus-", dir="/tmp")
    os.chmod(workdir, 0o755)  # the stand-in user must reach the socket
    socket_path = f"{workdir}/bus"
    policy = pathlib.Path(workdir, "gw.conf")
    policy.write_text(POLICY.read_text().replace('user="glucose-gateway"', f'user="{user}"'))
    include = f"<include>{policy}</include>" if with_policy else ""
    conf = pathlib.Path(workdir, "bus.conf")
    conf.write_text(BUS_CONFIG.replace("{socket}", socket_path).replace("{include}", include).replace("{owner}", me))
    bus = subprocess.Popen([daemon, f"--config-file={conf}", "--nofork", "--print-address"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    owner = None
    try:
        address = bus.stdout.readline().strip()
        assert address.startswith("unix:"), bus.stderr.read() if bus.poll() is not None else address
        owner = subprocess.Popen(
            [sys.executable, "-c", OWNER_SCRIPT, address],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready = owner.stdout.readline().strip()
        assert ready == "owned", owner.stderr.read() if owner.poll() is not None else ready
        r = call_bluez_as(user, address)
        if with_policy:
            assert r.returncode == 0, r.stderr
            assert "method return" in r.stdout
        else:
            assert r.returncode != 0
            assert "org.freedesktop.DBus.Error.AccessDenied" in r.stderr
    finally:
        for p in (owner, bus):
            if p is not None:
                p.kill()
                p.wait(timeout=5)
        shutil.rmtree(workdir, ignore_errors=True)


# The stand-in bluetoothd: owns org.bluez with dbus-fast (which answers Peer.Ping itself) and waits.
OWNER_SCRIPT = r"""
import asyncio, sys
from dbus_fast.aio import MessageBus
from dbus_fast import RequestNameReply

async def main():
    bus = await MessageBus(bus_address=sys.argv[1]).connect()
    reply = await bus.request_name("org.bluez")
    assert reply == RequestNameReply.PRIMARY_OWNER, reply
    print("owned", flush=True)
    await asyncio.sleep(30)

asyncio.run(main())
"""
