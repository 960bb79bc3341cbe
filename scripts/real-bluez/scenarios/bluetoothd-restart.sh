# rb-about: bluetoothd killed (SIGKILL) and restarted while run is up: the daemon recovers and downloads again
# rb-topology: two VMs: the gateway VM's own bluetoothd is killed; the meter VM's stays up
# rb-ci: no
# Not in the CI subset while it fails: after a SIGKILLed bluetoothd the daemon takes bluetoothd's
# InProgress answer to StartDiscovery (the kernel still runs the dead daemon's discovery) for a running
# session and never discovers again (README, "Real Bluetooth stack").
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
rb_two_vms "$RB_LIBDIR/guest/meter.sh" "$RB_LIBDIR/guest/gw-bluetoothd.sh" \
    --env 'RB_METER_EXTRA={"newRecords": {"everySeconds": 50, "limit": 1, "mgdl": 120}}'
