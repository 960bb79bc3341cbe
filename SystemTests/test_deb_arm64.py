"""The arm64 Debian package for Raspberry Pi OS / Debian 13 (`scripts/package-deb.sh --arch arm64`):
cross-compiled on this machine with Debian trixie's own Swift toolchain in the trixie root of
scripts/trixie-root.sh, then checked here: its control data says arm64 with dependencies computed for
arm64, its program is an aarch64 ELF with the Swift runtime linked in, never writable and executable at
once, with RELRO and immediate binding, lintian reports no error, and qemu-aarch64-static runs it (with
the root's arm64 C libraries) for --help and a decode.

Building the package and the root needs root (debootstrap, chroot, mounts), as CI runs."""
import json
import os
import re

import pytest

import gg_deb

ROOT = os.geteuid() == 0
VECTOR = "1b 34 12 e8 07 03 05 0e 1e 0f 3c 00 6f b0 11 01 00"   # 111 mg/dL, sequence 4660, as test_decode.py


def sh(*args, **kw):
    return gg_deb.sh(*args, **kw)


@pytest.fixture(scope="module")
def deb():
    assert ROOT, "building the arm64 package needs root (debootstrap, chroot, mounts), as CI runs"
    return gg_deb.cross_package("arm64")


@pytest.fixture(scope="module")
def program(deb, tmp_path_factory):
    """The package's /usr/bin/glucose-gateway, unpacked."""
    out = tmp_path_factory.mktemp("arm64")
    r = sh("dpkg-deb", "-x", str(deb), str(out))
    assert r.returncode == 0, r.stderr
    return out / "usr/bin/glucose-gateway"


@pytest.fixture(scope="module")
def run_arm64(program):
    gg_deb.ensure_host_packages("qemu-user-static")
    sysroot = gg_deb.trixie_root()

    def run(*args):
        return sh("qemu-aarch64-static", "-L", str(sysroot), str(program), *args, timeout=120)
    return run


def test_control_data_says_arm64_with_arm64_dependencies(deb):
    info = sh("dpkg-deb", "-I", str(deb)).stdout
    assert re.search(r"^ Architecture: arm64$", info, re.M), info
    assert re.search(r"^ Package: glucose-gateway$", info, re.M) and re.search(rf"^ Version: {re.escape(gg_deb.version())}$", info, re.M)
    depends = re.search(r"^ Depends: (.*)$", info, re.M).group(1)
    # dpkg-shlibdeps found the arm64 libraries the program links (through the trixie root's dpkg database).
    assert re.search(r"\blibc6 \(>= 2\.\d+\)", depends) and "libdbus-1-3" in depends and "libsqlite3-0" in depends, depends
    assert "swift" not in depends, depends
    assert "bluez" in depends and "systemd" in depends, depends


def test_program_is_aarch64_with_the_swift_runtime_linked_in(program):
    assert "ARM aarch64" in sh("file", "-b", str(program)).stdout
    header = sh("readelf", "-h", str(program)).stdout
    assert re.search(r"Machine:\s+AArch64", header), header
    dynamic = sh("readelf", "-d", str(program)).stdout
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^]]+)\]", dynamic)
    assert "libdbus-1.so.3" in needed and "libsqlite3.so.0" in needed, needed
    assert not [n for n in needed if re.match(r"lib(swift|Foundation|dispatch|BlocksRuntime)", n)], needed
    assert "RPATH" not in dynamic and "RUNPATH" not in dynamic
    assert "BIND_NOW" in dynamic
    assert ".symtab" not in sh("readelf", "-SW", str(program)).stdout   # stripped


def load_segments(program):
    """[(flags, type)] of the program headers, e.g. ("R E", "LOAD"), from readelf -lW."""
    headers = sh("readelf", "-lW", str(program)).stdout
    found = re.findall(r"^\s+([A-Z_]+)\s+0x[0-9a-f]+\s+0x[0-9a-f]+\s+0x[0-9a-f]+\s+0x[0-9a-f]+\s+0x[0-9a-f]+\s+([RWE ]+?)\s+0x[0-9a-f]+$",
                       headers, re.M)
    assert found, headers
    return [(flags, kind) for kind, flags in found], headers


def test_program_is_never_writable_and_executable(program):
    """W^X for a network-facing daemon: code in a read-and-execute LOAD segment of its own, the read-only
    data apart from it, and no LOAD segment both writable and executable."""
    segments, headers = load_segments(program)
    loads = [flags.replace(" ", "") for flags, kind in segments if kind == "LOAD"]
    assert not [f for f in loads if "W" in f and "E" in f], headers
    assert "RE" in loads and "R" in loads and "RW" in loads, headers


def test_program_has_relro_with_immediate_binding(program):
    """The relocated data (the GOT, .data.rel.ro, the conformance records) read-only after start: a
    GNU_RELRO segment, and immediate binding so that the PLT's GOT entries are covered by it too."""
    segments, headers = load_segments(program)
    assert "GNU_RELRO" in [kind for _, kind in segments], headers
    dynamic = sh("readelf", "-d", str(program)).stdout
    assert re.search(r"\(FLAGS\)\s+.*\bBIND_NOW\b", dynamic), dynamic
    assert re.search(r"\(FLAGS_1\)\s+Flags:.*\bNOW\b", dynamic), dynamic


def test_libstdcxx_is_linked_in(program):
    """The runtime's few libstdc++ functions come from its archive: no libstdc++.so.6 to load at start."""
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^]]+)\]", sh("readelf", "-d", str(program)).stdout)
    assert needed and not [n for n in needed if n.startswith("libstdc++")], needed


def test_lintian_reports_no_errors(deb):
    gg_deb.ensure_host_packages("lintian")
    r = sh("lintian", "--display-info", "--pedantic", "--fail-on", "error", str(deb), timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert not [l for l in r.stdout.splitlines() if l.startswith("E: ")], r.stdout
    # Its hardening checks agree with the program headers above.
    assert "hardening-no-relro" not in r.stdout and "hardening-no-bindnow" not in r.stdout, r.stdout


def test_help_runs_under_qemu(run_arm64):
    r = run_arm64("--help")
    assert r.returncode == 0, r.stderr
    assert re.match(r"^usage: glucose-gateway \[--config PATH\] .*COMMAND \[ARGS\.\.\.\]$", r.stdout.splitlines()[0]), r.stdout
    assert "decode" in r.stdout and "run" in r.stdout


def test_decode_runs_under_qemu(run_arm64):
    r = run_arm64("decode", "--compact", "2a18", VECTOR)
    assert r.returncode == 0, r.stderr
    value = json.loads(r.stdout)
    assert (value["sequence"], value["mg_dl"], value["mmol_l"]) == (4660, 111.0, 6.16)
    assert value["base_time"] == "2024-03-05T14:30:15" and value["user_facing_time"] == "2024-03-05T15:30:15"
    assert value["sensor_status"] == ["battery_low"] and value["context_follows"] is True


def test_decode_refuses_bad_hex_under_qemu(run_arm64):
    r = run_arm64("decode", "2a18", "1b 34 zz")
    assert r.returncode == 65, (r.returncode, r.stdout, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and r.stdout == ""
