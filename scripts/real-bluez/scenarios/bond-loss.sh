# rb-about: the meter forgets its bond (bluetoothctl remove on the meter's bluetoothd): the daemon finds "re-pair needed" (status --json, on_meter_error once) and stops connecting; sync names the fix (exit 69); pair makes it work again
# rb-topology: two VMs: own kernel + bluetoothd each; the meter's bluetoothd drops the gateway's keys, the gateway's keeps them; btmon and bluetoothd -d on the gateway for the evidence
# rb-ci: no
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
rb_two_vms "$RB_LIBDIR/guest/meter.sh" "$RB_LIBDIR/guest/gw-bond-loss.sh" \
    --env RB_METER_FORGET=1 \
    --gateway-opt --btmon --gateway-opt --bluetoothd-args --gateway-opt "-d -f $RB_LIBDIR/main-noeatt.conf"
