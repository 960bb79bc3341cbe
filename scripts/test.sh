#!/usr/bin/env bash
# The whole test suite from nothing: installs what is missing, builds, runs the Swift tests and the
# system tests (private dbus-daemon, the meter simulator, loopback HTTP servers, bleak and bluezoo), then
# the real-Bluetooth-stack scenarios in VMs (skipped, with the reason, where no VM can boot).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$here"
source scripts/install-deps.sh --test
export PATH="/opt/swift/usr/bin:$PATH"

# The package tests' Debian chroot (SystemTests/gg_deb.py) waits on the mirror more than on the CPU:
# bootstrap it while the gateway builds (as root only, as those tests need; they redo it if this failed).
chroot_job=""
chroot_log=""
if [[ $(id -u) == 0 ]]; then
    chroot_log="$(mktemp)"
    (cd SystemTests && exec setsid "$here/.venv/bin/python" -c 'import gg_deb; gg_deb.bootstrap_chroot()') > "$chroot_log" 2>&1 &
    chroot_job=$!
fi
# The same for the Debian 13 (trixie) root with Debian's Swift 6.0.3 (scripts/trixie-root.sh), in which
# the arm64 package is cross-compiled below: the oldest Swift the product builds with, and the toolchain a
# Raspberry Pi OS user can install. Cached under /var/tmp/glucose-gateway-trixie: only a cold run makes it.
trixie_job=""
trixie_log=""
if [[ $(id -u) == 0 ]]; then
    trixie_log="$(mktemp)"
    setsid scripts/trixie-root.sh prepare > "$trixie_log" 2>&1 &
    trixie_job=$!
fi
trap '[[ -n $chroot_job ]] && kill -TERM -- "-$chroot_job" 2> /dev/null; [[ -n $trixie_job ]] && kill -TERM -- "-$trixie_job" 2> /dev/null
      rm -f ${chroot_log:+"$chroot_log"} ${trixie_log:+"$trixie_log"}' EXIT

echo "== build"
swift build --build-tests

echo "== swift tests"
set +e
# Two kinds of Swift test targets (Package.swift). The pure ones (`...Tests`: in-process, no child process,
# no bus, no socket server) run side by side. The integration ones (`...IntegrationTests`: a private
# dbus-daemon, bluezoo, the Python servers, mosquitto, loopback HTTP servers, a child writer) run one test at
# a time: they wait on real clocks and real processes, and on a 2-core machine the shared concurrency pool
# has two threads, so running them side by side only makes their waits flaky. Between them the two runs
# cover every test target.
# A test that never ends must fail the suite, not hold it until the CI's own limit: after the time below
# (about three times what the Swift tests take here) every process of the run gets SIGTERM, which makes
# the test runner write out what it holds (the test that started and did not end), then SIGKILL a
# minute later.
integration='^[A-Za-z]+IntegrationTests\.'
swift_limit="${GG_SWIFT_TEST_LIMIT:-25m}"
timeout --kill-after=60s "$swift_limit" swift test --skip-build --parallel --skip "$integration"
swift_pure_failed=$?
timeout --kill-after=60s "$swift_limit" swift test --skip-build --no-parallel --filter "$integration"
swift_failed=$?
for status in "$swift_pure_failed" "$swift_failed"; do
    [[ $status == 124 || $status == 137 ]] && echo "swift tests still running after $swift_limit: stopped (see the last test started above)" >&2
done
[[ $swift_failed == 0 ]] && swift_failed=$swift_pure_failed
set -e

echo "== arm64 package (cross-compiled with Debian trixie's Swift 6.0.3)"
# Built here, after the Swift tests and before the system tests, so the compiler has the CPU to itself;
# SystemTests/test_deb_arm64.py then checks the cached package (gg_deb.cross_package).
arm64_status=0
if [[ -n $trixie_job ]]; then
    wait "$trixie_job" || { echo "making the trixie root failed:"; tail -n 20 "$trixie_log"; }
    trixie_job=""
    set +e
    arm64_deb="$(cd SystemTests && "$here/.venv/bin/python" -c 'import gg_deb; print(gg_deb.cross_package("arm64"))')"
    arm64_status=$?
    set -e
    # The emulated Raspberry Pi of the real-stack bed installs this package (scenarios on release arm64).
    arm64_deb="${arm64_deb##*$'\n'}"
    if [[ $arm64_status == 0 && -f $arm64_deb ]]; then
        echo "$arm64_deb"
        export RB_DEB="${RB_DEB:-$arm64_deb}"
    fi
else
    echo "skipped: building the arm64 package needs root (debootstrap, chroot)"
fi

echo "== system tests"
if [[ -n $chroot_job ]]; then
    wait "$chroot_job" || { echo "bootstrapping the package tests' chroot failed (they try again):"; tail -n 20 "$chroot_log"; }
    chroot_job=""
fi
export GLUCOSE_GATEWAY_BIN="$here/.build/debug/glucose-gateway"
export GLUCOSE_GATEWAY_SIMULATOR_BIN="$here/.build/debug/glucose-gateway-simulator"
set +e
# Two test files at a time (pytest-xdist): they mostly wait on servers, kills and compressed hours; a
# file's tests stay together on one worker, and the shared package and chroot caches are locked.
"$here/.venv/bin/python" -m pytest -q -p no:cacheprovider -n 2 --dist loadfile SystemTests
py_status=$?
set -e
[[ $py_status == 5 ]] && py_status=0   # no system test collected yet is not a failure of the build

echo "== real Bluetooth stack (kernel, bluetoothd, dbus-daemon in VMs)"
# The CI subset (scripts/test-real-bluez.sh --list shows which); RB_SCENARIOS="all" or names run others.
set +e
if [[ ${RB_SCENARIOS:-ci} == ci ]]; then
    scripts/test-real-bluez.sh --ci
elif [[ $RB_SCENARIOS == all ]]; then
    scripts/test-real-bluez.sh
else
    # shellcheck disable=SC2086
    scripts/test-real-bluez.sh $RB_SCENARIOS
fi
vm_status=$?
set -e
if [[ $vm_status == 77 ]]; then
    echo "real-stack tests skipped: no VM can boot on this machine (reason above)"
    vm_status=0
fi

if [[ $swift_failed != 0 || $arm64_status != 0 || $py_status != 0 || $vm_status != 0 ]]; then
    echo "test suite FAILED (swift: $swift_failed, arm64 package: $arm64_status, system: $py_status, real stack: $vm_status)" >&2
    exit 1
fi
echo "test suite passed"
