#!/usr/bin/env bash
# The gateway against the real Linux Bluetooth stack: Debian's kernel, bluetoothd and dbus-daemon in
# throw-away QEMU VMs, btvirt controllers, real SMP and GATT, the meter played by
# `glucose-gateway simulate-meter --bluez`.
#
#   scripts/test-real-bluez.sh [--list] [--ci] [SCENARIO...]
#
# Scenarios are the files scripts/real-bluez/scenarios/*.sh (a new file is a new scenario). With no
# SCENARIO every one runs (with --ci, or RB_CI=1, only those marked "# rb-ci: yes"). Each prints its steps
# with their exit status; the run ends with "N passed, N failed".
# Exit status: 0 all passed; 1 a scenario failed; 77 skipped: no VM can boot here (the reason is printed).
# Environment: RB_WORK (cache and job directories, default /var/tmp/glucose-gateway-vm), RB_KERNEL_PKG,
# RB_ACCEL (kvm|tcg), RB_GATEWAY_BIN (default .build/debug/glucose-gateway), RB_SCENARIO_TIMEOUT (300 s, or
# the scenario's "# rb-timeout:" line). Scenarios see RB_CI=1 under --ci (a scenario may then run less).
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="$here/real-bluez/scenarios"
ci="${RB_CI:-0}"
list=0
wanted=()
for arg in "$@"; do
    case "$arg" in
        --list) list=1 ;;
        --ci) ci=1 ;;
        -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) echo "test-real-bluez: unknown option $arg" >&2; exit 64 ;;
        *) wanted+=("$arg") ;;
    esac
done

header() { sed -n "s/^# rb-$2: //p" "$1" | head -n 1; }
all=()
for f in "$dir"/*.sh; do [[ -e $f ]] && all+=("$(basename "$f" .sh)"); done

if [[ $list == 1 ]]; then
    for s in "${all[@]}"; do
        printf '%-22s ci=%-3s %s\n' "$s" "$(header "$dir/$s.sh" ci)" "$(header "$dir/$s.sh" about)"
        printf '%-22s        topology: %s\n' "" "$(header "$dir/$s.sh" topology)"
    done
    exit 0
fi

run=()
if ((${#wanted[@]})); then
    for s in "${wanted[@]}"; do
        [[ -f $dir/$s.sh ]] || { echo "test-real-bluez: no scenario '$s' (see --list)" >&2; exit 64; }
        run+=("$s")
    done
else
    for s in "${all[@]}"; do
        [[ $ci == 1 && "$(header "$dir/$s.sh" ci)" != yes ]] && continue
        run+=("$s")
    done
fi

# shellcheck source=real-bluez/lib.sh
source "$here/real-bluez/lib.sh"
# Every scenario runs the gateway binary of this tree (or RB_GATEWAY_BIN): without one, each would boot its
# VMs only to fail on "command not found", so say it once and stop before any VM starts.
rb_gateway_bin > /dev/null || exit 2
rb_prepare
status=$?
if [[ $status == "$RB_SKIP" ]]; then
    echo "test-real-bluez: skipped: no VM can boot on this machine (reason above)"
    exit "$RB_SKIP"
elif [[ $status != 0 ]]; then
    echo "test-real-bluez: preparation failed"
    exit 1
fi

passed=0 failed=0 skipped=0
summary=()
# What each failed scenario printed as failing, repeated after the summary: a CI log is often read from
# its end, and a scenario's own lines may be far above it.
recap=()
transcript="$(mktemp "${TMPDIR:-/tmp}/test-real-bluez.XXXXXX")"
child=""
trap '[[ -n $child ]] && kill -TERM "$child" 2> /dev/null; wait 2> /dev/null; exit 130' INT TERM
trap 'rm -f "$transcript" "$transcript.tee"' EXIT
for s in "${run[@]}"; do
    echo "=== scenario $s: $(header "$dir/$s.sh" about)"
    echo "    topology: $(header "$dir/$s.sh" topology)"
    t0=$SECONDS
    # A scenario may ask for a longer limit with "# rb-timeout: SECONDS"; RB_SCENARIO_TIMEOUT wins.
    limit="${RB_SCENARIO_TIMEOUT:-$(header "$dir/$s.sh" timeout)}"
    RB_SCENARIO="$s" RB_CI="$ci" timeout --kill-after=10 "${limit:-300}" bash "$dir/$s.sh" \
        > >(echo "$BASHPID" > "$transcript.tee"; exec tee "$transcript") 2>&1 &
    child=$!
    wait "$child"; rc=$?
    child=""
    # tee ends when the scenario's last writer has closed; give it a moment to write out the rest (an
    # ended tee this shell has not reaped yet is a zombie, state Z).
    tee_pid="$(cat "$transcript.tee" 2> /dev/null)"
    for _ in $(seq 50); do
        [[ -n $tee_pid ]] && [[ "$(awk '{print $3}' "/proc/$tee_pid/stat" 2> /dev/null)" =~ ^[RSD]$ ]] || break
        sleep 0.1
    done
    if [[ $rc != 0 && $rc != "$RB_SKIP" ]]; then
        recap+=("--- $s (exit $rc):")
        while IFS= read -r line; do recap+=("    $line"); done < <(
            grep -a -E 'FAIL|RB-EXIT-CODE=[1-9]|exit [1-9][0-9]* \(want 0\)|timed out|time limit' "$transcript" | head -n 25)
        recap+=("    (the whole transcript is above; the VMs' consoles and logs are in the job directory it names)")
    fi
    took=$((SECONDS - t0))
    if [[ $rc == 0 ]]; then
        verdict=passed; passed=$((passed + 1))
    elif [[ $rc == "$RB_SKIP" ]]; then
        verdict=skipped; skipped=$((skipped + 1))
    else
        verdict="FAILED (exit $rc$([[ $rc == 124 ]] && echo ', time limit'))"; failed=$((failed + 1))
    fi
    echo "=== scenario $s: $verdict in ${took}s"
    summary+=("$(printf '%-22s %-28s %4ss' "$s" "$verdict" "$took")")
done
echo
printf '%s\n' "${summary[@]}"
if ((${#recap[@]})); then
    echo "what the failed scenarios reported as failing:"
    printf '%s\n' "${recap[@]}"
fi
if ((skipped)); then
    echo "$passed passed, $failed failed, $skipped skipped"
else
    echo "$passed passed, $failed failed"
fi
((failed)) && exit 1
((passed == 0 && skipped > 0)) && exit "$RB_SKIP"
exit 0
