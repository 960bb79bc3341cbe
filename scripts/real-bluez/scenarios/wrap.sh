# rb-about: a meter whose 16-bit sequence counter went round (65532...65535, then 0...3) syncs all 8; its next record (4) is downloaded by itself, nothing twice
# rb-topology: two VMs: own kernel + bluetoothd each (a meter and a gateway as in the field)
# rb-ci: no
# The meter makes record 4 about 75 s after it starts (its new-record plan), after the gateway's first sync.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
rb_two_vms "$RB_LIBDIR/guest/meter.sh" "$RB_LIBDIR/guest/gw-wrap.sh" \
    --env 'RB_METER_EXTRA={"records": [], "generate": {"count": 8, "firstSequence": 65532, "start": "2024-03-05T07:30:00", "intervalMinutes": 60}, "newRecords": {"everySeconds": 75, "limit": 1, "mgdl": 123}}'
