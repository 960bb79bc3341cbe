# shellcheck shell=bash
# Guest side of the Bumble scenarios (one VM): the gateway's helpers (gw-lib.sh), and the Bumble meter
# started in this VM: hci_vhci, meter.py in the background (its events in $RB_OUT/bumble.log), its
# emulated controller under bluetoothd as hci0. METER is the first meter's address.
source "$RB_LIBDIR/guest/gw-lib.sh"
BUMBLE_LOG="$RB_OUT/bumble.log"
BUMBLE_CTL=/run/rb/bumble.ctl
BUMBLE_METER="$RB_LIBDIR/meters/base.json"

# bumble_meter_file NAME PYTHON-EXPRESSION: the base meter with a change (o is the meter object), as
# $RB_OUT/NAME.json; prints its path.
bumble_meter_file() {
    /usr/bin/python3 - "$BUMBLE_METER" "$RB_OUT/$1.json" "$2" <<'PY'
import json, sys
o = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(o, open(sys.argv[2], "w"))
PY
    echo "$RB_OUT/$1.json"
}

# bumble_start METER-ARGS...: starts the meter(s); returns when hci0 is up under bluetoothd and every
# meter advertises.
bumble_start() {
    modprobe hci_vhci || rb_note "modprobe hci_vhci failed"
    rm -f "$BUMBLE_CTL" && mkfifo "$BUMBLE_CTL"
    local t0=$SECONDS
    "$RB_BUMBLE_PYTHON" "$RB_LIBDIR/bumble/meter.py" --control "$BUMBLE_CTL" "$@" \
        >> "$BUMBLE_LOG" 2>> "$RB_OUT/bumble.err" &
    BUMBLE_PID=$!
    local deadline=$((SECONDS + 120 * ${RB_SLOW:-1}))
    while ((SECONDS < deadline)); do
        grep -q "meter(s) ready" "$BUMBLE_LOG" 2> /dev/null &&
            bluetoothctl list 2> /dev/null | grep -q '^Controller' && break
        kill -0 "$BUMBLE_PID" 2> /dev/null || break
        sleep 0.3
    done
    rb_check "the Bumble meter is up and hci0 is under bluetoothd ($((SECONDS - t0)) s)" \
        bash -c 'grep -q "meter(s) ready" "$1" && bluetoothctl list | grep -q "^Controller"' _ "$BUMBLE_LOG" || {
        tail -n 20 "$RB_OUT/bumble.err"; rb_done; }
    METER="$(awk '/ ready /{print $1; exit}' "$BUMBLE_LOG")"
    rb_signal meter-ready "$METER"
    rb_note "Bumble meter(s): $(grep ' ready ' "$BUMBLE_LOG" | tr '\n' ';')"
}
bumble_cmd() { echo "$1" > "$BUMBLE_CTL"; }
# bumble_saw PATTERN: the meter logged a line matching PATTERN (grep -E).
bumble_saw() { grep -a -q -E "$1" "$BUMBLE_LOG"; }
bumble_log_mark() { wc -l < "$BUMBLE_LOG"; }
bumble_saw_after() { tail -n +"$(($1 + 1))" "$BUMBLE_LOG" | grep -a -q -E "$2"; }
bumble_stop() {
    kill "$BUMBLE_PID" 2> /dev/null
    echo "--- the Bumble meter's events"; cat "$BUMBLE_LOG"
}
