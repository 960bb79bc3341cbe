# The meter's clock history on the real stack, gateway and Bumble meter in one VM, so both run on one
# clock: the guest's, moved to each sync's time with `date -s` (the gateway's "now"; the meter's clock is
# that plus its F). Between syncs the meter gets the readings taken since and its clock as the user left
# it (the control FIFO's "load FILE"; it keeps its bond). The cases and their checks: guest/clock_history.py.
# Each case starts from the database as it was right after pairing; every sync uploads to a Nightscout
# double on the guest's loopback, whose entries are checked against the true instants.
source "$RB_LIBDIR/guest/bumble-lib.sh"
CH="$RB_LIBDIR/guest/clock_history.py"
# Every case's meter file for each of its syncs, one line per sync: CASE STEP FILE UTC.
mapfile -t plan <<< "$(/usr/bin/python3 "$CH" files "$BUMBLE_METER" "$RB_OUT")"

secret=correct-horse-battery
/usr/bin/python3 "$RB_REPO/SystemTests/fake_nightscout.py" --port 0 --control-port 0 --secret "$secret" \
    > "$RB_OUT/nightscout.json" 2> "$RB_OUT/nightscout.log" &
ns_pid=$!
(umask 077 && echo "$secret" > "$GW_DIR/nightscout.secret")
for _ in $(seq 100); do grep -q '"port"' "$RB_OUT/nightscout.json" && break; sleep 0.2; done
ns_port="$(/usr/bin/python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["port"])' "$RB_OUT/nightscout.json")"
ns_control="$(/usr/bin/python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["control_port"])' "$RB_OUT/nightscout.json")"
printf '[nightscout]\nurl = "http://127.0.0.1:%s"\napi_secret_file = "%s/nightscout.secret"\n' "$ns_port" "$GW_DIR" >> "$GW_DIR/gateway.toml"
rb_check "a Nightscout double listens on the guest's loopback (port ${ns_port:-none})" test -n "$ns_port"

date -u -s "2026-10-04 12:00:00" > /dev/null
bumble_start --meter "$RB_OUT/dst.0.json"
gw_pair "pair (on $(date -u +%F))" 123456 0
mkdir -p "$GW_DIR/paired" && cp -a "$GW_DIR"/gateway.sqlite3* "$GW_DIR/paired/"

for case in dst back forward; do
    rm -f "$GW_DIR"/gateway.sqlite3* && cp -a "$GW_DIR"/paired/gateway.sqlite3* "$GW_DIR/"
    curl -s -X POST "http://127.0.0.1:$ns_control/__reset" > /dev/null
    for line in "${plan[@]}"; do
        read -r c step file at <<< "$line"
        [[ $c == "$case" ]] || continue
        mark="$(bumble_log_mark)"
        bumble_cmd "load $file"
        for _ in $(seq 50); do bumble_saw_after "$mark" "loaded|load failed" && break; sleep 0.1; done
        rb_check "$case $step: the meter holds the readings taken before $at UTC ($(tail -n +"$((mark + 1))" "$BUMBLE_LOG" | grep -a -o -E 'loaded.*|load failed.*' | head -n 1))" \
            bumble_saw_after "$mark" "loaded"
        date -u -s "$at" > /dev/null
        rb_step "$case $step: sync at $at UTC" 0 gw sync "$METER" --wait 20
    done
    gw_readings_json
    curl -s "http://127.0.0.1:$ns_control/__entries" > "$GW_DIR/entries.$case.json"
    cp "$GW_DIR/readings.json" "$RB_OUT/readings.$case.json"
    gw meters --json > "$RB_OUT/meters.$case.json" 2>&1
    case $case in
        dst) label="a DST-unaware meter (UTC+2 all year) synced weekly across the autumn switch: every reading at its exact UTC instant, each uploaded once at it" ;;
        back) label="the clock set 40 min back between syncs, the time running backwards at the change: all readings exact, uploaded at their instants" ;;
        forward) label="the clock set 40 min forward between syncs, no step in the records: the six that cannot be placed are time-uncertain with the true instant among the candidates, none uploaded" ;;
    esac
    rb_check "$case: $label" /usr/bin/python3 "$CH" check "$case" "$GW_DIR/readings.json" "$GW_DIR/entries.$case.json" \
        "$RB_OUT/meters.$case.json"
done
kill "$ns_pid" 2> /dev/null
bumble_stop
rb_done
