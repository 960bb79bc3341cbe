# Gateway VM of the controller scenario: while `run` is up, the adapter is powered off and on again
# (btmgmt), then the controller is removed and added again (the kernel unregisters hci0 and registers a
# new one with the same address, as when a USB dongle is pulled and put back). After each, the daemon
# downloads again; records the meter makes meanwhile arrive once each.
source "$RB_LIBDIR/guest/gw-lib.sh"
gw_wait_meter
gw_pair "pair" 123456 0
gw_daemon_start
# The meter's first new record may already be there at the first download (every 20 s).
n="$(gw_wait_count 5 60)"
rb_check "the daemon stored the meter's records (5 or 6: $n)" test "$n" -ge 5 -a "$n" -le 6
rb_step "btmgmt power off" 0 rb_btmgmt --index 0 power off
sleep 3
mark="$(gw_log_mark)"
rb_step "btmgmt power on" 0 rb_btmgmt --index 0 power on
rb_check "the daemon downloads again after power on" gw_wait_session_after "$mark" 60
rb_step "remove the controller" 0 kill -USR1 "$(cat /run/rb/bridge.pid)"
sleep 4
rb_step "controllers while removed" any bluetoothctl list
rb_check "the controller is gone" bash -c '! grep -q "^Controller" <<< "$1"' _ "$RB_OUTPUT"
mark="$(gw_log_mark)"
rb_step "add the controller again" 0 kill -USR2 "$(cat /run/rb/bridge.pid)"
rb_check "the daemon downloads again after the controller came back" gw_wait_session_after "$mark" 90
n="$(gw_wait_count 7 90)"
rb_expect_eq "the 5 records and the 2 new ones" 7 "$n"
gw_check_readings "each record once, exact values" --extra 2 --extra-mgdl 120
gw_daemon_stop
rb_done
