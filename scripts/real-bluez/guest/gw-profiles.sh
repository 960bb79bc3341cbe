# Gateway VM of the profiles scenario: for each meter the meter VM plays in turn (flag meter-ready.N,
# its own description in meter.N.json), a fresh database: pair with the meter's PIN, sync (every record
# exactly once with exact values, times and exclusions; the clock skew where the meter has a readable
# clock, none where not), `meters set-clock` (the meter VM plays a clock 5 minutes fast; a clock-less
# meter is refused with exit 69), a second sync that finds nothing new, leaves the readings untouched and
# measures the clock right where it was set, unpair.
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
    rb_step "$name: meters" 0 gw meters --json
    want_name="$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["name"])' "$meter")"
    rb_check "$name: stored under its advertised name ($want_name)" grep -qF "\"name\": \"$want_name\"" <<< "$RB_OUTPUT"
    rb_step "$name: sync" 0 gw sync "$METER" --wait 20
    printf '%s\n' "$RB_OUTPUT" > "$GW_DIR/sync.$i.out"
    # check LABEL METERS-JSON [ARGS]: the readings now against the meter, with the clock skew of METERS-JSON
    # (the readings keep the correction of the download that stored them).
    check() {
        gw_readings_json
        rb_check "$name: $1" /usr/bin/python3 "$RB_LIBDIR/guest/check_profile.py" "$meter" "$GW_DIR/readings.json" \
            "$2" --address "$METER" --zone Europe/Berlin "${@:3}"
    }
    gw meters --json > "$GW_DIR/meters-1.json"
    check "every record once, exact values, times, exclusions; the meter clock" "$GW_DIR/meters-1.json" \
        --sync-output "$GW_DIR/sync.$i.out"
    cp "$GW_DIR/readings.json" "$GW_DIR/readings-1.json"
    clock_kind="$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1])).get("clock", {}).get("kind", "none"))' "$meter")"
    clock_args=()
    if [[ $clock_kind == none ]]; then
        rb_step "$name: meters set-clock on a meter without a clock" 69 gw meters set-clock "$METER" --wait 20
    else
        rb_step "$name: meters set-clock" 0 gw meters set-clock "$METER" --wait 20
        # "ADDRESS: clock set through ACCESS: was OLD, now NEW (ZONE); it was off by N s[; the meter now shows T]"
        rb_check "$name: set-clock names the old and the new time" /usr/bin/python3 -c '
import datetime, re, sys
pattern = r"(\S+): clock set through (.+): was (\S+), now (\S+) \((\S+)\); it was off by (-?\d+) s(?:; the meter now shows (\S+))?"
m = next(filter(None, (re.fullmatch(pattern, l) for l in sys.argv[1].splitlines())), None)
if not m:
    sys.exit("  not a set-clock line: %r" % sys.argv[1])
address, access, old, new, zone, skew, after = m.groups()
parse = lambda t: datetime.datetime.strptime(t, "%Y-%m-%dT%H:%M:%S")
print("  through %s: was %s, now %s (%s), off by %s s, reads back %s" % (access, old, new, zone, skew, after))
problems = []
if address != sys.argv[2] or zone != "Europe/Berlin":
    problems.append("address or zone")
if abs(int(skew) - 300) > 5 or abs((parse(old) - parse(new)).total_seconds() - 300) > 5:
    problems.append("the old time is not 5 minutes ahead of the new")
if after is None or abs((parse(after) - parse(new)).total_seconds()) > 5:
    problems.append("the meter does not read back the new time")
sys.exit("  " + "; ".join(problems) if problems else 0)
' "$RB_OUTPUT" "$METER"
        clock_args=(--clock-set)
    fi
    rb_step "$name: second sync" 0 gw sync "$METER" --wait 20
    # Nothing new (the meter's last record may be fetched again and found stored); a clock note may follow.
    line="$(grep -a "^$METER:" <<< "$RB_OUTPUT" | sed -E 's/; meter clock off by -?[0-9]+ s$//')"
    rb_check "$name: the second sync finds nothing new ($line)" \
        test "$line" = "$METER: 0 new readings" -o "$line" = "$METER: 0 new readings, 1 already stored"
    gw meters --json > "$GW_DIR/meters-2.json"
    rb_check "$name: the second sync measured the clock again${clock_args:+, right after set-clock}" \
        /usr/bin/python3 "$RB_LIBDIR/guest/check_profile.py" \
        "$meter" /dev/null "$GW_DIR/meters-2.json" --address "$METER" --zone Europe/Berlin --clock-only "${clock_args[@]}"
    check "still exactly the meter's records after the second sync" "$GW_DIR/meters-1.json"
    rb_check "$name: the stored readings are untouched (same ids, received times)" \
        cmp -s "$GW_DIR/readings-1.json" "$GW_DIR/readings.json"
    rb_step "$name: unpair" 0 gw unpair "$METER"
    rb_signal "gateway-done.$i"
done
rb_done
