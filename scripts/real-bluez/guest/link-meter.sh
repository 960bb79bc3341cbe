# Meter VM of the link scenario: advertise as connectable until the gateway VM is done.
source "$RB_LIBDIR/guest-lib.sh"
rb_step "connectable" 0 rb_btmgmt connectable on
rb_step "advertising on" 0 rb_btmgmt advertising on
rb_signal advertising "$(bluetoothctl list | awk '{print $2; exit}')"
rb_guest_wait_gateway_done 120
rb_done
