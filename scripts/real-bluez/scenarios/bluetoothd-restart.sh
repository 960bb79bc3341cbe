# rb-about: bluetoothd killed (SIGKILL) and restarted while run is up: the daemon recovers and downloads again
# rb-topology: two VMs: the gateway VM's own bluetoothd is killed; the meter VM's stays up
# rb-ci: yes
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
rb_two_vms "$RB_LIBDIR/guest/meter.sh" "$RB_LIBDIR/guest/gw-bluetoothd.sh" \
    --env 'RB_METER_EXTRA={"newRecords": {"everySeconds": 50, "limit": 1, "mgdl": 120}}'
