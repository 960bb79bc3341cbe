# rb-about: with EATT on (bluetoothd's default Channels = 3) a wrong PIN then the right one, then sync; btmon traces kept in the job directory
# rb-topology: two VMs, both bluetoothd with Debian's defaults (EATT on), btmon in both
# rb-ci: no
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
rb_two_vms "$RB_LIBDIR/guest/meter.sh" "$RB_LIBDIR/guest/gw-eatt.sh" \
    --meter-opt --btmon --meter-opt --bluetoothd-args --meter-opt "" \
    --gateway-opt --btmon --gateway-opt --bluetoothd-args --gateway-opt ""
