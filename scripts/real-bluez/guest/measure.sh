# Measurements of the gateway on this VM's architecture (scenario measure): peak RSS (GNU time's %M, in
# KiB) of `--help`, of a 1,000-record sync with an upload to a Nightscout double on loopback, and of an
# idle daemon; then the instruction count of the same sync under valgrind's callgrind when valgrind is
# there. The meter is the stand-in on a private bus: memory and instructions do not depend on the radio.
# Figures go to the console as "RB-NOTE measure NAME=VALUE" and to $RB_OUT/measure.txt.
source "$RB_LIBDIR/guest-lib.sh"
count="${RB_MEASURE_RECORDS:-1000}"
gg="$RB_GATEWAY_BIN"
w=/tmp/measure
mkdir -p "$w"
figure() { echo "$1=$2" >> "$RB_OUT/measure.txt"; rb_note "measure $1=$2"; }
rb_note "measuring $gg on $(uname -m), $count records"
figure arch "$(uname -m)"
figure bluez_userland "$(/usr/libexec/bluetooth/bluetoothd -v)"

cat > "$w/bus.conf" <<CONF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=$w/bus.sock</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/><allow own="*"/>
    <allow send_type="method_call"/><allow send_type="signal"/><allow send_type="method_return"/><allow send_type="error"/>
    <allow receive_type="method_call"/><allow receive_type="signal"/><allow receive_type="method_return"/><allow receive_type="error"/>
  </policy>
  <limit name="max_replies_per_connection">100000</limit>
</busconfig>
CONF
dbus-daemon --nofork --nopidfile --config-file="$w/bus.conf" > "$w/bus.log" 2>&1 &
for _ in $(seq 300); do [[ -S $w/bus.sock ]] && break; sleep 0.1; done
export DBUS_SYSTEM_BUS_ADDRESS="unix:path=$w/bus.sock"
/usr/bin/python3 - "$count" > "$w/meter.json" <<'PY'
import datetime, json, sys
n = int(sys.argv[1])
base = datetime.datetime(2024, 3, 5)
records = [{"sequence": s, "time": (base + datetime.timedelta(minutes=20 * s)).strftime("%Y-%m-%dT%H:%M:%S"),
            "timeOffset": 60, "mgdl": 70 + s % 150} for s in range(1, n + 1)]
print(json.dumps({"address": "C0:26:DA:01:02:03", "name": "meter+010203", "pin": "123456",
                  "deviceInformation": {"manufacturer": "Simulated Meters", "model": "GlucoSim 1", "serial": "SIM03"},
                  "records": records}))
PY
"$RB_SIMULATOR_BIN" --standin --meter "$w/meter.json" > "$w/standin.log" 2>&1 &
/usr/bin/python3 "$RB_REPO/SystemTests/fake_nightscout.py" --port 0 --control-port 0 --secret correct-horse-battery \
    > "$w/nightscout.json" 2> "$w/nightscout.log" &
for _ in $(seq 600); do grep -q '^ready' "$w/standin.log" && grep -q '"port"' "$w/nightscout.json" && break; sleep 0.1; done
rb_check "stand-in meter and Nightscout double up" grep -q '^ready' "$w/standin.log"
port="$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["port"])' "$w/nightscout.json")"
echo correct-horse-battery > "$w/secret" && chmod 600 "$w/secret"
printf '[gateway]\ndatabase = "%s/gateway.sqlite3"\n[nightscout]\nurl = "http://127.0.0.1:%s"\napi_secret_file = "%s/secret"\n' \
    "$w" "$port" "$w" > "$w/gateway.toml"
gw() { TZ=UTC "$gg" --config "$w/gateway.toml" "$@"; }
# GNU time's figures of the last `peak` command (it runs inside rb_step's subshell: read from the file).
peak() { /usr/bin/time -f '%M %e' -o "$w/time.txt" "$@"; }
peak_kib() { cut -d' ' -f1 "$w/time.txt"; }

rb_step "--help" 0 peak "$gg" --help
figure help_peak_rss_kib "$(peak_kib)"
rb_step "pair with the stand-in" 0 gw pair C0:26:DA:01:02:03 --pin 123456 --timezone UTC --wait 60
cp "$w/gateway.sqlite3" "$w/paired.sqlite3"
rb_step "sync of $count records with upload" 0 peak "$gg" --config "$w/gateway.toml" sync --wait 60
rb_check "every record stored" test "$(sqlite3 "$w/gateway.sqlite3" 'SELECT count(*) FROM reading')" = "$count"
figure sync_peak_rss_kib "$(peak_kib)"
figure sync_wall_seconds_tcg "$(cut -d' ' -f2 "$w/time.txt")"
rb_step "uploaded to the double" 0 bash -c "sqlite3 '$w/gateway.sqlite3' \"SELECT count(*) FROM outbox WHERE state = 'acknowledged'\""
figure sync_uploaded "$RB_OUTPUT"

TZ=UTC "$gg" --config "$w/gateway.toml" run > "$w/daemon.log" 2>&1 &
daemon=$!
sleep "$((20 * ${RB_SLOW:-1}))"
figure idle_daemon_vmhwm_kib "$(awk '/^VmHWM/ {print $2}' "/proc/$daemon/status")"
figure idle_daemon_vmrss_kib "$(awk '/^VmRSS/ {print $2}' "/proc/$daemon/status")"
kill -TERM "$daemon"; wait "$daemon"

if command -v valgrind > /dev/null; then
    cp "$w/paired.sqlite3" "$w/gateway.sqlite3"
    curl -s -X POST "http://127.0.0.1:$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["control_port"])' "$w/nightscout.json")/__reset" > /dev/null
    # valgrind before 3.20 gives up on the DWARF 5 of a debug build ("Possibly corrupted debuginfo
    # file"): a stripped copy counts the same instructions.
    target="$gg"
    if command -v strip > /dev/null; then strip -o "$w/gg-stripped" "$gg" && target="$w/gg-stripped"; fi
    rb_step "sync under callgrind" any timeout "$((600 * ${RB_SLOW:-1}))" valgrind --tool=callgrind \
        --callgrind-out-file="$RB_OUT/callgrind.out" "$target" --config "$w/gateway.toml" sync --wait 600
    figure sync_instructions_ir "$(sed -n 's/^summary: //p' "$RB_OUT/callgrind.out" 2> /dev/null | cut -d' ' -f1)"
    echo "$RB_OUTPUT" | tail -n 3 > "$RB_OUT/callgrind-tail.txt"
fi
rb_done
