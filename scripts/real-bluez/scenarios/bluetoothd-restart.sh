# rb-about: bluetoothd killed (SIGKILL) and restarted while run is up: the daemon recovers and downloads again
# rb-topology: two VMs: the gateway VM's own bluetoothd is killed; the meter VM's stays up
# rb-ci: yes
# rb-releases: bookworm trixie arm64
# A SIGKILLed bluetoothd leaves its LE discovery running in the kernel: the new bluetoothd's StartDiscovery
# gets "busy" and answers InProgress without keeping a session, which the gateway must not take for its
# own session. The meter's new record comes 35 s after it starts: bluetoothd is killed some 13-15 s after
# that start (pairing, the first download) and back 3 s later, and its old discovery ends 10 s after the
# kill, so the record comes after the restart and the gateway must have found the meter again to get it.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
rb_two_vms "$RB_LIBDIR/guest/meter.sh" "$RB_LIBDIR/guest/gw-bluetoothd.sh" \
    --env 'RB_METER_EXTRA={"newRecords": {"everySeconds": 35, "limit": 1, "mgdl": 120}}'
