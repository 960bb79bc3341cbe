# A gateway adapter with no public address (bluetoothd then uses a static random address, as with
# Zephyr/nRF HCI dongles): pair and sync work; the daemon, which connects while discovery runs, must
# still download from the bonded meter (it must not connect from a scan's non-resolvable address, which
# the meter does not know, and must not call one refused key a lost bond).
source "$RB_LIBDIR/guest/bumble-lib.sh"
bumble_start --gateway-address none --meter "$BUMBLE_METER"
rb_step "btmgmt info (no public address)" any rb_btmgmt info
rb_step "bluetoothctl show" any bluetoothctl show
rb_check "the adapter uses a static random address" grep -q "(random)" <<< "$RB_OUTPUT"
gw_pair "pair" 123456 0
rb_step "sync" 0 gw sync "$METER" --wait 20
rb_expect_eq "sync reports every record as new" "$METER: 5 new readings" "$(grep -a "^$METER:" <<< "$RB_OUTPUT")"
# A new record for the daemon to fetch: the meter's records stay, so the daemon's session is a
# reconnection with the bond's key.
gw_daemon_start
mark=0
rb_check "the daemon completes a session with the bonded meter" gw_wait_session_after "$mark" 90
rb_check "the daemon does not call the meter's bond lost" bash -c '! grep -q "re-pair needed" "$1"' _ "$GW_LOG"
rb_check "the meter saw no stranger asking for a key" bash -c '! grep -q "no key for" "$1"' _ "$BUMBLE_LOG"
gw_daemon_stop
bumble_stop
rb_done
