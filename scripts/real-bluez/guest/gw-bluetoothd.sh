# Gateway VM of the bluetoothd-restart scenario: bluetoothd is killed (SIGKILL, as a crash) and started
# again while `run` is up; the daemon follows it and downloads again, including a record the meter made
# after the restart.
source "$RB_LIBDIR/guest/gw-lib.sh"
gw_wait_meter
gw_pair "pair" 123456 0
gw_daemon_start
rb_expect_eq "the daemon stored the 5 records" 5 "$(gw_wait_count 5 60)"
sleep 2
rb_step "kill -9 bluetoothd" 0 kill -KILL "$(rb_bluetoothd_pid)"
rb_note "bluetoothd killed"
sleep 3
mark="$(gw_log_mark)"
rb_step "start bluetoothd again" 0 rb_bluetoothd_start
rb_check "the daemon downloads again after the restart" gw_wait_session_after "$mark" 90
n="$(gw_wait_count 6 90)"
rb_expect_eq "the record made after the restart arrived too" 6 "$n"
gw_check_readings "each record once, exact values" --extra 1 --extra-mgdl 120
rb_check "the new record came in a download after the restart" gw_log_after "$mark" "$METER: [a-z ()]+; [0-9]+ received, 1 new"
rb_check "the daemon saw bluetoothd come back" gw_log_after "$mark" "bluetoothd is running"
gw_daemon_stop
rb_done
