# shellcheck shell=bash
# Gateway-VM side of the gateway scenarios: the gateway's config and database in the VM's tmpfs, `gw`
# runs the gateway under test (as root, or as $RB_GW_USER), METER is the meter VM's address.
source "$RB_LIBDIR/guest-lib.sh"
GW_DIR=/tmp/gw
# The daemon's log goes straight to the job directory, so it survives a VM ended by its time limit.
GW_LOG="$RB_OUT/daemon.log"
mkdir -p "$GW_DIR"
cat > "$GW_DIR/gateway.toml" <<TOML
[gateway]
database = "${RB_GW_DB:-$GW_DIR/gateway.sqlite3}"
adapter = "hci0"
time_zone = "Europe/Berlin"
log_level = "${RB_GW_LOG_LEVEL:-info}"
TOML
EXPECTED="$RB_LIBDIR/meters/${RB_METER:-base}.expected.json"
gw() {
    if [[ -n ${RB_GW_USER:-} ]]; then
        runuser -u "$RB_GW_USER" -- "$RB_GATEWAY_BIN" --config "$GW_DIR/gateway.toml" "$@"
    else
        "$RB_GATEWAY_BIN" --config "$GW_DIR/gateway.toml" "$@"
    fi
}
gw_wait_meter() {
    METER="$(rb_await meter-ready 120)" || { rb_note "the meter VM never got ready"; rb_done; }
    rb_note "meter at $METER"
}
gw_readings_json() { gw readings --json > "$GW_DIR/readings.json" 2> "$GW_DIR/readings.err"; }
gw_count() { gw_readings_json && /usr/bin/python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$GW_DIR/readings.json"; }
# gw_check_readings LABEL [--extra N --extra-mgdl V]
gw_check_readings() {
    local label="$1"; shift
    gw_readings_json
    rb_check "$label" /usr/bin/python3 "$RB_LIBDIR/guest/check_readings.py" "$EXPECTED" "$GW_DIR/readings.json" "$@"
}
# An incremental sync: nothing new; at most the meter's last record fetched again, which the gateway
# asks for to notice a sequence counter that went back, and finds stored already.
gw_check_incremental() {
    local line
    line="$(grep -a "^$METER:" <<< "$RB_OUTPUT")"
    if [[ $line == "$METER: 0 new readings" || $line == "$METER: 0 new readings, 1 already stored" ]]; then
        echo "RB-CHECK $1: ok ($line)"
    else
        echo "RB-CHECK $1: FAIL (got '$line')"
        RB_FAILS=$((RB_FAILS + 1))
    fi
}
gw_pair() {  # gw_pair LABEL PIN WANT
    rb_step "$1" "$3" gw pair "$METER" --pin "$2" --timezone Europe/Berlin --wait 30
}
# A wrong PIN (exit 1, said so, nothing stored), then the right one: the meter stored with its zone and
# identity, BlueZ bonded.
gw_pair_wrong_then_right() {
    gw_pair "pair with a wrong PIN" 111111 1
    rb_check "the wrong PIN is reported as such" grep -qi "wrong PIN" <<< "$RB_OUTPUT"
    rb_step "meters after the wrong PIN" 0 gw meters --json
    rb_expect_eq "no meter stored after the wrong PIN" "[]" "$(tr -d ' \n' <<< "$RB_OUTPUT")"
    gw_pair "pair with the right PIN" 123456 0
    rb_step "meters" 0 gw meters --json
    rb_check "the meter is stored with its zone" grep -q '"time_zone": "Europe/Berlin"' <<< "$RB_OUTPUT"
    rb_check "the meter's identity was read" grep -q '"model": "GlucoSim 1"' <<< "$RB_OUTPUT"
    rb_step "bluetoothctl info" any bluetoothctl info "$METER"
    rb_check "BlueZ holds a bond" grep -q "Bonded: yes" <<< "$RB_OUTPUT"
}
# unpair removes the meter and the bond; pairing again works.
gw_unpair_and_pair_again() {
    rb_step "unpair" 0 gw unpair "$METER"
    rb_step "meters after unpair" 0 gw meters --json
    rb_expect_eq "no meter stored after unpair" "[]" "$(tr -d ' \n' <<< "$RB_OUTPUT")"
    rb_step "bluetoothctl info after unpair" any bluetoothctl info "$METER"
    rb_check "the bond is gone from BlueZ" bash -c '! grep -q "Bonded: yes" <<< "$1"' _ "$RB_OUTPUT"
    gw_pair "pair again" 123456 0
}
# Waits up to S seconds until at least N readings are stored.
gw_wait_count() {
    local n="$1" deadline=$((SECONDS + $2)) c=0
    while ((SECONDS < deadline)); do
        c="$(gw_count 2> /dev/null)"; [[ ${c:-0} -ge $n ]] && break
        sleep 1
    done
    echo "${c:-0}"
}

# The daemon (`run`), its log in $GW_LOG.
gw_daemon_start() {
    if [[ -n ${RB_GW_USER:-} ]]; then
        runuser -u "$RB_GW_USER" -- "$RB_GATEWAY_BIN" --config "$GW_DIR/gateway.toml" run --quiet-after 2 \
            > "$GW_LOG" 2>&1 &
    else
        "$RB_GATEWAY_BIN" --config "$GW_DIR/gateway.toml" run --quiet-after 2 > "$GW_LOG" 2>&1 &
    fi
    GW_DAEMON=$!
    rb_note "daemon started (pid $GW_DAEMON)"
}
gw_log_mark() { wc -l < "$GW_LOG"; }
# gw_log_after MARK PATTERN [S]: the daemon logs a line matching PATTERN (grep -E) after line MARK, within
# S seconds (default 20: a session's summary line follows its last commit).
gw_log_after() {
    local deadline=$((SECONDS + ${3:-20}))
    while ((SECONDS < deadline)); do
        tail -n +"$(($1 + 1))" "$GW_LOG" | grep -a -q -E "$2" && return 0
        sleep 1
    done
    return 1
}
# gw_wait_session_after MARK S: waits up to S seconds for a complete download session logged after line
# MARK of the daemon's log ("ADDRESS: completed; ..." or "ADDRESS: no new records; ...").
gw_wait_session_after() {
    local mark="$1" deadline=$((SECONDS + $2))
    while ((SECONDS < deadline)); do
        tail -n +"$((mark + 1))" "$GW_LOG" | grep -a -q -E "$METER: (completed|no new records); " && return 0
        kill -0 "$GW_DAEMON" 2> /dev/null || return 1
        sleep 1
    done
    return 1
}
gw_daemon_stop() {
    rb_check "the daemon is still running" kill -0 "$GW_DAEMON"
    kill -TERM "$GW_DAEMON" 2> /dev/null
    local deadline=$((SECONDS + 10))
    while kill -0 "$GW_DAEMON" 2> /dev/null && ((SECONDS < deadline)); do sleep 0.2; done
    if kill -0 "$GW_DAEMON" 2> /dev/null; then
        rb_check "the daemon stops on SIGTERM" false
        kill -KILL "$GW_DAEMON"
    fi
    wait "$GW_DAEMON"
    rb_expect_eq "the daemon's exit status after SIGTERM" 0 "$?"
    echo "--- daemon log"; cat "$GW_LOG"
}
