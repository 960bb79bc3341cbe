# Gateway VM of the profiles scenario: for each meter the meter VM plays in turn (flag meter-ready.N,
# its own description in meter.N.json), a fresh database: pair with the meter's PIN, sync (every record
# exactly once with exact values, times and exclusions; the clock skew where the meter has a readable
# clock, none where not), a second sync that finds nothing new and leaves the readings untouched, unpair.
source "$RB_LIBDIR/guest/gw-lib.sh"
i=0
for item in ${RB_PROFILES:-contour-next-one accu-chek-guide}; do
    i=$((i + 1))
    ready="$(rb_await "meter-ready.$i" 150)" || { rb_note "the meter VM never got meter $i ready"; rb_done; }
    read -r METER name <<< "$ready"
    rb_note "$name at $METER"
    meter="$RB_JOB/meter.$i.json"
    sed -i "s|^database = .*|database = \"$GW_DIR/meter$i.sqlite3\"|" "$GW_DIR/gateway.toml"
    pin="$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pin"])' "$meter")"
    gw_pair "$name: pair" "$pin" 0
    rb_step "$name: sync" 0 gw sync "$METER" --wait 20
    printf '%s\n' "$RB_OUTPUT" > "$GW_DIR/sync.$i.out"
    check() {
        gw_readings_json
        gw meters --json > "$GW_DIR/meters.json"
        rb_check "$name: $1" /usr/bin/python3 "$RB_LIBDIR/guest/check_profile.py" "$meter" "$GW_DIR/readings.json" \
            "$GW_DIR/meters.json" --address "$METER" --zone Europe/Berlin "${@:2}"
    }
    check "every record once, exact values, times, exclusions; the meter clock" --sync-output "$GW_DIR/sync.$i.out"
    cp "$GW_DIR/readings.json" "$GW_DIR/readings-1.json"
    rb_step "$name: second sync" 0 gw sync "$METER" --wait 20
    gw_check_incremental "$name: the second sync finds nothing new"
    check "still exactly the meter's records after the second sync"
    rb_check "$name: the stored readings are untouched (same ids, received times)" \
        cmp -s "$GW_DIR/readings-1.json" "$GW_DIR/readings.json"
    rb_step "$name: unpair" 0 gw unpair "$METER"
    rb_signal "gateway-done.$i"
done
rb_done
