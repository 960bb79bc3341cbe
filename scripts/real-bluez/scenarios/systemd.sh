# rb-about: real systemd as PID 1: the gateway installed by scripts/install.sh runs as the shipped unit (every hardening line), READY=1 and STATUS=, watchdog, reload with a bad config, stop within 5 s, the udev rule, a real-BlueZ download and an upload under the unit
# rb-topology: one VM, systemd PID 1, one bluetoothd; btvirt's hci0 is the gateway's, hci1 the meter's (simulate-meter --bluez); a Nightscout double on the guest's loopback
# rb-ci: yes
# rb-releases: bookworm trixie arm64
# rb-ci-releases: bookworm trixie
# rb-timeout: 450
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
gg="$(rb_gateway_bin)" || exit 1
job="$(rb_job_dir systemd)"
t0=$SECONDS
# arm64: the package is installed with apt in the VM instead of scripts/install.sh.
deb=()
[[ $RB_RELEASE == arm64 ]] && deb=(--env "RB_DEB=$RB_DEB")
rb_boot vm --job "$job" --init "$RB_LIBDIR/systemd-preinit.sh" --timeout "${RB_VM_TIMEOUT:-420}" "${deb[@]}" \
    --init-arg "$RB_LIBDIR/systemd-checks.sh" --init-arg "$RB_REPO" --init-arg "$gg" || exit $?
rb_wait vm
status=$?
rb_console_steps vm
rb_log "VM exit $status, $((SECONDS - t0)) s; logs in $job (journal.txt in $job/vm/)"
((status == 125)) && rb_console_tail vm 40
exit "$status"
