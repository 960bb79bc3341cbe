# The Bumble meter misbehaving during a download: it drops the link after two measurements (once), it
# answers the report request with an RACP error code, it disconnects right after the RACP response.
source "$RB_LIBDIR/guest/bumble-lib.sh"
DROP=C0:26:DA:00:00:11
ERR=C0:26:DA:00:00:12
BYE=C0:26:DA:00:00:13
drop_file="$(bumble_meter_file drop 'o["faults"] = {"dropLinkAfter": 2, "dropLinkTimes": 1}')"
bumble_start --meter "$drop_file,address=$DROP,name=meter+drop" \
    --meter "$BUMBLE_METER,racp-error=0x02,address=$ERR,name=meter+error" \
    --meter "$BUMBLE_METER,disconnect-after-racp,address=$BYE,name=meter+bye"
for METER in $DROP $ERR $BYE; do gw_pair "pair $METER" 123456 0; done

METER=$DROP
rb_step "sync; the meter drops the link after two measurements" any gw sync "$METER" --wait 20
rb_check "the meter dropped the link" bumble_saw "$DROP dropping the link after 2"
rb_expect_eq "the first sync keeps the 2 records that arrived" "$METER: 2 new readings; interrupted (the meter disconnected), the next sync resumes" "$(grep -a "^$METER:" <<< "$RB_OUTPUT")"
rb_step "sync again" 0 gw sync "$METER" --wait 20
gw_readings_json
rb_check "all 5 records of the dropping meter stored exactly once" /usr/bin/python3 - "$GW_DIR/readings.json" "$METER" <<'PY'
import json, sys
seqs = sorted(r["sequence"] for r in json.load(open(sys.argv[1])) if r["meter"] == sys.argv[2])
print("  sequences:", seqs)
sys.exit(0 if seqs == [1, 2, 3, 4, 5] else 1)
PY

METER=$ERR
rb_step "sync; the meter answers the report with RACP error 0x02" any gw sync "$METER" --wait 20
rb_check "sync fails" test "$RB_RC" != 0
rb_check "the meter answered with the error" bumble_saw "$ERR racp response 06000102"
rb_expect_eq "sync says so in one line" 1 "$(grep -c . <<< "$RB_OUTPUT")"
rb_check "the line names the meter" grep -q "$METER" <<< "$RB_OUTPUT"
gw_readings_json
rb_expect_eq "nothing stored from it" 0 "$(/usr/bin/python3 -c 'import json,sys; print(sum(r["meter"] == sys.argv[2] for r in json.load(open(sys.argv[1]))))' "$GW_DIR/readings.json" "$METER")"

METER=$BYE
rb_step "sync; the meter disconnects right after the RACP response" 0 gw sync "$METER" --wait 20
rb_check "the meter disconnected after its response" bumble_saw "$BYE disconnecting right after the RACP response"
rb_expect_eq "sync reports every record as new" "$METER: 5 new readings" "$(grep -a "^$METER:" <<< "$RB_OUTPUT")"
rb_step "second sync" 0 gw sync "$METER" --wait 20
gw_check_incremental "the second sync finds nothing new"
bumble_stop
rb_done
