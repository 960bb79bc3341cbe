# The gateway against the Bumble meter (LE Secure Connections passkey entry, the meter shows its PIN):
# scan sees it; a wrong PIN is refused, the right one bonds; sync stores every record exactly once; a
# second sync is incremental.
source "$RB_LIBDIR/guest/bumble-lib.sh"
bumble_start --meter "$BUMBLE_METER"
rb_step "scan" 0 gw scan --timeout 8
rb_check "scan lists the Bumble meter" grep -q "^$METER  *meter+06543210" <<< "$RB_OUTPUT"
gw_pair_wrong_then_right
rb_check "the meter paired with LE Secure Connections passkey entry" bumble_saw "paired sc-passkey"
rb_step "sync (--verbose)" 0 gw --verbose sync "$METER" --wait 20
rb_expect_eq "sync reports every record as new" "$METER: 5 new readings" "$(grep -a "^$METER:" <<< "$RB_OUTPUT")"
gw_check_readings "all 5 records stored once, exact values and times"
cp "$GW_DIR/readings.json" "$GW_DIR/readings-1.json"
rb_step "second sync" 0 gw sync "$METER" --wait 20
gw_check_incremental "the second sync finds nothing new"
rb_check "the stored readings are untouched" cmp -s "$GW_DIR/readings-1.json" "$GW_DIR/readings.json" ||
    gw_check_readings "still exactly the 5 records"
rb_check "the reconnection was encrypted with the bond's key" bumble_saw "encrypted 1"
rb_check "no link ended in a MIC failure" bash -c '! grep -q "disconnected 0x3d" "$1"' _ "$BUMBLE_LOG"
rb_note "ATT MTU exchanges the meter saw: $(grep -c 'att mtu' "$BUMBLE_LOG"), $(grep 'att mtu' "$BUMBLE_LOG" | sort -u | tr '\n' ';')"
rb_check "the ATT MTU stayed 23 (the meter's limit)" bash -c '! grep "att mtu" "$1" | grep -qv "att mtu 23$"' _ "$BUMBLE_LOG"
bumble_stop
rb_done
