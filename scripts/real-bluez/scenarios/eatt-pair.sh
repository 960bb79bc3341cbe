# rb-about: with EATT on (Channels = 3: 5.66's default, set explicitly since 5.82 defaults to 1) a wrong PIN then the right one, then sync; btmon traces kept in the job directory
# rb-topology: two VMs, both bluetoothd with main-eatt.conf (EATT on), btmon in both
# rb-ci: no
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
rb_two_vms "$RB_LIBDIR/guest/meter.sh" "$RB_LIBDIR/guest/gw-eatt.sh" \
    --meter-opt --btmon --meter-opt --bluetoothd-args --meter-opt "-f $RB_LIBDIR/main-eatt.conf" \
    --gateway-opt --btmon --gateway-opt --bluetoothd-args --gateway-opt "-f $RB_LIBDIR/main-eatt.conf"
