# rb-about: run (the daemon) picks up new records while the meter advertises in bursts (8 s on / 10 s off, a new record every 14 s)
# rb-topology: two VMs: own kernel + bluetoothd each; the daemon scans all the time, which the virtio-serial air carries
# rb-ci: no
# rb-releases: bookworm trixie arm64
# Not in the CI subset: the daemon coming back for new records runs in controller, bluetoothd-restart and systemd.
# Both new records come while the meter is not advertising (at 14 s, in the pause from 8 to 18 s; at 28 s,
# in the pause from 26 to 36 s), so each must wait for the next burst.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
rb_two_vms "$RB_LIBDIR/guest/meter.sh" "$RB_LIBDIR/guest/gw-daemon.sh" \
    --env 'RB_METER_EXTRA={"advertising": {"onSeconds": 8, "offSeconds": 10}, "newRecords": {"everySeconds": 14, "limit": 2, "mgdl": 120}}'
