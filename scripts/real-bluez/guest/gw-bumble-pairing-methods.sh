# Pairing methods that need the gateway's agent to answer more than a passkey request (the `pair`
# interface: no --pin for Just Works, --confirm for numeric comparison without a terminal, exit 64 when a
# meter shows a PIN and none was given), and the meter-side failures: a meter that cancels, one that
# never answers. Each with its one-line message and exit status.
source "$RB_LIBDIR/guest/bumble-lib.sh"
JW=C0:26:DA:00:00:04
NC=C0:26:DA:00:00:05
PK=C0:26:DA:00:00:06
CANCEL=C0:26:DA:00:00:07
SILENT=C0:26:DA:00:00:08
bumble_start --meter "$BUMBLE_METER,pairing=just-works,address=$JW,name=meter+jw" \
    --meter "$BUMBLE_METER,pairing=numeric-comparison,address=$NC,name=meter+nc" \
    --meter "$BUMBLE_METER,address=$PK,name=meter+pk" \
    --meter "$BUMBLE_METER,fault=cancel,address=$CANCEL,name=meter+cancel" \
    --meter "$BUMBLE_METER,fault=silent,address=$SILENT,name=meter+silent"
rb_step "pair a Just Works meter without --pin" 0 gw pair "$JW" --timezone Europe/Berlin --wait 30
rb_check "pair says Just Works was used" grep -qi "just works" <<< "$RB_OUTPUT"
rb_check "the meter paired with Just Works" bumble_saw "$JW paired just-works"
rb_step "sync (Just Works)" 0 gw sync "$JW" --wait 20
rb_expect_eq "sync reports every record as new" "$JW: 5 new readings" "$(grep -a "^$JW:" <<< "$RB_OUTPUT")"
rb_step "pair a numeric-comparison meter without a terminal, without --confirm" 64 gw pair "$NC" --timezone Europe/Berlin --wait 30
rb_expect_eq "one line says why (besides the wait for the meter)" 1 "$(grep -vc '^waiting for ' <<< "$RB_OUTPUT")"
rb_step "pair it with --confirm" 0 gw pair "$NC" --confirm --timezone Europe/Berlin --wait 30
rb_check "the six digits are shown" grep -qE "[0-9]{6}" <<< "$RB_OUTPUT"
rb_check "the meter compared numbers and paired" bumble_saw "$NC paired numeric-comparison"
rb_step "pair a passkey meter without --pin" 64 gw pair "$PK" --timezone Europe/Berlin --wait 30
rb_check "it says the meter shows a PIN and how to pass it" grep -q -- "--pin" <<< "$RB_OUTPUT"
rb_expect_eq "one line says why (besides the wait for the meter)" 1 "$(grep -vc '^waiting for ' <<< "$RB_OUTPUT")"
rb_step "meters after the refusal" 0 gw meters --json
rb_check "no meter stored without a PIN" bash -c '! grep -q "$1" <<< "$2"' _ "$PK" "$RB_OUTPUT"
rb_step "pair a meter whose user cancels" any gw pair "$CANCEL" --pin 123456 --timezone Europe/Berlin --wait 30
rb_check "pair fails" test "$RB_RC" != 0
rb_check "it is not called a wrong PIN" bash -c '! grep -qi "wrong PIN" <<< "$1"' _ "$RB_OUTPUT"
rb_check "the meter cancelled" bumble_saw "$CANCEL the user cancels"
rb_step "pair a meter that never answers" any gw pair "$SILENT" --pin 123456 --timezone Europe/Berlin --wait 30
rb_check "pair fails with 69 (did not answer)" test "$RB_RC" == 69
rb_check "it is not called a wrong PIN" bash -c '! grep -qi "wrong PIN" <<< "$1"' _ "$RB_OUTPUT"
rb_step "meters" 0 gw meters --json
rb_check "neither failed meter is stored" bash -c '! grep -qE "$1|$2" <<< "$3"' _ "$CANCEL" "$SILENT" "$RB_OUTPUT"
bumble_stop
rb_done
