# shellcheck shell=bash
# Guest-side helpers for scenario scripts (source it inside an rb-mode VM): steps with their exit status,
# checks that count failures, files exchanged with the other VM through $RB_JOB.
RB_FAILS=0
rb_t() { cut -d' ' -f1 /proc/uptime; }

# rb_step LABEL WANT CMD...: runs CMD (its output shown indented), prints its exit status against WANT
# ("any" accepts every status). Leaves the status in RB_RC and the output in RB_OUTPUT.
rb_step() {
    local label="$1" want="$2"; shift 2
    local t0 t1
    t0="$(rb_t)"
    echo "\$ $*"
    RB_OUTPUT="$("$@" 2>&1)"; RB_RC=$?
    t1="$(rb_t)"
    [[ -n $RB_OUTPUT ]] && printf '%s\n' "$RB_OUTPUT" | sed 's/^/    /'
    local verdict=ok
    if [[ $want != any && $RB_RC != "$want" ]]; then verdict=FAIL; RB_FAILS=$((RB_FAILS + 1)); fi
    printf 'RB-STEP %s: exit %s (want %s) %s [%ss]\n' "$label" "$RB_RC" "$want" "$verdict" \
        "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')"
    [[ $verdict == ok ]]
}

# rb_check LABEL CMD...: a check that passes when CMD exits 0.
rb_check() {
    local label="$1"; shift
    if "$@"; then echo "RB-CHECK $label: ok"; return 0; fi
    echo "RB-CHECK $label: FAIL"
    RB_FAILS=$((RB_FAILS + 1))
    return 1
}

# rb_expect_eq LABEL WANT GOT
rb_expect_eq() {
    if [[ "$2" == "$3" ]]; then echo "RB-CHECK $1: ok ($3)"; return 0; fi
    echo "RB-CHECK $1: FAIL (want '$2', got '$3')"
    RB_FAILS=$((RB_FAILS + 1))
    return 1
}

rb_note() { echo "RB-NOTE [$(rb_t)s] $*"; }

# Ends the scenario script: 0 when every step and check passed, else 1.
rb_done() {
    rb_note "$RB_FAILS failed step(s)/check(s)"
    ((RB_FAILS == 0)) && exit 0
    exit 1
}

# Flags between the two VMs (files in the shared job directory).
rb_signal() { printf '%s\n' "${2:-}" > "$RB_JOB/flag.$1.tmp" && mv "$RB_JOB/flag.$1.tmp" "$RB_JOB/flag.$1"; }
rb_await() {
    local deadline=$((SECONDS + ${2:-60}))
    while ((SECONDS < deadline)); do
        [[ -f $RB_JOB/flag.$1 ]] && { cat "$RB_JOB/flag.$1"; return 0; }
        sleep 0.2
    done
    rb_note "timed out waiting for flag $1"
    return 1
}
# Waits for the gateway VM to end; the limit multiplies by RB_SLOW (an emulated arm64 gateway VM).
rb_guest_wait_gateway_done() {
    local deadline=$((SECONDS + ${1:-240} * ${RB_SLOW:-1}))
    while ((SECONDS < deadline)); do [[ -f $RB_JOB/gateway.done ]] && return 0; sleep 0.3; done
    return 1
}

# bluetoothd of this VM (started by guest-init.sh, pid in /run/rb/bluetoothd.pid).
rb_bluetoothd_pid() { cat /run/rb/bluetoothd.pid 2> /dev/null; }
rb_bluetoothd_start() {
    # shellcheck disable=SC2086
    /usr/libexec/bluetooth/bluetoothd -n $RB_BLUETOOTHD_ARGS >> "$RB_OUT/bluetoothd.log" 2>&1 &
    echo $! > /run/rb/bluetoothd.pid
}
rb_btmgmt() { script -qc "btmgmt $*" /dev/null; }
