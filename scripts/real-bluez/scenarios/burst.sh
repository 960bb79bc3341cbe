# rb-about: a report of 300 records with their contexts, through bluetoothd's AcquireNotify sockets: every record once with its value and context, none announced and missing
# rb-topology: two VMs: own kernel + bluetoothd each (a meter and a gateway as in the field)
# rb-ci: no
# Not in the CI subset: the CI subset's downloads take the same sockets; this one adds a report long
# enough to keep the sockets busy.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
rb_two_vms "$RB_LIBDIR/guest/meter.sh" "$RB_LIBDIR/guest/gw-burst.sh" \
    --env 'RB_METER_EXTRA={"records": [], "generate": {"count": 300, "firstSequence": 1, "intervalMinutes": 30, "withContext": true}}'
