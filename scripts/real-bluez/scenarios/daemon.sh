# rb-about: run (the daemon) picks up new records while the meter advertises in bursts (10 s on / 15 s off, a new record every 20 s)
# rb-topology: two VMs: own kernel + bluetoothd each; the daemon scans all the time, which the virtio-serial air carries
# rb-ci: yes
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
rb_two_vms "$RB_LIBDIR/guest/meter.sh" "$RB_LIBDIR/guest/gw-daemon.sh" \
    --env 'RB_METER_EXTRA={"advertising": {"onSeconds": 10, "offSeconds": 15}, "newRecords": {"everySeconds": 20, "limit": 2, "mgdl": 120}}'
