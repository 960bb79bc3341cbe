#!/usr/bin/env bash
# The gateway end to end on a machine without Bluetooth hardware, in about a minute:
# a private D-Bus with a simulated BlueZ and glucose meter, a loopback Nightscout, `glucose-gateway pair`
# and `glucose-gateway run`. Shows readings arriving, a network drop (error code shown, readings kept) and
# the replay when the receiver returns, then what to do with real hardware. Ends by itself and leaves no
# process behind.
#
# GLUCOSE_GATEWAY_BIN=path skips installing and building (the test suite uses this). The simulated meter
# is glucose-gateway-simulator: GLUCOSE_GATEWAY_SIMULATOR, else the one beside the gateway binary (a
# build of this tree), else the package's (/usr/libexec/glucose-gateway beside /usr/bin).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

step() { printf '\n== %s\n' "$*"; }
say() { printf '   %s\n' "$*"; }
die() {
    printf 'demo: %s\n' "$*" >&2
    [[ -n "${work:-}" && -f "$work/run.log" ]] && { echo "demo: last lines of the daemon's log:" >&2; tail -n 15 "$work/run.log" >&2; }
    exit 1
}

if [[ -n "${GLUCOSE_GATEWAY_BIN:-}" ]]; then
    bin="$GLUCOSE_GATEWAY_BIN"
else
    step "Installing what is missing and building (first run only)"
    source "$here/scripts/install-deps.sh"
    (cd "$here" && swift build -c release --product glucose-gateway 2>&1 | tail -1 \
        && swift build -c release --product glucose-gateway-simulator 2>&1 | tail -1) || die "build failed"
    bin="$here/.build/release/glucose-gateway"
fi
[[ -x "$bin" ]] || die "no glucose-gateway binary at $bin"
simulator="${GLUCOSE_GATEWAY_SIMULATOR:-$(dirname "$bin")/glucose-gateway-simulator}"
[[ -x "$simulator" ]] || simulator="$(dirname "$bin")/../libexec/glucose-gateway/glucose-gateway-simulator"
[[ -x "$simulator" ]] || die "no glucose-gateway-simulator beside $bin (swift build --product glucose-gateway-simulator)"
command -v dbus-daemon >/dev/null || die "dbus-daemon is missing (scripts/install-deps.sh installs it)"
command -v python3 >/dev/null || die "python3 is missing (scripts/install-deps.sh installs it)"

work="$(mktemp -d /tmp/glucose-gateway-demo.XXXXXX)"
pids=()
cleanup() {
    local status=$?
    set +e
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        kill -TERM "${pids[i]}" 2>/dev/null
    done
    for pid in "${pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -0 "$pid" 2>/dev/null && kill -KILL "$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
    done
    local left=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && left=$((left + 1)); done
    rm -rf "$work"
    if ((left)); then
        echo "demo: $left process(es) did not stop" >&2
        exit 1
    fi
    echo "   all demo processes stopped"
    exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Waits up to $1 seconds for the shell condition $2 (evaluated each time) to hold.
wait_for() {
    local seconds=$1 condition=$2
    local end=$((SECONDS + seconds))
    until eval "$condition" >/dev/null 2>&1; do
        ((SECONDS < end)) || return 1
        sleep 0.2
    done
}

meter=C0:26:DA:01:02:03
pin=123456
secret=demo-api-secret-0123
export TZ=UTC

step "1/7 A private D-Bus (the demo never touches the system bus)"
cat >"$work/bus.conf" <<EOF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=$work/bus.sock</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/> <allow own="*"/>
    <allow send_type="method_call"/> <allow send_type="signal"/>
    <allow send_type="method_return"/> <allow send_type="error"/>
    <allow receive_type="method_call"/> <allow receive_type="signal"/>
    <allow receive_type="method_return"/> <allow receive_type="error"/>
  </policy>
</busconfig>
EOF
dbus-daemon --nofork --nopidfile --config-file="$work/bus.conf" 2>"$work/bus.log" &
pids+=($!)
wait_for 10 'test -S "$work/bus.sock"' || die "dbus-daemon did not start"
export DBUS_SYSTEM_BUS_ADDRESS="unix:path=$work/bus.sock"
say "bus at $DBUS_SYSTEM_BUS_ADDRESS (work directory $work)"

step "2/7 A simulated BlueZ with one glucose meter (8 readings in memory, PIN $pin)"
cat >"$work/meter.json" <<EOF
{"address": "$meter", "name": "meter+DEMO01", "pin": "$pin", "bonding": true, "unit": "kg/L",
 "deviceInformation": {"manufacturer": "Demo Diagnostics", "model": "GL-Demo", "serial": "DEMO0001", "firmware": "1.0"},
 "features": ["multipleBond"],
 "generate": {"count": 8, "firstSequence": 1, "start": "2024-03-05T07:30:00", "intervalMinutes": 180},
 "advertising": "off"}
EOF
"$simulator" --standin --time-scale 10 --meter "$work/meter.json" >"$work/sim.out" 2>"$work/sim.log" &
pids+=($!)
wait_for 20 'grep -q ^ready "$work/sim.out"' || die "the simulator did not start: $(tail -3 "$work/sim.log")"
say "org.bluez is the stand-in; adapter hci0; meter $meter (not advertising until used)"

control() { # method, then dbus-send typed arguments
    local method=$1; shift
    dbus-send --bus="$DBUS_SYSTEM_BUS_ADDRESS" --print-reply --reply-timeout=10000 --dest=org.bluez \
        /org/glucosegateway/simulator "org.glucosegateway.Simulator1.$method" "$@" >/dev/null
}

step "3/7 A loopback Nightscout (SystemTests/fake_nightscout.py, standard library only)"
python3 "$here/SystemTests/fake_nightscout.py" --secret "$secret" >"$work/ns.out" 2>"$work/ns.log" &
pids+=($!)
wait_for 10 'grep -q port "$work/ns.out"' || die "the Nightscout double did not start"
read -r ns_port ns_control < <(python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).readline()); print(d["port"], d["control_port"])' "$work/ns.out")
nightscout() { # GET path | POST path json
    python3 - "$ns_control" "$@" <<'EOF'
import json, sys, urllib.request
port, method, path = sys.argv[1], sys.argv[2], sys.argv[3]
body = sys.argv[4].encode() if len(sys.argv) > 4 else None
req = urllib.request.Request("http://127.0.0.1:%s%s" % (port, path), data=body, method=method,
                             headers={"Content-Type": "application/json"})
with urllib.request.urlopen(req, timeout=10) as r:
    data = json.loads(r.read() or b"null")
print(len(data) if isinstance(data, list) else json.dumps(data))
EOF
}
say "Nightscout at http://127.0.0.1:$ns_port"

cat >"$work/gateway.toml" <<EOF
[gateway]
database = "$work/gateway.sqlite3"
metrics_file = "$work/metrics.prom"
download_idle_timeout_s = 5
[nightscout]
url = "http://127.0.0.1:$ns_port"
api_secret_file = "$work/nightscout.secret"
[network]
retry_count = 1
network_timeout_ms = 1000
recovery_mode = true
EOF
printf '%s\n' "$secret" >"$work/nightscout.secret"
chmod 600 "$work/nightscout.secret"
gw() { "$bin" --config "$work/gateway.toml" "$@"; }
field() { # status --json, then a Python expression over `s`
    gw status --json | python3 -c 'import json,sys; s=json.load(sys.stdin); print(eval(sys.argv[1]))' "$1"
}
stored() { field 's["store"]["readings"]'; }
uploaded() { nightscout GET /__entries; }

step "4/7 Pairing, as a user would: press the meter's button, then type the PIN it shows"
control Advertise string:"$meter" double:120
gw pair "$meter" --pin "$pin" --timezone UTC --wait 30 | sed 's/^/   /'

step "5/7 The daemon: glucose-gateway run"
"$bin" --config "$work/gateway.toml" run --quiet-after 1 --time-scale 10 2>"$work/run.log" &
run_pid=$!
pids+=($run_pid)
wait_for 20 'grep -q running: "$work/run.log"' || die "the daemon did not start: $(tail -3 "$work/run.log")"
say "the meter takes a measurement and advertises for a few seconds..."
control AddGeneratedRecord string:"$meter"
wait_for 30 'test "$(stored)" -ge 9' || die "no readings arrived"
wait_for 30 'test "$(uploaded)" -ge 9' || die "nothing reached Nightscout"
say "readings stored: $(stored); entries on Nightscout: $(uploaded)"
gw status | sed 's/^/   | /'

step "6/7 The network drops (Nightscout unreachable); the meter keeps measuring"
nightscout POST /__control '{"mode": "down"}' >/dev/null
control AddGeneratedRecord string:"$meter"
sleep 1
control AddGeneratedRecord string:"$meter"
wait_for 30 'test "$(stored)" -ge 11' || die "the new readings were not stored"
error_code() { field '(s["destinations"][0]["last_error"] or {}).get("code", 0)'; }
wait_for 30 'test "$(error_code)" -ge 1001' ||
    die "no network error code in status"
say "readings stored: $(stored), kept locally; entries on Nightscout: $(uploaded)"
say "error code: $(field '"%d %s" % (s["destinations"][0]["last_error"]["code"], s["destinations"][0]["last_error"]["name"])'), pending: $(field 's["destinations"][0]["pending"]')"
gw status | grep -E 'nightscout|last error' | sed 's/^/   | /'

step "7/7 The receiver returns: the replay"
nightscout POST /__control '{"mode": "up"}' >/dev/null
wait_for 40 'test "$(uploaded)" -ge "$(stored)"' || die "the replay did not finish"
say "entries on Nightscout: $(uploaded) of $(stored) readings, each once (Nightscout counted $(nightscout GET /__stats | python3 -c 'import json,sys; print(json.load(sys.stdin)["inserted"])') inserts)"
pending() { field 's["destinations"][0]["pending"]'; }
wait_for 10 'test "$(pending)" -eq 0' || true
gw status | grep -E 'nightscout' | sed 's/^/   | /'
grep -E '^glucose_gateway_(readings_stored_total|uploaded_total|pending|network_state) ' "$work/metrics.prom" | sed 's/^/   metrics: /' || true

kill -TERM "$run_pid"
wait "$run_pid" || die "glucose-gateway run exited with status $?"
say "glucose-gateway run stopped on SIGTERM with exit status 0"

cat <<'EOF'

== With real hardware (a Raspberry Pi with Bluetooth, or any Linux with BlueZ 5.66+)
   sudo scripts/install.sh                       # user, config, systemd unit, D-Bus policy, udev rule
   sudo editor /etc/glucose-gateway/glucose-gateway.toml    # Nightscout url and api_secret_file
   glucose-gateway scan                          # press the meter's Bluetooth button first
   glucose-gateway pair AA:BB:CC:DD:EE:FF --pin 123456 --timezone Europe/Berlin
   sudo systemctl enable --now glucose-gateway   # then measure as usual; readings follow by themselves
   glucose-gateway status                        # meters, queue, last error (1001/1002), last success
EOF
echo "demo finished"
