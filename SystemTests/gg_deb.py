"""The Debian package for the system tests: built by scripts/package-deb.sh and kept by the content hash
of everything that goes into it, in a work directory outside the repository, so an unchanged tree does
not build it again; and a minimal Debian chroot (debootstrap, the host's release and mirror) with the
package's dependencies preinstalled, in which each test installs the package on a throw-away overlay."""
import fcntl
import hashlib
import os
import pathlib
import re
import shutil
import subprocess
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
DEB_CACHE = pathlib.Path(os.environ.get("GLUCOSE_GATEWAY_DEB_CACHE", "/var/tmp/glucose-gateway-deb"))
CHROOT_CACHE = pathlib.Path(os.environ.get("GLUCOSE_GATEWAY_CHROOT", "/var/tmp/glucose-gateway-chroot"))
# What the package is made of: a change to any of these builds it again.
INPUTS = ["Package.swift", "Sources", "config", "udev", "packaging", "scripts/package-deb.sh", "scripts/package-flags.sh",
          "scripts/install-deps.sh", "scripts/trixie-root.sh", "VERSION", "README.md",
          *(f"docs/{page}.md" for page in ("install", "configuration", "meters", "uploads", "unattended"))]
KEEP_PACKAGES = 4


def sh(*args, timeout=600, **kw):
    return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, **kw)


def architecture():
    return sh("dpkg", "--print-architecture").stdout.strip()


def input_files():
    r = sh("git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", *INPUTS)
    if r.returncode == 0 and r.stdout:
        names = [n for n in r.stdout.split("\0") if n]
    else:
        names = []
        for top in INPUTS:
            p = REPO / top
            if p.is_file():
                names.append(top)
            for dirpath, _, files in os.walk(p):
                names += [str((pathlib.Path(dirpath) / f).relative_to(REPO)) for f in files]
    return sorted(n for n in names if (REPO / n).is_file())


def inputs_hash(arch=None):
    """SHA-256 over the packaged files (as they are in the work tree), the toolchain and the architecture
    (this machine's unless ARCH names another: that package is built with the trixie root's toolchain,
    which scripts/trixie-root.sh, one of the inputs, names)."""
    h = hashlib.sha256()
    for name in input_files():
        h.update(name.encode() + b"\0" + (REPO / name).read_bytes() + b"\0")
    swift = shutil.which("swift") or "/opt/swift/usr/bin/swift"
    h.update(sh(swift, "--version").stdout.encode() if os.path.exists(swift) else b"no swift")
    h.update((arch or architecture()).encode())
    return h.hexdigest()[:20]


def version():
    return (REPO / "VERSION").read_text().strip()


def next_version(v):
    """The version after v: its last numeric component plus one (0.1.0 -> 0.1.1)."""
    m = re.match(r"^(.*?)(\d+)$", v)
    return f"{m.group(1)}{int(m.group(2)) + 1}" if m else v + "+1"


class Locked:
    def __init__(self, path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(path, "a+")

    def __enter__(self):
        fcntl.flock(self.file, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.file, fcntl.LOCK_UN)
        self.file.close()


def packages():
    """{"current": .deb of this tree, "next": the same at the next version, "dir": their directory}.
    Built with scripts/package-deb.sh (with lintian) on a cache miss; the times go to build-times.txt."""
    key = inputs_hash()
    directory = DEB_CACHE / key
    arch = architecture()
    current = directory / f"glucose-gateway_{version()}_{arch}.deb"
    upcoming = directory / f"glucose-gateway_{next_version(version())}_{arch}.deb"
    with Locked(DEB_CACHE / ".lock"):
        if not (directory / "complete").exists():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
            times = []
            # The next version packages the same binary again (--binary), without a second lintian run.
            binary = directory / "glucose-gateway.built"
            simulator = directory / "glucose-gateway-simulator.built"
            for v, options in ((version(), []), (next_version(version()), ["--binary", str(binary), "--simulator", str(simulator),
                                                                            "--no-lintian"])):
                started = time.monotonic()
                env = dict(os.environ, GLUCOSE_GATEWAY_VERSION=v)
                r = sh(str(REPO / "scripts/package-deb.sh"), "--output", str(directory), *options, env=env, timeout=1800)
                (directory / f"package-{v}.log").write_text(r.stdout + r.stderr)
                if r.returncode != 0:
                    raise AssertionError(f"package-deb.sh failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
                times.append(f"{v}: {time.monotonic() - started:.1f} s")
                if not binary.exists():
                    extracted = directory / "extracted"
                    subprocess.run(["dpkg-deb", "-x", str(current), str(extracted)], check=True, timeout=120)
                    shutil.move(str(extracted / "usr/bin/glucose-gateway"), binary)
                    shutil.move(str(extracted / "usr/libexec/glucose-gateway/glucose-gateway-simulator"), simulator)
                    shutil.rmtree(extracted)
            (directory / "build-times.txt").write_text("\n".join(times) + "\n")
            (directory / "complete").write_text(key + "\n")
        os.utime(directory)
        # Keep the most recent few (other work trees may be using theirs).
        others = sorted((d for d in DEB_CACHE.iterdir() if d.is_dir() and d != directory),
                        key=lambda d: d.stat().st_mtime, reverse=True)
        for old in others[KEEP_PACKAGES - 1:]:
            shutil.rmtree(old, ignore_errors=True)
    assert current.exists() and upcoming.exists(), sorted(os.listdir(directory))
    return {"current": current, "next": upcoming, "dir": directory}


def cross_package(arch="arm64"):
    """The .deb for ARCH (another architecture than this machine's) built by `scripts/package-deb.sh --arch
    ARCH` (cross-compiled in the trixie root, with lintian), cached as `packages` caches this machine's."""
    key = inputs_hash(arch)
    directory = DEB_CACHE / f"{arch}-{key}"
    deb = directory / f"glucose-gateway_{version()}_{arch}.deb"
    with Locked(DEB_CACHE / ".lock"):
        if not (directory / "complete").exists():
            shutil.rmtree(directory, ignore_errors=True)
            directory.mkdir(parents=True)
            started = time.monotonic()
            r = sh(str(REPO / "scripts/package-deb.sh"), "--arch", arch, "--output", str(directory), timeout=3600)
            (directory / "package.log").write_text(r.stdout + r.stderr)
            if r.returncode != 0:
                raise AssertionError(f"package-deb.sh --arch {arch} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
            (directory / "build-times.txt").write_text(f"{version()}: {time.monotonic() - started:.1f} s\n")
            (directory / "complete").write_text(key + "\n")
        os.utime(directory)
        others = sorted((d for d in DEB_CACHE.iterdir() if d.is_dir() and d.name.startswith(f"{arch}-") and d != directory),
                        key=lambda d: d.stat().st_mtime, reverse=True)
        for old in others[KEEP_PACKAGES - 1:]:
            shutil.rmtree(old, ignore_errors=True)
    assert deb.exists(), sorted(os.listdir(directory))
    return deb


def trixie_root():
    """The trixie root of scripts/trixie-root.sh (made if missing): it holds the arm64 C run-time, so
    qemu-aarch64-static -L ROOT runs an arm64 binary of the package on this machine."""
    r = sh(str(REPO / "scripts/trixie-root.sh"), "prepare", timeout=3600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return pathlib.Path(r.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------------------------- chroot

def host_release_and_mirror():
    """(codename, mirror URI) of this machine's Debian: the chroot is the release the package was built on."""
    release = {}
    for line in pathlib.Path("/etc/os-release").read_text().splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            release[k] = v.strip('"')
    codename = release.get("VERSION_CODENAME", "")
    assert codename, "no VERSION_CODENAME in /etc/os-release"
    candidates = []
    sources = pathlib.Path("/etc/apt/sources.list.d")
    for f in sorted(sources.glob("*.sources")) if sources.is_dir() else []:
        for stanza in f.read_text().split("\n\n"):
            fields = {}
            for line in stanza.splitlines():
                if ":" in line and not line.startswith(("#", " ")):
                    k, v = line.split(":", 1)
                    fields[k.strip().lower()] = v.split()
            if "deb" in fields.get("types", []) and codename in fields.get("suites", []) \
                    and "main" in fields.get("components", []) and fields.get("enabled", ["yes"]) != ["no"]:
                candidates += fields.get("uris", [])
    listfile = pathlib.Path("/etc/apt/sources.list")
    if listfile.exists():
        for line in listfile.read_text().splitlines():
            words = re.sub(r"\[[^]]*\]", "", line).split()
            if len(words) >= 4 and words[0] == "deb" and words[2] == codename and "main" in words[3:]:
                candidates.append(words[1])
    assert candidates, f"no apt source for {codename} main on this machine"
    return codename, candidates[0]


def ensure_host_packages(*names):
    missing = [n for n in names if "install ok installed" not in sh("dpkg-query", "-W", "-f=${Status}", n).stdout]
    if missing:
        assert sh("apt-get", "-o", "DPkg::Lock::Timeout=600", "update", "-qq", timeout=900).returncode == 0
        r = sh("apt-get", "-o", "DPkg::Lock::Timeout=600", "install", "-y", "-qq", "--no-install-recommends", *missing,
               env=dict(os.environ, DEBIAN_FRONTEND="noninteractive"), timeout=900)
        assert r.returncode == 0, r.stdout + r.stderr


# Runs a script inside ROOT (a directory) in a private mount namespace with /proc and /dev: nothing
# mounted outlives the command.
IN_ROOT = r"""
set -euo pipefail
root="$1"; shift
mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 HOME=/root /bin/bash -c "$@"
"""


def in_root(root, script, timeout=900):
    return sh("unshare", "--mount", "--propagation", "private", "bash", "-c", IN_ROOT, "in-root", str(root), script,
              timeout=timeout)


# Beside the package's dependencies: man-db, so that `systemd-analyze verify` can check the unit's
# Documentation=man: page, as on a usual system.
EXTRAS = "man-db"


def _debootstrapped():
    """(root, marker) of the minimal chroot of this machine's release, bootstrapped if it is not yet;
    the caller holds the chroot lock."""
    codename, mirror = host_release_and_mirror()
    root = CHROOT_CACHE / f"{codename}-{architecture()}"
    complete = root.with_name(root.name + ".debootstrap-complete")
    if not complete.exists():
        ensure_host_packages("debootstrap")
        shutil.rmtree(root, ignore_errors=True)
        root.parent.mkdir(parents=True, exist_ok=True)
        r = sh("debootstrap", "--variant=minbase", f"--arch={architecture()}", codename, str(root), mirror,
               timeout=1800)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        policy = root / "usr/sbin/policy-rc.d"
        policy.write_text("#!/bin/sh\n# No service starts in this chroot.\nexit 101\n")
        policy.chmod(0o755)
        complete.write_text(f"{codename} {mirror}\n")
    return root, root.with_name(root.name + ".dependencies")


def bootstrap_chroot():
    """Only the debootstrap part of `base_chroot` (which needs the built package's Depends): scripts/test.sh
    runs it while the gateway builds, since it waits on the mirror more than on the CPU."""
    with Locked(CHROOT_CACHE / ".lock"):
        return _debootstrapped()[0]


def base_chroot(depends):
    """A minimal chroot of this machine's release with DEPENDS (a Depends field) and EXTRAS, cached under
    CHROOT_CACHE and built again only when DEPENDS changes. Returns its path. No service starts in it
    (policy-rc.d), and the package itself is never installed in it."""
    with Locked(CHROOT_CACHE / ".lock"):
        root, marker = _debootstrapped()
        wanted = f"{depends}, {EXTRAS}"
        if not marker.exists() or marker.read_text() != wanted:
            (root / "tmp/glucose-gateway-depends").write_text(wanted)
            r = in_root(root, 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get satisfy -y -qq '
                              '--no-install-recommends "$(cat /tmp/glucose-gateway-depends)" && apt-get clean '
                              '&& rm /tmp/glucose-gateway-depends', timeout=1800)
            assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
            marker.write_text(wanted)
    return root


IN_OVERLAY = r"""
set -euo pipefail
base="$1"; work="$2"; debs="$3"; script="$4"; shift 4
mkdir -p "$work/upper" "$work/work" "$work/merged"
mount -t overlay overlay -o "lowerdir=$base,upperdir=$work/upper,workdir=$work/work" "$work/merged"
root="$work/merged"
mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
mkdir -p "$root/packages"
mount --bind -o ro "$debs" "$root/packages"
exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 HOME=/root /bin/bash -c "$script" script "$@"
"""


def in_overlay(base, work, debs, script, *args, timeout=300):
    """Runs SCRIPT (with ARGS as $1...) in an overlay of BASE whose changes go to WORK; DEBS is at
    /packages, read-only."""
    work.mkdir(parents=True, exist_ok=True)
    return sh("unshare", "--mount", "--propagation", "private", "bash", "-c", IN_OVERLAY, "in-overlay",
              str(base), str(work), str(debs), script, *args, timeout=timeout)


def facts(output):
    """key=value lines of a script's output as a dict (a repeated key keeps every value, in a list)."""
    out = {}
    for line in output.splitlines():
        if "=" in line and re.match(r"^[a-z0-9_./-]+=", line):
            k, v = line.split("=", 1)
            if k in out:
                out[k] = out[k] if isinstance(out[k], list) else [out[k]]
                out[k].append(v)
            else:
                out[k] = v
    return out


# Boots systemd (systemd-nspawn --boot) in an overlay of BASE with the packages at /packages; a oneshot
# unit runs SCRIPT once the system is up, writes its output to /scenario.out and powers the container off.
BOOT = r"""
set -euo pipefail
base="$1"; work="$2"; debs="$3"; script="$4"; timeout="$5"
mkdir -p "$work/upper" "$work/work" "$work/merged"
mount -t overlay overlay -o "lowerdir=$base,upperdir=$work/upper,workdir=$work/work" "$work/merged"
root="$work/merged"
rm -f "$root/usr/sbin/policy-rc.d"
printf '%s\n' "$script" > "$root/scenario.sh"
chmod 755 "$root/scenario.sh"
cat > "$root/etc/systemd/system/package-scenario.service" <<'UNIT'
[Unit]
Description=Package scenario of the glucose-gateway tests
After=multi-user.target
[Service]
Type=oneshot
ExecStart=/bin/bash -c '/scenario.sh > /scenario.out 2>&1'
ExecStopPost=/usr/bin/systemctl --no-block poweroff
UNIT
mkdir -p "$root/etc/systemd/system/multi-user.target.wants"
ln -s /etc/systemd/system/package-scenario.service "$root/etc/systemd/system/multi-user.target.wants/"
timeout "$timeout" systemd-nspawn -q --register=no --keep-unit -D "$root" --bind-ro="$debs:/packages" --boot \
    < /dev/null > "$work/console.log" 2>&1 || echo "nspawn-exit=$?"
cat "$root/scenario.out" 2>/dev/null || echo "no-scenario-output"
"""


def boot_in_overlay(base, work, debs, script, timeout=240):
    """Runs SCRIPT under a booted systemd (PID 1 of a container) on an overlay of BASE; returns the
    completed process whose stdout is the script's output."""
    ensure_host_packages("systemd-container")
    work.mkdir(parents=True, exist_ok=True)
    return sh("unshare", "--mount", "--propagation", "private", "bash", "-c", BOOT, "boot",
              str(base), str(work), str(debs), script, str(timeout), timeout=timeout + 60)
