# Gateway VM of the daemon scenario: `run` while the meter advertises in bursts (8 s on, 10 s off) and
# makes a new record every 14 s (two): the daemon downloads the 5 old and both new ones, each once.
source "$RB_LIBDIR/guest/gw-lib.sh"
gw_wait_meter
gw_pair "pair" 123456 0
gw_daemon_start
n="$(gw_wait_count 7 150)"
rb_expect_eq "the daemon stored the 5 records and the 2 new ones" 7 "$n"
gw_check_readings "each record once, exact values; the new ones 120 mg/dL" --extra 2 --extra-mgdl 120
# A session's summary line follows its last commit: the count of readings can be seen before the line.
for _ in $(seq 20); do
    sessions="$(grep -a -c -E "$METER: (completed|no new records|interrupted)" "$GW_LOG")"
    ((sessions >= 2)) && break
    sleep 1
done
rb_note "download sessions: $sessions"
rb_check "the daemon came back for the new records (more than one session)" test "$sessions" -ge 2
gw_daemon_stop
rb_done
