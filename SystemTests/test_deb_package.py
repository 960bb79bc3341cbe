"""The Debian package (scripts/package-deb.sh): built once per content of the tree (see gg_deb), then
installed, reinstalled, upgraded, removed and purged with dpkg in a minimal chroot of this machine's
Debian release that has the package's Debian dependencies and nothing of the Swift toolchain. Also its
contents and modes, lintian, the unit generated from config/, the manual page and the bash completion.

Building the package and the chroot needs root (apt-get, debootstrap, mount namespaces), as CI runs."""
import gzip
import json
import os
import pathlib
import re
import shutil
import stat
import subprocess
import io
import tarfile

import pytest

import gg_deb

REPO = gg_deb.REPO
ROOT = os.geteuid() == 0
VECTOR = "1b 34 12 e8 07 03 05 0e 1e 0f 3c 00 6f b0 11 01 00"   # 111 mg/dL, sequence 4660

# Every file the package installs, with its mode (directories are checked separately).
PACKAGE_FILES = {
    "usr/bin/glucose-gateway": 0o755,
    "usr/libexec/glucose-gateway/glucose-gateway-simulator": 0o755,
    "usr/lib/systemd/system/glucose-gateway.service": 0o644,
    "usr/lib/udev/rules.d/90-glucose-gateway.rules": 0o644,
    "usr/share/dbus-1/system.d/glucose-gateway.conf": 0o644,
    "usr/lib/sysusers.d/glucose-gateway.conf": 0o644,
    "usr/lib/tmpfiles.d/glucose-gateway.conf": 0o644,
    "etc/glucose-gateway/glucose-gateway.toml": 0o640,
    "usr/share/man/man1/glucose-gateway.1.gz": 0o644,
    "usr/share/bash-completion/completions/glucose-gateway": 0o644,
    "usr/share/doc/glucose-gateway/README.md.gz": 0o644,
    "usr/share/doc/glucose-gateway/docs/install.md.gz": 0o644,
    "usr/share/doc/glucose-gateway/docs/configuration.md.gz": 0o644,
    "usr/share/doc/glucose-gateway/docs/meters.md.gz": 0o644,
    "usr/share/doc/glucose-gateway/docs/uploads.md.gz": 0o644,
    "usr/share/doc/glucose-gateway/docs/unattended.md.gz": 0o644,
    "usr/share/doc/glucose-gateway/changelog.gz": 0o644,
    "usr/share/doc/glucose-gateway/copyright": 0o644,
    "usr/share/lintian/overrides/glucose-gateway": 0o644,
}


def sh(*args, **kw):
    return gg_deb.sh(*args, **kw)


@pytest.fixture(scope="module")
def debs():
    assert ROOT, "building and installing the package needs root (apt-get, debootstrap, mounts), as CI runs"
    return gg_deb.packages()


def members(deb):
    """{path: (mode, owner, group, is_dir, bytes or None)} of the package's data."""
    raw = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb)], capture_output=True, timeout=120, check=True).stdout
    out = {}
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        for m in tar.getmembers():
            name = m.name.lstrip("./").rstrip("/")
            if not name:
                continue
            content = tar.extractfile(m).read() if m.isfile() else None
            out[name] = (stat.S_IMODE(m.mode), m.uname, m.gname, m.isdir(), content)
    return out


# ------------------------------------------------------------------------------ the package itself

def test_package_contents_modes_and_control_fields(debs):
    files = members(debs["current"])
    assert {k: v[0] for k, v in files.items() if not v[3]} == PACKAGE_FILES
    assert all(v[1:3] == ("root", "root") for v in files.values())
    assert files["etc/glucose-gateway"][0] == 0o750
    assert all(v[0] == 0o755 for k, v in files.items() if v[3] and k != "etc/glucose-gateway")

    field = lambda name: sh("dpkg-deb", "--field", str(debs["current"]), name).stdout.strip()
    assert field("Package") == "glucose-gateway"
    assert field("Version") == gg_deb.version()
    assert field("Architecture") == gg_deb.architecture()
    depends = [d.strip() for d in field("Depends").split(",")]
    names = {re.split(r"[ (]", d)[0] for d in depends}
    # Debian's libraries the binary links (from its NEEDED entries), BlueZ and systemd; nothing of Swift.
    assert {"libc6", "libdbus-1-3", "libsqlite3-0", "bluez", "procps", "systemd"} <= names
    assert not any("swift" in d for d in depends)
    # Packed relative relocations (the loader's GLIBC_ABI_DT_RELR) need glibc 2.36.
    binary = members(debs["current"])["usr/bin/glucose-gateway"][4]
    if b"GLIBC_ABI_DT_RELR" in binary:
        libc = [d for d in depends if d.startswith("libc6 ")]
        assert libc and sh("dpkg", "--compare-versions", re.sub(r"^libc6 \(>= (.+)\)$", r"\1", libc[0]), "ge", "2.36").returncode == 0, libc
    # libcurl is loaded (dlopen) on the first upload only: recommended, with the soname the loader tries.
    assert field("Recommends") == "libcurl4 | libcurl3-gnutls"
    shim = (REPO / "Sources/CCurl/shim.h").read_text()
    assert 'dlopen("libcurl.so.4"' in shim and 'dlopen("libcurl-gnutls.so.4"' in shim
    # libmosquitto likewise, and only with [mqtt]: suggested, and nothing of it is linked.
    assert field("Suggests") == "libmosquitto1"
    assert 'dlopen("libmosquitto.so.1"' in (REPO / "Sources/CMosquitto/shim.h").read_text()
    assert "mosquitto" not in field("Depends")
    control = subprocess.run(["dpkg-deb", "--ctrl-tarfile", str(debs["current"])], capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(control)) as tar:
        names = {m.name.lstrip("./"): m for m in tar.getmembers()}
        assert tar.extractfile(names["conffiles"]).read() == b"/etc/glucose-gateway/glucose-gateway.toml\n"
        for script in ("postinst", "prerm", "postrm"):
            assert stat.S_IMODE(names[script].mode) == 0o755
            text = tar.extractfile(names[script]).read().decode()
            assert text.startswith("#!/bin/sh\n") and "\nset -e\n" in text, script


def test_binary_needs_no_swift_runtime(debs):
    binary = members(debs["current"])["usr/bin/glucose-gateway"][4]
    path = debs["dir"] / "glucose-gateway.extracted"
    path.write_bytes(binary)
    dynamic = sh("readelf", "-d", str(path)).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^]]+)\]", dynamic)
    assert "libdbus-1.so.3" in needed and "libsqlite3.so.0" in needed
    assert not [n for n in needed if re.match(r"lib(swift|Foundation|dispatch|BlocksRuntime)", n)], needed
    assert "libcurl" not in " ".join(needed)
    assert "RPATH" not in dynamic and "RUNPATH" not in dynamic
    assert "BIND_NOW" in dynamic
    assert_constants_read_only(sh("readelf", "-lW", str(path)).stdout)


def assert_constants_read_only(program_headers):
    """`.rodata` lies in a loaded segment without write permission (the compiler's few writable sections
    of that name are linked apart, see packaging/text-order.ld); the segments after the mapping line up
    with the LOAD and other headers in order."""
    headers = re.findall(r"^[ \t]+([A-Z_]+)[ \t]+(?:0x[0-9a-f]+[ \t]+){5}([RWE ]+?)[ \t]+(?:0x[0-9a-f]+|0)$", program_headers, re.M)
    mapping = re.findall(r"^[ \t]+\d\d[ \t]*(.*)$", program_headers.split("Section to Segment mapping:")[1], re.M)
    assert headers and len(headers) == len(mapping), program_headers
    holding = [header for header, sections in zip(headers, mapping) if ".rodata" in sections.split()]
    assert holding and all(kind != "LOAD" or "W" not in flags for kind, flags in holding), holding
    assert any(kind == "LOAD" for kind, _ in holding), holding


def test_lintian_reports_no_errors(debs):
    r = sh("lintian", "--display-info", "--pedantic", "--fail-on", "error", str(debs["current"]), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    tags = [l for l in r.stdout.splitlines() if re.match(r"^[EWIPX]: ", l)]
    assert not [t for t in tags if t.startswith(("E:", "W:"))], tags
    # Every override is used (a stale one would hide nothing and mislead).
    assert "unused-override" not in r.stdout


def test_packaged_unit_is_the_config_unit_with_debian_paths(debs):
    """The unit, udev rules, D-Bus policy and sysusers entry are config/ and udev/ with paths changed,
    so a change there (hardening, a new rule) reaches the package as it is."""
    files = members(debs["current"])
    pairs = {
        "usr/lib/systemd/system/glucose-gateway.service": REPO / "config/glucose-gateway.service",
        "usr/lib/udev/rules.d/90-glucose-gateway.rules": REPO / "udev/90-glucose-gateway.rules",
        "usr/share/dbus-1/system.d/glucose-gateway.conf": REPO / "config/glucose-gateway-dbus.conf",
        "usr/lib/sysusers.d/glucose-gateway.conf": REPO / "config/glucose-gateway.sysusers",
        "usr/lib/tmpfiles.d/glucose-gateway.conf": REPO / "config/glucose-gateway.tmpfiles",
    }
    assert files["etc/glucose-gateway/glucose-gateway.toml"][4] == (REPO / "config/glucose-gateway.toml").read_bytes()
    for packaged, source in pairs.items():
        ours = files[packaged][4].decode().splitlines()
        theirs = source.read_text().splitlines()
        assert len(ours) == len(theirs), packaged
        for a, b in zip(ours, theirs):
            if a != b:
                # Only paths and the "installed as" comments differ.
                assert b.startswith("#") or "Installed as" in b or "/usr/local" in b or b.startswith("Documentation="), (packaged, b, a)
        assert "/usr/local" not in "\n".join(ours), packaged
    unit = files["usr/lib/systemd/system/glucose-gateway.service"][4].decode()
    exec_start = [l for l in unit.splitlines() if l.startswith("ExecStart=")]
    assert exec_start == ["ExecStart=/usr/bin/glucose-gateway --config /etc/glucose-gateway/glucose-gateway.toml run"]
    # Every other setting is the source's, in order.
    settings = lambda text: [l for l in text.splitlines() if l and not l.startswith(("#", "ExecStart=", "Documentation="))]
    assert settings(unit) == settings((REPO / "config/glucose-gateway.service").read_text())


def _help(binary, *command):
    return sh(str(binary), *command, "--help").stdout


def test_man_page_has_every_command_help(debs, tmp_path):
    files = members(debs["current"])
    binary = tmp_path / "glucose-gateway"
    binary.write_bytes(files["usr/bin/glucose-gateway"][4])
    binary.chmod(0o755)
    page = tmp_path / "glucose-gateway.1"
    page.write_bytes(gzip.decompress(files["usr/share/man/man1/glucose-gateway.1.gz"][4]))
    r = sh("man", "--warnings", "-l", "-Tutf8", str(page), env=dict(os.environ, MANWIDTH="200", LC_ALL="C.UTF-8"))
    assert r.returncode == 0 and r.stderr == "", r.stderr
    rendered = re.sub(r".\x08", "", r.stdout)
    words = lambda text: re.findall(r"[A-Za-z0-9][A-Za-z0-9_./:-]*", text)
    flat = " ".join(words(rendered))
    commands = sh("python3", str(REPO / "packaging/gen-docs.py"), "commands", str(binary)).stdout.split()
    assert "decode" in commands and "run" in commands and len(commands) >= 10
    for command in commands:
        assert re.search(r"^   " + re.escape(command) + r"$", rendered, re.M), f"no section for {command}"
        # Every line of the command's --help is in the page, word for word.
        for line in _help(binary, command).splitlines():
            line_words = words(line.removeprefix("usage: "))
            if line_words:
                assert " ".join(line_words) in flat, (command, line)


def test_bash_completion_offers_the_binary_commands_and_options(debs, tmp_path):
    if not os.path.exists("/usr/share/bash-completion/bash_completion"):
        gg_deb.ensure_host_packages("bash-completion")
    files = members(debs["current"])
    binary = tmp_path / "glucose-gateway"
    binary.write_bytes(files["usr/bin/glucose-gateway"][4])
    binary.chmod(0o755)
    completion = tmp_path / "completion"
    completion.write_bytes(files["usr/share/bash-completion/completions/glucose-gateway"][4])

    def complete(*words):
        script = (
            "source /usr/share/bash-completion/bash_completion\n"
            f"source {completion}\n"
            f"COMP_WORDS=({' '.join(repr(w) for w in ('glucose-gateway',) + words)})\n"
            "COMP_CWORD=$((${#COMP_WORDS[@]} - 1))\n"
            'COMP_LINE="${COMP_WORDS[*]}"; COMP_POINT=${#COMP_LINE}\n'
            "_glucose_gateway glucose-gateway \"${COMP_WORDS[COMP_CWORD]}\" \"${COMP_WORDS[COMP_CWORD-1]}\"\n"
            'printf "%s\\n" "${COMPREPLY[@]}"\n')
        r = sh("bash", "-c", script)
        assert r.returncode == 0, r.stderr
        return sorted(set(r.stdout.split()))

    listed = sh("python3", str(REPO / "packaging/gen-docs.py"), "commands", str(binary)).stdout.split()
    top = _help(binary)
    from_help = re.findall(r"^  ([a-z][a-z-]*)\s{2,}", top.split("Commands:")[1], re.M)
    assert listed == from_help
    assert complete("") == sorted(from_help)
    assert complete("s") == sorted(c for c in from_help if c.startswith("s"))
    assert complete("--") == ["--config", "--help", "--verbose"]
    for command in from_help:
        offered = complete(command, "--")
        # Each option in the command's usage line is offered, and nothing that the help does not name.
        usage = _help(binary, command).split("\n\n")[0]
        for option in re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", usage):
            assert option in offered, (command, option, offered)
        text = _help(binary, command)
        for option in offered:
            assert option == "--help" or option in text, (command, option)
    assert complete("decode", "") == ["2a18", "2a34", "2a51", "2a52"]
    assert complete("config", "") == ["check"]


def test_package_script_refuses_bad_arguments(tmp_path):
    script = str(REPO / "scripts/package-deb.sh")
    assert sh(script, "--bogus").returncode == 64
    assert sh(script, "--binary").returncode == 64
    r = sh(script, "--binary", str(tmp_path / "none"), "--output", str(tmp_path), "--no-lintian",
           env=dict(os.environ, GLUCOSE_GATEWAY_VERSION="1.0-1"))
    assert r.returncode == 1 and "no Debian revision" in r.stderr
    assert list(tmp_path.iterdir()) == []


def test_package_script_refuses_a_binary_linking_the_swift_runtime(tmp_path):
    """A binary that needs libswiftCore.so (a plain `swift build`) must not become a package."""
    dynamic = REPO / ".build/debug/glucose-gateway"
    binary = pathlib.Path(os.environ.get("GLUCOSE_GATEWAY_BIN", str(dynamic)))
    assert "libswiftCore.so" in sh("readelf", "-d", str(binary)).stdout
    r = sh(str(REPO / "scripts/package-deb.sh"), "--binary", str(binary), "--output", str(tmp_path), "--no-lintian",
           timeout=300)
    assert r.returncode == 1
    assert "links the Swift runtime dynamically" in r.stderr
    assert not list(tmp_path.glob("*.deb"))


# ------------------------------------------------------------------------- installed in a chroot

SCENARIO = r"""
set -u
current=/packages/$1; next=/packages/$2; vector="$3"
fact() { printf '%s=%s\n' "$1" "$2"; }
fact opt_swift "$([ -e /opt/swift ] && echo present || echo absent)"
fact swift_libs_on_system "$(find / -xdev -name 'libswift*.so*' 2>/dev/null | grep -v '^/packages' | wc -l)"

dpkg -i "$current" > /tmp/install.log 2>&1; fact install_rc $?
cat /tmp/install.log | sed 's/^/install-log: /'
fact status "$(dpkg-query -W -f='${Status} ${Version}' glucose-gateway)"
fact help_first "$(glucose-gateway --help | head -n 1)"
out="$(glucose-gateway decode --compact 2a18 "$vector")"; fact decode_rc $?
fact decode "$out"
fact ldd "$(ldd /usr/bin/glucose-gateway | tr '\n' ';')"
for f in /usr/bin/glucose-gateway /usr/libexec/glucose-gateway/glucose-gateway-simulator /usr/lib/systemd/system/glucose-gateway.service \
         /usr/lib/udev/rules.d/90-glucose-gateway.rules /usr/share/dbus-1/system.d/glucose-gateway.conf \
         /usr/lib/sysusers.d/glucose-gateway.conf /usr/lib/tmpfiles.d/glucose-gateway.conf \
         /etc/glucose-gateway /etc/glucose-gateway/glucose-gateway.toml /var/lib/glucose-gateway \
         /usr/share/man/man1/glucose-gateway.1.gz /usr/share/bash-completion/completions/glucose-gateway; do
    fact "stat.$f" "$(stat -c '%a %U:%G' "$f" 2>&1)"
done
fact user "$(getent passwd glucose-gateway)"
fact groups "$(id -nG glucose-gateway)"
fact wants_link "$(readlink /etc/systemd/system/multi-user.target.wants/glucose-gateway.service)"
fact is_enabled "$(systemctl is-enabled glucose-gateway.service 2>&1)"
fact dsh_state "$(cat /var/lib/systemd/deb-systemd-helper-enabled/glucose-gateway.service.dsh-also 2>&1 | tr '\n' ' ')"
fact man "$(man -w glucose-gateway 2>&1)"
fact verify "$(systemd-analyze verify /usr/lib/systemd/system/glucose-gateway.service 2>&1 | tr '\n' ';')"
# Pairing comes before the first start: the service user can open its database already.
runuser -u glucose-gateway -- glucose-gateway config check > /dev/null 2>&1; fact user_config_check $?
runuser -u glucose-gateway -- glucose-gateway meters > /dev/null 2>/tmp/meters.err; fact user_meters $?
cat /tmp/meters.err | sed 's/^/meters-err: /'
fact db "$(stat -c '%a %U:%G' /var/lib/glucose-gateway/gateway.sqlite3 2>&1)"

# The administrator's config survives a reinstall and an upgrade; so do the database and the enablement.
echo '# changed here' >> /etc/glucose-gateway/glucose-gateway.toml
dpkg -i "$current" > /tmp/reinstall.log 2>&1; fact reinstall_rc $?
dpkg -i "$next" > /tmp/upgrade.log 2>&1; fact upgrade_rc $?
cat /tmp/reinstall.log /tmp/upgrade.log | sed 's/^/upgrade-log: /'
fact upgraded "$(dpkg-query -W -f='${Status} ${Version}' glucose-gateway)"
fact config_kept "$(tail -n 1 /etc/glucose-gateway/glucose-gateway.toml)"
fact config_stat_after_upgrade "$(stat -c '%a %U:%G' /etc/glucose-gateway/glucose-gateway.toml)"
fact db_after_upgrade "$(stat -c '%a %U:%G' /var/lib/glucose-gateway/gateway.sqlite3 2>&1)"
fact wants_link_after_upgrade "$(readlink /etc/systemd/system/multi-user.target.wants/glucose-gateway.service)"

dpkg -r glucose-gateway > /tmp/remove.log 2>&1; fact remove_rc $?
fact removed_status "$(dpkg-query -W -f='${Status}' glucose-gateway)"
fact binary_after_remove "$([ -e /usr/bin/glucose-gateway ] && echo present || echo absent)"
fact unit_after_remove "$([ -e /usr/lib/systemd/system/glucose-gateway.service ] && echo present || echo absent)"
fact db_after_remove "$(ls /var/lib/glucose-gateway 2>&1 | tr '\n' ' ')"
fact config_after_remove "$([ -e /etc/glucose-gateway/glucose-gateway.toml ] && echo present || echo absent)"

echo secret > /etc/glucose-gateway/nightscout.secret
dpkg -P glucose-gateway > /tmp/purge.log 2>&1; fact purge_rc $?
cat /tmp/remove.log /tmp/purge.log | sed 's/^/remove-log: /'
fact purged_status "$(dpkg-query -W -f='${Status}' glucose-gateway 2>&1)"
fact state_after_purge "$([ -e /var/lib/glucose-gateway ] && echo present || echo absent)"
fact config_after_purge "$([ -e /etc/glucose-gateway ] && echo present || echo absent)"
fact left_after_purge "$(find / -xdev \( -path /packages -o -path /proc -o -path /tmp -o -path /var/cache/man \) -prune -o -name '*glucose-gateway*' -print 2>/dev/null | tr '\n' ' ')"
fact user_after_purge "$(getent passwd glucose-gateway | cut -d: -f1)"
"""


@pytest.fixture(scope="module")
def chroot_facts(debs, tmp_path_factory):
    depends = sh("dpkg-deb", "--field", str(debs["current"]), "Depends").stdout.strip()
    base = gg_deb.base_chroot(depends)
    work = tmp_path_factory.mktemp("overlay")
    r = gg_deb.in_overlay(base, work, debs["dir"], SCENARIO, debs["current"].name, debs["next"].name, VECTOR)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    facts = gg_deb.facts(r.stdout)
    facts["_output"] = r.stdout
    return facts


def test_installs_with_debian_dependencies_only(chroot_facts):
    f = chroot_facts
    assert f["opt_swift"] == "absent" and f["swift_libs_on_system"] == "0"
    assert f["install_rc"] == "0", f["_output"]
    assert f["status"] == f"install ok installed {gg_deb.version()}"


def test_installed_binary_runs_without_the_toolchain(chroot_facts):
    f = chroot_facts
    assert re.match(r"^usage: glucose-gateway \[--config PATH\] .*COMMAND \[ARGS\.\.\.\]$", f["help_first"]), f["help_first"]
    assert f["decode_rc"] == "0"
    value = json.loads(f["decode"])
    assert (value["sequence"], value["mg_dl"], value["mmol_l"]) == (4660, 111.0, 6.16)
    assert value["user_facing_time"] == "2024-03-05T15:30:15"
    libraries = [l.strip() for l in f["ldd"].split(";") if l.strip()]
    assert libraries and not [l for l in libraries if "/opt/swift" in l or "libswift" in l or "not found" in l], libraries
    assert any(l.startswith("libdbus-1.so.3 => ") for l in libraries)
    assert f["man"] == "/usr/share/man/man1/glucose-gateway.1.gz"


def test_installed_files_user_and_modes(chroot_facts):
    f = chroot_facts
    expected = {
        "/usr/bin/glucose-gateway": "755 root:root",
        "/usr/libexec/glucose-gateway/glucose-gateway-simulator": "755 root:root",
        "/usr/lib/systemd/system/glucose-gateway.service": "644 root:root",
        "/usr/lib/udev/rules.d/90-glucose-gateway.rules": "644 root:root",
        "/usr/share/dbus-1/system.d/glucose-gateway.conf": "644 root:root",
        "/usr/lib/sysusers.d/glucose-gateway.conf": "644 root:root",
        "/usr/lib/tmpfiles.d/glucose-gateway.conf": "644 root:root",
        "/etc/glucose-gateway": "750 root:glucose-gateway",
        "/etc/glucose-gateway/glucose-gateway.toml": "640 root:glucose-gateway",
        "/var/lib/glucose-gateway": "700 glucose-gateway:glucose-gateway",
        "/usr/share/man/man1/glucose-gateway.1.gz": "644 root:root",
        "/usr/share/bash-completion/completions/glucose-gateway": "644 root:root",
    }
    assert {k: f["stat." + k] for k in expected} == expected
    name, _, uid, gid, gecos, home, shell = f["user"].split(":")
    assert (name, home, shell) == ("glucose-gateway", "/var/lib/glucose-gateway", "/usr/sbin/nologin")
    assert int(uid) < 1000
    assert "bluetooth" in f["groups"].split()
    # The service user reads the config and creates its database (0600) before the service ever ran.
    assert f["user_config_check"] == "0"
    assert f["user_meters"] == "0", f["_output"]
    assert f["db"] == "600 glucose-gateway:glucose-gateway"
    assert f["verify"] == "", f["verify"]


def test_service_enabled_but_not_started(chroot_facts):
    f = chroot_facts
    assert f["wants_link"] in ("/usr/lib/systemd/system/glucose-gateway.service",
                               "/lib/systemd/system/glucose-gateway.service")
    assert f["is_enabled"] == "enabled"
    # deb-systemd-helper remembers the link, so purge can remove it and an upgrade keeps a disable.
    assert "/etc/systemd/system/multi-user.target.wants/glucose-gateway.service" in f["dsh_state"].split()
    # Nothing could start it here (no systemd running): test_maintainer_scripts_start_nothing_on_install
    # checks that the scripts do not ask for a start.


def test_upgrade_keeps_config_database_and_enablement(chroot_facts, debs):
    f = chroot_facts
    assert f["reinstall_rc"] == "0" and f["upgrade_rc"] == "0", f["_output"]
    assert f["upgraded"] == f"install ok installed {gg_deb.next_version(gg_deb.version())}"
    assert f["config_kept"] == "# changed here"
    assert f["config_stat_after_upgrade"] == "640 root:glucose-gateway"
    assert f["db_after_upgrade"] == "600 glucose-gateway:glucose-gateway"
    assert f["wants_link_after_upgrade"] == f["wants_link"]


def test_remove_keeps_database_and_config(chroot_facts):
    f = chroot_facts
    assert f["remove_rc"] == "0", f["_output"]
    assert f["removed_status"] == "deinstall ok config-files"
    assert f["binary_after_remove"] == "absent" and f["unit_after_remove"] == "absent"
    assert f["db_after_remove"].split() == ["gateway.sqlite3"]
    assert f["config_after_remove"] == "present"


def test_purge_deletes_database_and_config(chroot_facts):
    f = chroot_facts
    assert f["purge_rc"] == "0", f["_output"]
    assert "no packages found" in f["purged_status"] or f["purged_status"] == "unknown ok not-installed"
    assert f["state_after_purge"] == "absent"
    assert f["config_after_purge"] == "absent"
    assert f["left_after_purge"].strip() == "", f["left_after_purge"]
    # The system user stays, as Debian keeps system users (files it owned elsewhere keep a known owner).
    assert f["user_after_purge"] == "glucose-gateway"


# With systemd "running" (as the maintainer scripts see it) and systemctl recording its calls: the
# first installation starts nothing, an upgrade restarts only a running service, removal stops it.
RECORDED = r"""
set -u
mkdir -p /run/systemd/system
rm -f /usr/sbin/policy-rc.d
mv /usr/bin/systemctl /usr/bin/systemctl.real
cat > /usr/bin/systemctl <<'EOF'
#!/bin/sh
echo "$*" >> /tmp/systemctl.calls
case " $* " in
    *" --root="*|*" --version "*|*" is-enabled "*) exec /usr/bin/systemctl.real "$@" ;;
    *" is-active "*) exit 3 ;;
esac
exit 0
EOF
chmod 755 /usr/bin/systemctl
phase() { echo "== $1" >> /tmp/systemctl.calls; }
phase install; dpkg -i /packages/$1 > /tmp/log 2>&1 || { cat /tmp/log; exit 1; }
phase upgrade; dpkg -i /packages/$2 > /tmp/log 2>&1 || { cat /tmp/log; exit 1; }
phase remove; dpkg -r glucose-gateway > /tmp/log 2>&1 || { cat /tmp/log; exit 1; }
phase end
cat /tmp/systemctl.calls
"""


def test_maintainer_scripts_start_nothing_on_install(debs, tmp_path):
    depends = sh("dpkg-deb", "--field", str(debs["current"]), "Depends").stdout.strip()
    base = gg_deb.base_chroot(depends)
    r = gg_deb.in_overlay(base, tmp_path / "overlay", debs["dir"], RECORDED, debs["current"].name, debs["next"].name)
    assert r.returncode == 0, r.stdout + r.stderr
    phases, name = {}, None
    for line in r.stdout.splitlines():
        if line.startswith("== "):
            name = line[3:]
            phases[name] = []
        elif name:
            phases[name].append(line)
    verbs = lambda calls: [w for c in calls for w in c.split() if w in
                           ("start", "restart", "try-restart", "stop", "reload-or-restart", "daemon-reload")]
    assert verbs(phases["install"]) == ["daemon-reload"], phases["install"]
    assert verbs(phases["upgrade"]) == ["daemon-reload", "try-restart"], phases["upgrade"]
    assert "stop" in verbs(phases["remove"]) and "start" not in verbs(phases["remove"]), phases["remove"]
    assert any("glucose-gateway.service" in c for c in phases["upgrade"] if "try-restart" in c)


# Under a booted systemd (a container whose PID 1 is systemd): the installed service is enabled and
# stays stopped; started, it runs as its user under the unit's sandbox and reports READY and STATUS;
# reload signals it; an upgrade restarts it on the new binary; removal stops it and keeps its database.
BOOTED = r"""#!/bin/bash
set -u
fact() { printf '%s=%s\n' "$1" "$2"; }
show() { systemctl show -p "$1" --value glucose-gateway.service; }
dpkg -i /packages/@CURRENT@ > /tmp/install.log 2>&1; fact install_rc $?
fact enabled "$(systemctl is-enabled glucose-gateway.service)"
fact active_after_install "$(systemctl is-active glucose-gateway.service)"
timeout 90 systemctl start glucose-gateway.service; fact start_rc $?
fact state "$(show ActiveState)/$(show SubState)"
fact status_text "$(show StatusText)"
first=$(show MainPID)
fact main_user "$(ps -o user= -p "$first")"
fact database "$(stat -c '%a %U' /var/lib/glucose-gateway/gateway.sqlite3 2>&1)"
systemctl reload glucose-gateway.service; fact reload_rc $?
sleep 1
fact after_reload "$(show ActiveState) $([ "$(show MainPID)" = "$first" ] && echo same-pid || echo other-pid)"
dpkg -i /packages/@NEXT@ > /tmp/upgrade.log 2>&1; fact upgrade_rc $?
fact after_upgrade "$(show ActiveState) $([ "$(show MainPID)" = "$first" ] && echo same-pid || echo other-pid)"
fact version "$(dpkg-query -W -f='${Version}' glucose-gateway)"
dpkg -r glucose-gateway > /tmp/remove.log 2>&1; fact remove_rc $?
fact active_after_remove "$(systemctl is-active glucose-gateway.service)"
fact database_after_remove "$(ls /var/lib/glucose-gateway | tr '\n' ' ')"
cat /tmp/install.log /tmp/upgrade.log /tmp/remove.log | sed 's/^/dpkg: /'
journalctl -u glucose-gateway --no-pager -o cat | sed 's/^/journal: /'
"""


def test_service_under_systemd_starts_only_when_asked(debs, tmp_path):
    depends = sh("dpkg-deb", "--field", str(debs["current"]), "Depends").stdout.strip()
    base = gg_deb.base_chroot(depends)
    script = BOOTED.replace("@CURRENT@", debs["current"].name).replace("@NEXT@", debs["next"].name)
    r = gg_deb.boot_in_overlay(base, tmp_path / "boot", debs["dir"], script)
    assert r.returncode == 0, r.stdout + r.stderr
    f = gg_deb.facts(r.stdout)
    assert f.get("install_rc") == "0", r.stdout + (tmp_path / "boot/console.log").read_text()[-3000:]
    assert f["enabled"] == "enabled"
    assert f["active_after_install"] == "inactive"
    assert f["start_rc"] == "0", r.stdout
    assert f["state"] == "active/running"
    # The daemon's own STATUS= line: no bluetoothd in the container, no meter paired yet.
    assert "0 meters" in f["status_text"] and "bluetoothd" in f["status_text"], f["status_text"]
    assert f["main_user"] == "glucose-gateway"
    assert f["database"] == "600 glucose-gateway"
    assert f["reload_rc"] == "0" and f["after_reload"] == "active same-pid"
    assert f["upgrade_rc"] == "0" and f["after_upgrade"] == "active other-pid"
    assert f["version"] == gg_deb.next_version(gg_deb.version())
    assert f["remove_rc"] == "0" and f["active_after_remove"] in ("inactive", "unknown")
    assert "gateway.sqlite3" in f["database_after_remove"].split()
