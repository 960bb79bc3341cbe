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
sleep 3
mark="$(gw_log_mark)"
restart="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
rb_step "start bluetoothd again" 0 rb_bluetoothd_start
rb_check "the daemon downloads again after the restart" gw_wait_session_after "$mark" 90
n="$(gw_wait_count 6 90)"
rb_expect_eq "the record made after the restart arrived too" 6 "$n"
gw_check_readings "each record once, exact values" --extra 1 --extra-mgdl 120
rb_check "the new record was made after bluetoothd restarted" /usr/bin/python3 -c '
import json, sys
r = [x for x in json.load(open(sys.argv[1])) if x["sequence"] == 6]
sys.exit(0 if r and r[0]["time"] > sys.argv[2] else 1)' "$GW_DIR/readings.json" "$restart"
rb_check "bluetoothd restart noticed by the daemon" grep -a -q "bluetoothd is running" <(tail -n +"$((mark + 1))" "$GW_DIR/run.log")
gw_daemon_stop
rb_done
