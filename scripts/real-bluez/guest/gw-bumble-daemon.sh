# The daemon with the Bumble meter advertising in bursts (4 s on, 8 s off): it downloads every record
# when the meter shows up. Then the meter (advertising all the time again) forgets the bond: the daemon finds "re-pair needed" and stops
# connecting, sync names the fix (exit 69), pair makes it work again.
source "$RB_LIBDIR/guest/bumble-lib.sh"
bumble_start --meter "$BUMBLE_METER"
# Paired while it advertises all the time (its Bluetooth button pressed), then in bursts as a meter that
# wakes now and then. (A pair during bursts fails when a burst ends within the connection attempt:
# "did not answer in time", exit 69.)
gw_pair "pair" 123456 0
bumble_cmd "bursts 4 8"
gw_daemon_start
rb_expect_eq "the daemon downloads all 5 records from the bursting meter" 5 "$(gw_wait_count 5 90)"
gw_check_readings "all 5 records stored once, exact values and times"
gw_daemon_stop
# The bond loss with the meter advertising all the time, as in the BlueZ bond-loss scenario; with
# RB_BOND_LOSS_IN_BURSTS=1 (scenario bumble-bond-loss-bursts) while it keeps advertising in bursts.
[[ ${RB_BOND_LOSS_IN_BURSTS:-0} == 1 ]] || bumble_cmd "advertise always"
# A meter that forgets its bonds (reset) drops its link too: the daemon stopped right after its session
# may have left the link up (bluetoothd keeps it; see the note below).
rb_note "the meter's last event after the daemon's SIGTERM: $(tail -n 1 "$BUMBLE_LOG")"
bumble_cmd forget
bumble_cmd disconnect
rb_note "the meter forgot its bonds and dropped its link"
gw_daemon_start
found=no
deadline=$((SECONDS + 120))
while ((SECONDS < deadline)); do
    grep -q '"state": "re-pair-needed"' <<< "$(gw status --json 2> /dev/null)" && { found=yes; break; }
    sleep 2
done
rb_expect_eq "the daemon finds the meter needs pairing again" yes "$found"
rb_check "the meter refused a key it no longer has" bumble_saw "no key for"
gw_daemon_stop
rb_step "sync after the meter forgot the bond" 69 gw sync "$METER" --wait 20
rb_check "sync names the fix" grep -q "re-pair needed: .*glucose-gateway pair $METER" <<< "$RB_OUTPUT"
gw_pair "pair again" 123456 0
rb_step "sync after pairing again" 0 gw sync "$METER" --wait 20
gw_check_incremental "the sync after pairing again finds nothing new"
gw_check_readings "still exactly the 5 records"
bumble_stop
rb_done
