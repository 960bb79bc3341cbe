# Gateway VM of the eatt-pair scenario (EATT on in both bluetoothd): a wrong PIN, then the right one, then
# a sync; btmon records both VMs for the evidence.
source "$RB_LIBDIR/guest/gw-lib.sh"
gw_wait_meter
gw_pair "pair with a wrong PIN" 111111 1
gw_pair "pair with the right PIN" 123456 0
rb_step "sync" 0 gw sync "$METER" --wait 20
gw_check_readings "all 5 records stored once, exact values and times"
rb_step "kernel messages" any bash -c "dmesg | grep -a -i 'timeout\|hci0'"
rb_done
