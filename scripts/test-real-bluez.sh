#!/usr/bin/env bash
# The gateway against the real Linux Bluetooth stack: Debian's kernel, bluetoothd and dbus-daemon in
# throw-away QEMU VMs, btvirt controllers, real SMP and GATT, the meter played by
# `glucose-gateway-simulator --bluez`, or (the bumble-* scenarios) by a meter on another host stack:
# scripts/real-bluez/bumble/meter.py on Bumble, whose emulated controller is the VM kernel's hci0.
#
#   scripts/test-real-bluez.sh [--list] [--ci] [--release R]... [SCENARIO...]
#
# Scenarios are the files scripts/real-bluez/scenarios/*.sh (a new file is a new scenario). With no
# SCENARIO every one runs (with --ci, or RB_CI=1, only those marked "# rb-ci: yes"). Each prints its steps
# with their exit status; the run ends with "N passed, N failed".
#
# Releases (the VMs' Debian and architecture): bookworm (the host's root, x86_64, the default), trixie
# (a cached Debian 13 root, x86_64), arm64 (a cached Debian 13 arm64 root on qemu's virt board, the
# gateway installed from RB_DEB, the arm64 .deb). --release R (repeatable) or RB_RELEASE=R picks them.
# A scenario names the releases it runs on with "# rb-releases: ..." (default "bookworm trixie") and
# the ones CI runs it on with "# rb-ci-releases: ..." (default "bookworm"); --ci without --release runs
# every scenario marked "rb-ci: yes" on each of its CI releases.
# Exit status: 0 all passed; 1 a scenario failed; 77 skipped: no VM can boot here (the reason is printed).
# Environment: RB_WORK (cache and job directories, default /var/tmp/glucose-gateway-vm), RB_KERNEL_PKG,
# RB_ACCEL (kvm|tcg), RB_GATEWAY_BIN (default .build/debug/glucose-gateway), RB_SCENARIO_TIMEOUT (300 s, or
# the scenario's "# rb-timeout:" line; times 3 on arm64), RB_DEB (arm64: the .deb to install),
# RB_METER_RELEASE (arm64: the x86_64 release of the meter VM, default bookworm; it runs RB_GATEWAY_BIN),
# RB_VM_TIMEOUT (a one-VM scenario's VM life; Bumble's default 400 s). Bumble (pinned in
# scripts/real-bluez/bumble.sh) is installed once with pip into $RB_WORK/bumble-VERSION.
# Scenarios see RB_CI=1 under --ci (a scenario may then run less) and RB_RELEASE.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dir="$here/real-bluez/scenarios"
ci="${RB_CI:-0}"
list=0
wanted=()
releases=()
next_is_release=0
for arg in "$@"; do
    if [[ $next_is_release == 1 ]]; then releases+=("$arg"); next_is_release=0; continue; fi
    case "$arg" in
        --list) list=1 ;;
        --ci) ci=1 ;;
        --release) next_is_release=1 ;;
        --release=*) releases+=("${arg#--release=}") ;;
        -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
        -*) echo "test-real-bluez: unknown option $arg" >&2; exit 64 ;;
        *) wanted+=("$arg") ;;
    esac
done

header() { sed -n "s/^# rb-$2: //p" "$1" | head -n 1; }
releases_of() { local r; r="$(header "$1" releases)"; echo "${r:-bookworm trixie}"; }
ci_releases_of() { local r; r="$(header "$1" ci-releases)"; echo "${r:-bookworm}"; }
((${#releases[@]} == 0)) && [[ -n ${RB_RELEASE:-} ]] && releases=("$RB_RELEASE")
for r in "${releases[@]}"; do
    case "$r" in bookworm|trixie|arm64) ;; *) echo "test-real-bluez: --release bookworm|trixie|arm64 (got '$r')" >&2; exit 64 ;; esac
done
all=()
for f in "$dir"/*.sh; do [[ -e $f ]] && all+=("$(basename "$f" .sh)"); done

if [[ $list == 1 ]]; then
    for s in "${all[@]}"; do
        printf '%-22s ci=%-3s %s\n' "$s" "$(header "$dir/$s.sh" ci)" "$(header "$dir/$s.sh" about)"
        printf '%-22s        topology: %s\n' "" "$(header "$dir/$s.sh" topology)"
        printf '%-22s        releases: %s; in CI on: %s\n' "" "$(releases_of "$dir/$s.sh")" \
            "$([[ "$(header "$dir/$s.sh" ci)" == yes ]] && ci_releases_of "$dir/$s.sh" || echo -)"
    done
    exit 0
fi

# The runs: SCENARIO@RELEASE pairs, grouped by release (one preparation each).
picked=()
if ((${#wanted[@]})); then
    for s in "${wanted[@]}"; do
        [[ -f $dir/$s.sh ]] || { echo "test-real-bluez: no scenario '$s' (see --list)" >&2; exit 64; }
        picked+=("$s")
    done
else
    for s in "${all[@]}"; do
        [[ $ci == 1 && "$(header "$dir/$s.sh" ci)" != yes ]] && continue
        picked+=("$s")
    done
fi
run=()
for r in bookworm trixie arm64; do
    for s in "${picked[@]}"; do
        if ((${#releases[@]})); then
            [[ " ${releases[*]} " == *" $r "* ]] || continue
        elif [[ $ci == 1 ]]; then
            [[ " $(ci_releases_of "$dir/$s.sh") " == *" $r "* ]] || continue
        else
            [[ $r == bookworm ]] || continue
        fi
        run+=("$s@$r")
    done
done

# shellcheck source=real-bluez/lib.sh
source "$here/real-bluez/lib.sh"
# Every scenario runs the gateway binary of this tree (or RB_GATEWAY_BIN): without one, each would boot its
# VMs only to fail on "command not found", so say it once and stop before any VM starts.
# An amd64 release runs this tree's binary (the x86_64 meter VM of an arm64 pair does too: that is
# checked per scenario, since some arm64 scenarios need no meter VM).
for pair in "${run[@]}"; do
    [[ ${pair#*@} == arm64 ]] && continue
    RB_RELEASE=bookworm rb_gateway_bin > /dev/null || exit 2
    break
done
# Prepares RELEASE (kernel, root, initramfs) once; 0, or RB_SKIP / 1 with the reason printed.
declare -A prepared=()
prepare_release() {
    local r="$1"
    [[ -n ${prepared[$r]:-} ]] && return "${prepared[$r]}"
    unset RB_PREPARED RB_ROOT RB_KVER RB_KDIR RB_VMLINUZ RB_INITRD
    RB_RELEASE="$r"
    local t0=$SECONDS status=0
    # On arm64 the gateway comes from RB_DEB (checked per scenario: some need no gateway).
    [[ $r == arm64 ]] || rb_gateway_bin > /dev/null || status=2
    ((status == 0)) && { rb_prepare; status=$?; }
    prepared[$r]=$status
    if [[ $status == "$RB_SKIP" ]]; then
        echo "test-real-bluez: $r skipped: no VM can boot for it here (reason above)"
    elif [[ $status != 0 ]]; then
        echo "test-real-bluez: preparation of $r failed"
    else
        echo "test-real-bluez: $r prepared in $((SECONDS - t0)) s"
    fi
    return "$status"
}

passed=0 failed=0 skipped=0
summary=()
# What each failed scenario printed as failing, repeated after the summary: a CI log is often read from
# its end, and a scenario's own lines may be far above it.
recap=()
transcript="$(mktemp "${TMPDIR:-/tmp}/test-real-bluez.XXXXXX")"
child=""
trap '[[ -n $child ]] && kill -TERM "$child" 2> /dev/null; wait 2> /dev/null; exit 130' INT TERM
trap 'rm -f "$transcript" "$transcript.tee"' EXIT
for pair in "${run[@]}"; do
    s="${pair%@*}" r="${pair#*@}"
    label="$s"
    ((${#releases[@]} > 1)) || [[ $ci == 1 || $r != bookworm ]] && label="$s@$r"
    if ! prepare_release "$r"; then
        st="${prepared[$r]}"
        if [[ $st == "$RB_SKIP" ]]; then
            skipped=$((skipped + 1)); summary+=("$(printf '%-30s %-28s %4ss' "$label" "skipped (no VM)" 0)")
        else
            failed=$((failed + 1)); summary+=("$(printf '%-30s %-28s %4ss' "$label" "FAILED (preparation)" 0)")
        fi
        continue
    fi
    if [[ " $(releases_of "$dir/$s.sh") " != *" $r "* ]]; then
        echo "=== scenario $label: skipped: it runs on $(releases_of "$dir/$s.sh") only"
        skipped=$((skipped + 1)); summary+=("$(printf '%-30s %-28s %4ss' "$label" "skipped (not for $r)" 0)")
        continue
    fi
    # Debian's arm64 kernel is built without hci_vhci (CONFIG_BT_HCIVHCI is not set; the amd64 one has it
    # as a module): no btvirt controller can exist in such a VM. A two-VM scenario (rb_two_vms) still
    # runs: its meter VM is an x86_64 one and the gateway VM's controller comes over a virtio console as
    # an H4 UART; so does one that asks rb_kernel_has_vhci itself (systemd). Any other scenario that
    # needs Bluetooth is skipped with that reason.
    if [[ "$(header "$dir/$s.sh" needs-bluetooth)" != no ]] && ! rb_kernel_has_vhci; then
        if ! grep -q '^rb_two_vms \|rb_kernel_has_vhci' "$dir/$s.sh"; then
            echo "=== scenario $label: skipped: kernel $RB_KVER has no hci_vhci (CONFIG_BT_HCIVHCI is not set), so no btvirt controller"
            skipped=$((skipped + 1)); summary+=("$(printf '%-30s %-28s %4ss' "$label" "skipped (no hci_vhci)" 0)")
            continue
        fi
        # Its meter VM runs this tree's x86_64 simulator.
        if ! RB_RELEASE="$RB_METER_RELEASE" rb_gateway_bin > /dev/null; then
            failed=$((failed + 1)); summary+=("$(printf '%-30s %-28s %4ss' "$label" "FAILED (no meter binary)" 0)")
            continue
        fi
    fi
    if [[ $r == arm64 && "$(header "$dir/$s.sh" needs-gateway)" != no ]] && ! rb_gateway_bin > /dev/null; then
        echo "=== scenario $label: skipped: no arm64 package (set RB_DEB to the arm64 .deb)"
        skipped=$((skipped + 1)); summary+=("$(printf '%-30s %-28s %4ss' "$label" "skipped (no RB_DEB)" 0)")
        continue
    fi
    echo "=== scenario $label: $(header "$dir/$s.sh" about)"
    echo "    topology: $(header "$dir/$s.sh" topology)"
    t0=$SECONDS
    # A scenario may ask for a longer limit with "# rb-timeout: SECONDS"; RB_SCENARIO_TIMEOUT wins.
    limit="${RB_SCENARIO_TIMEOUT:-$(header "$dir/$s.sh" timeout)}"
    limit=$(( ${limit:-300} * ${RB_SLOW:-1} ))
    RB_SCENARIO="$s" RB_CI="$ci" RB_RELEASE="$r" timeout --kill-after=10 "$limit" bash "$dir/$s.sh" \
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
        recap+=("--- $label (exit $rc):")
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
    echo "=== scenario $label: $verdict in ${took}s"
    summary+=("$(printf '%-30s %-28s %4ss' "$label" "$verdict" "$took")")
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
