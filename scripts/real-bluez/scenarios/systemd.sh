# rb-about: real systemd as PID 1: the gateway installed by scripts/install.sh runs as the shipped unit (every hardening line), READY=1 and STATUS=, watchdog, reload with a bad config, stop within 5 s, the udev rule, a real-BlueZ download and an upload under the unit
# rb-topology: one VM, systemd PID 1, one bluetoothd; btvirt's hci0 is the gateway's, hci1 the meter's (glucose-gateway-simulator --bluez); a Nightscout double on the guest's loopback (arm64: the meter in an x86_64 VM, the gateway VM's hci0 over a virtio console)
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
# A diagnosis (the run then fails its unit-property check): MemoryDenyWriteExecute off by a drop-in.
[[ -n ${RB_SYSTEMD_WITHOUT_MDWE:-} ]] && deb+=(--env "RB_SYSTEMD_WITHOUT_MDWE=$RB_SYSTEMD_WITHOUT_MDWE")
# A kernel without hci_vhci (Debian's arm64): the meter is guest/meter.sh in an x86_64 VM running
# btvirt's server, and this VM's only controller comes over a virtio console attached with btattach.
air=()
if ! rb_kernel_has_vhci; then
    mbin="$(RB_RELEASE="$RB_METER_RELEASE" rb_gateway_bin)" || exit 1
    rb_boot meter --job "$job" --release "$RB_METER_RELEASE" --smp 1 --air server --timeout "${RB_VM_TIMEOUT:-420}" \
        --env "RB_GATEWAY_BIN=$mbin" -- "$RB_LIBDIR/guest/meter.sh" || exit $?
    air=(--air uart)
fi
rb_boot vm --job "$job" --init "$RB_LIBDIR/systemd-preinit.sh" --timeout "${RB_VM_TIMEOUT:-420}" "${deb[@]}" "${air[@]}" \
    --init-arg "$RB_LIBDIR/systemd-checks.sh" --init-arg "$RB_REPO" --init-arg "$gg" || exit $?
rb_wait vm
status=$?
touch "$job/gateway.done"
if ((${#air[@]})); then
    rb_wait meter
    ms=$?
    rb_console_steps meter
    ((ms != 0)) && rb_log "meter VM exit $ms"
fi
rb_console_steps vm
rb_log "VM exit $status, $((SECONDS - t0)) s; logs in $job (journal.txt in $job/vm/)"
((status == 125)) && rb_console_tail vm 40
exit "$status"
