# scan lists two Bumble meters. Pairing methods on the Bumble meter that today's gateway handles (real kernel SMP against Bumble's SMP):
# legacy passkey entry (a BLE 4.0/4.1 meter: a wrong PIN refused, the right one bonds, and the
# reconnections of two syncs are encrypted with the key the meter distributed), and a meter that starts
# pairing itself (SMP Security Request right after connecting).
source "$RB_LIBDIR/guest/bumble-lib.sh"
LEGACY=C0:26:DA:00:00:02
ASKS=C0:26:DA:00:00:03
bumble_start --meter "$BUMBLE_METER,pairing=legacy-passkey,address=$LEGACY" \
    --meter "$BUMBLE_METER,security-request,address=$ASKS,name=meter+asks"
rb_step "scan" 0 gw scan --timeout 8
rb_check "scan lists both Bumble meters" bash -c 'grep -q "^$1  *meter+06543210" <<< "$3" && grep -q "^$2  *meter+asks" <<< "$3"' _ "$LEGACY" "$ASKS" "$RB_OUTPUT"
METER=$LEGACY
gw_pair_wrong_then_right
rb_check "the meter paired with legacy passkey entry" bumble_saw "$LEGACY paired legacy-passkey"
rb_step "sync (legacy)" 0 gw sync "$METER" --wait 20
rb_expect_eq "sync reports every record as new" "$METER: 5 new readings" "$(grep -a "^$METER:" <<< "$RB_OUTPUT")"
gw_check_readings "all 5 records stored once"
rb_step "second sync (legacy; the reconnection uses the meter's own key)" 0 gw sync "$METER" --wait 20
gw_check_incremental "the second sync finds nothing new"
rb_check "no reconnection ended in a MIC failure (0x3d)" bash -c '! grep -q "$1 disconnected 0x3d" "$2"' _ "$LEGACY" "$BUMBLE_LOG"
METER=$ASKS
rb_step "pair the meter that sends a Security Request" 0 gw pair "$METER" --pin 123456 --timezone Europe/Berlin --wait 30
rb_check "the meter sent its Security Request" bumble_saw "$ASKS security request"
rb_check "it paired" bumble_saw "$ASKS paired"
rb_step "sync (the meter asks for security again on the bonded link)" 0 gw sync "$METER" --wait 20
rb_expect_eq "sync reports every record as new" "$METER: 5 new readings" "$(grep -a "^$METER:" <<< "$RB_OUTPUT")"
bumble_stop
rb_done
