# Gateway VM of the wrap scenario: the meter holds 65532...65535 then 0...3 (its counter went round from
# 65535 to 0, times in order); the first sync stores all 8. The meter then makes record 4: a later sync
# stores exactly that one, asking only for numbers that can be new (nothing from before the wrap comes
# again), and every record is stored exactly once.
source "$RB_LIBDIR/guest/gw-lib.sh"
gw_wait_meter
gw_pair "pair" 123456 0
rb_step "first sync (the meter's counter went round)" 0 gw sync "$METER" --wait 20
rb_expect_eq "the first sync stores all 8 records" "$METER: 8 new readings" "$(grep -a "^$METER:" <<< "$RB_OUTPUT")"
# sequences_in_order: the stored sequences ordered by the meter's time, then how many (sequence, time) pairs are distinct.
sequences_in_order() {
    gw_readings_json && /usr/bin/python3 - "$GW_DIR/readings.json" <<'PY'
import json, sys
rs = json.load(open(sys.argv[1]))
rs.sort(key=lambda r: r["meter_time"] or "")
print(" ".join(str(r["sequence"]) for r in rs), len({(r["sequence"], r["meter_time"]) for r in rs}))
PY
}
rb_expect_eq "stored in the meter's order" "65532 65533 65534 65535 0 1 2 3 8" "$(sequences_in_order)"
# Until the meter has made record 4: each sync finds nothing new (the meter's last record at most, again).
picked=""
deadline=$((SECONDS + 150))
while ((SECONDS < deadline)); do
    rb_step "sync (waiting for record 4)" 0 gw sync "$METER" --wait 20
    line="$(grep -a "^$METER:" <<< "$RB_OUTPUT")"
    if [[ $line != "$METER: 0 new readings" && $line != "$METER: 0 new readings, 1 already stored" ]]; then
        picked="$line"
        break
    fi
    sleep 3
done
rb_expect_eq "record 4, after the wrap, is downloaded by itself (nothing from before the wrap again)" "$METER: 1 new reading" "$picked"
rb_expect_eq "all 9 records, each exactly once, in the meter's order" "65532 65533 65534 65535 0 1 2 3 4 9" "$(sequences_in_order)"
rb_step "sync after record 4" 0 gw sync "$METER" --wait 20
gw_check_incremental "the sync after record 4 finds nothing new"
rb_expect_eq "still the 9 records once each" "65532 65533 65534 65535 0 1 2 3 4 9" "$(sequences_in_order)"
rb_done
