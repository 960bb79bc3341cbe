#!/bin/bash
# The systemd scenario's checks, run as root inside a VM whose PID 1 is systemd (see systemd-preinit.sh).
# The gateway is installed with scripts/install.sh and runs as the real unit; a second btvirt controller
# plays the meter (glucose-gateway-simulator --bluez); a Nightscout double listens on the guest's loopback.
#
#   systemd-checks.sh REPO BINARY
#
# Every check prints "RB-CHECK WHAT: ok|FAIL (exit N)" with the exit status it saw; the script exits with
# the number of failed checks (0: all passed).
set -u
repo="$1"
binary="$2"
out="${RB_OUT:-/tmp}"
unit=glucose-gateway.service
user=glucose-gateway
meter=00:AA:01:01:00:01
pin=123456
secret="rb-secret-$RANDOM$RANDOM-do-not-log"
conf=/etc/glucose-gateway/glucose-gateway.toml
db=/var/lib/glucose-gateway/gateway.sqlite3
t0=$EPOCHREALTIME

failed=0
checks=0
now() { printf '%.2f' "$(bc <<<"$EPOCHREALTIME - $t0")"; }
say() { echo "RB-NOTE [$(now)s] $*"; }
check() { # check WHAT STATUS [WANTED]: records one check
    local what="$1" status="$2" want="${3:-0}"
    checks=$((checks + 1))
    if [[ "$status" == "$want" ]]; then
        echo "RB-CHECK $what: ok (exit $status)"
    else
        echo "RB-CHECK $what: FAIL (exit $status, wanted $want)"
        failed=$((failed + 1))
    fi
}
run() { # run CMD...: shows the command, its output and exit status; returns that status
    echo "\$ $*"
    "$@"
    local rc=$?
    echo "[exit $rc]"
    return $rc
}
prop() { systemctl show -p "$1" --value "$unit"; }
as_user() { runuser -u "$user" -- "$@"; }
wait_for() { # wait_for SECONDS CMD...: retries CMD every 0.5 s until it succeeds
    local deadline=$(( $(date +%s) + $1 )); shift
    until "$@"; do
        (( $(date +%s) >= deadline )) && return 1
        sleep 0.5
    done
}
journal_since() { journalctl --no-pager -o short-monotonic --since "@$1" "${@:2}"; }

pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    journalctl --no-pager -o short-monotonic -b > "$out/journal.txt" 2>&1
    dmesg > "$out/dmesg.txt" 2>&1
}
trap cleanup EXIT

# --- Set-up: bluetoothd without EATT (one ATT bearer, so the RACP indication and the measurements are
# ordered), and the one-bluetoothd work-around: the service user may not become the default agent, or
# the meter side would ask the gateway's agent for its own PIN.
sed 's/^#Channels = .*/Channels = 1/' /etc/bluetooth/main.conf > /run/rb-main.conf
mount --bind /run/rb-main.conf /etc/bluetooth/main.conf
# (trixie ships no /etc/dbus-1/system.d: its packages keep their policies under /usr/share.)
mkdir -p /etc/dbus-1/system.d
cat > /etc/dbus-1/system.d/zz-testbed-default-agent.conf <<'EOF'
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-BUS Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <policy user="glucose-gateway">
    <deny send_destination="org.bluez" send_interface="org.bluez.AgentManager1" send_member="RequestDefaultAgent"/>
  </policy>
</busconfig>
EOF

if [[ -n ${RB_DEB:-} ]]; then
    # The Debian package, as a Raspberry Pi user installs it; its maintainer scripts enable and start
    # the unit (the root's policy-rc.d, which keeps services down while the cached root is made, goes).
    say "install with apt install ./$(basename "$RB_DEB") (no Bluetooth controller yet)"
    rm -f /usr/sbin/policy-rc.d
    run env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$RB_DEB" > "$out/install.log" 2>&1
    rc=$?
    tail -n 3 "$out/install.log"
    check "apt install of the package succeeds" "$rc"
    systemctl is-enabled --quiet "$unit" || run systemctl enable "$unit"
    check "the package enabled the unit" "$(systemctl is-enabled --quiet "$unit"; echo $?)"
    # The package enables the unit but does not start it (its postinst: a meter is paired first, with
    # the service stopped); the user starts it, as here.
    check "the package did not start the unit" "$(systemctl is-active --quiet "$unit"; echo $?)" 3
    run systemctl start "$unit"
else
    say "install with scripts/install.sh (no Bluetooth controller yet)"
    run "$repo/scripts/install.sh" --binary "$binary" > "$out/install.log" 2>&1
    rc=$?
    tail -n 3 "$out/install.log"
    check "scripts/install.sh --binary installs, enables and starts the unit" "$rc"
fi
# A program image with a segment both writable and executable cannot be mapped under the unit's
# MemoryDenyWriteExecute=yes (systemd 257 on Linux >= 6.3 sets PR_SET_MDWE, which the kernel applies to
# the program's own segments at exec): the daemon dies with SIGSEGV before its first instruction.
installed_bin="$(systemctl show -p ExecStart --value "$unit" | sed -n 's/.*path=\([^ ;]*\).*/\1/p')"
run python3 - "${installed_bin:-/usr/bin/glucose-gateway}" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read(65536)
phoff, = struct.unpack_from("<Q", data, 32)
phentsize, phnum = struct.unpack_from("<HH", data, 54)
bad = 0
for i in range(phnum):
    p_type, p_flags = struct.unpack_from("<II", data, phoff + i * phentsize)
    if p_type == 1:
        flags = "R" * bool(p_flags & 4) + "W" * bool(p_flags & 2) + "E" * bool(p_flags & 1)
        print(f"LOAD {flags}")
        bad += (p_flags & 3) == 3
    elif p_type == 0x6474E552:
        print("GNU_RELRO")
sys.exit(1 if bad else 0)
PY
check "no program segment is both writable and executable (MemoryDenyWriteExecute can map it)" $?
# RB_SYSTEMD_WITHOUT_MDWE=1 (a diagnosis, never a pass): a drop-in turns MemoryDenyWriteExecute off, so
# the rest of the hardening is tried on a program image that has such a segment; the unit-property check
# below then fails, as it should.
if [[ -n ${RB_SYSTEMD_WITHOUT_MDWE:-} ]]; then
    say "diagnosis: drop-in MemoryDenyWriteExecute=no (RB_SYSTEMD_WITHOUT_MDWE)"
    mkdir -p /etc/systemd/system/$unit.d
    printf '[Service]\nMemoryDenyWriteExecute=no\n' > /etc/systemd/system/$unit.d/rb-without-mdwe.conf
    systemctl daemon-reload
    systemctl restart "$unit"
fi
# From here on the service user runs the installed copy: the binary given may sit in a checkout other
# users cannot enter (a 0700 mktemp directory, as in CI), and the unit runs the installed one anyway.
installed="$(systemctl show -p ExecStart --value "$unit" | sed -n 's/.*path=\([^ ;]*\).*/\1/p')"
[[ -x $installed ]] || installed=/usr/local/bin/glucose-gateway

say "the unit is up: READY=1 reached (Type=notify is active only after it), STATUS= set"
wait_for 30 systemctl is-active --quiet "$unit"
run systemctl is-active "$unit"
ok=$?; check "systemctl is-active" "$ok"
run systemctl show -p Type -p ActiveState -p SubState -p StatusText -p WatchdogUSec -p NRestarts "$unit"
[[ "$(prop Type)" == notify && "$(prop SubState)" == running ]]
ok=$?; check "Type=notify unit in state running (READY=1 received)" "$ok"
status_text="$(prop StatusText)"
[[ -n "$status_text" ]]
ok=$?; check "STATUS= line shown by systemctl show -p StatusText: '$status_text'" "$ok"
[[ "$(prop WatchdogUSec)" == 1min ]]
ok=$?; check "WatchdogSec=60 of the unit in effect (WatchdogUSec=$(prop WatchdogUSec))" "$ok"

say "hardening in effect on the running daemon"
pid="$(prop MainPID)"
run grep -E '^(NoNewPrivs|Seccomp|CapEff|CapBnd):' "/proc/$pid/status"
grep -q '^Seccomp:[[:space:]]*2' "/proc/$pid/status" && grep -q '^NoNewPrivs:[[:space:]]*1' "/proc/$pid/status" &&
    grep -q '^CapBnd:[[:space:]]*0000000000000000' "/proc/$pid/status"
ok=$?; check "daemon runs with a seccomp filter, no_new_privs and an empty capability bounding set" "$ok"
run systemctl show -p MemoryDenyWriteExecute -p RestrictAddressFamilies -p SystemCallArchitectures -p ProtectSystem "$unit"
[[ "$(prop MemoryDenyWriteExecute)" == yes && -n "$(prop SystemCallFilter)" && "$(prop RestrictAddressFamilies)" == *AF_UNIX* ]]
ok=$?; check "MemoryDenyWriteExecute, SystemCallFilter and RestrictAddressFamilies set on the unit" "$ok"

say "udev: a controller appearing while the service runs restarts it (btvirt started after the service)"
before="$(prop InvocationID)"
# A kernel without hci_vhci (RB_AIR=uart, arm64): hci0 is the far end of the meter VM's btvirt over the
# virtio console /dev/hvc0, attached with btattach (hci_uart, H4), as a Pi's on-board controller is; the
# meter runs in that VM. Else btvirt makes both controllers here.
uart=0
[[ ${RB_AIR:-} == uart ]] && uart=1
if ((uart)); then
    modprobe -a drbg ecdh_generic cmac ecb bluetooth hci_uart
    wanted_controllers=1
    wait_for $((180 * ${RB_SLOW:-1})) test -f "$RB_JOB/air.up"
else
    modprobe -a drbg ecdh_generic cmac ecb bluetooth hci_vhci
    wanted_controllers=2
fi
controllers_up() { [[ $(bluetoothctl list 2>/dev/null | grep -c '^Controller') -ge $wanted_controllers ]]; }
# On a loaded machine the kernel's HCI Reset to a new vhci controller can time out before btvirt
# answers ("hci0: Opcode 0x0c03 failed: -110") and the controller is gone: start btvirt again then.
for attempt in 1 2 3; do
    if ((uart)); then
        btattach -B /dev/hvc0 -P h4 -N >> "$out/btattach.log" 2>&1 &
    else
        btvirt -L -l2 > "$out/btvirt.log" 2>&1 &
    fi
    btvirt_pid=$!
    wait_for $((30 * ${RB_SLOW:-1})) controllers_up && break
    echo "controllers not up (attempt $attempt): $(bluetoothctl list 2>&1 | tr '\n' ';')"
    kill "$btvirt_pid"; wait "$btvirt_pid" 2>/dev/null
done
pids+=("$btvirt_pid")
controllers_up
ok=$?; check "bluetooth.service started through udev, bluetoothd lists $([[ $uart == 1 ]] && echo hci0 || echo 'hci0 and hci1')" "$ok"
run bluetoothctl list
restarts_before="$(prop NRestarts)"
restarted() { local now; now="$(prop InvocationID)"; [[ -n "$now" && "$now" != "$before" ]] && systemctl is-active --quiet "$unit"; }
wait_for 30 restarted
ok=$?; check "the running service was restarted when hci0/hci1 appeared (new invocation, active again)" "$ok"
# It was the rule's try-restart, not a crash and Restart=on-failure (which would count in NRestarts).
run udevadm info -q property /sys/class/bluetooth/hci0
udevadm info -q property /sys/class/bluetooth/hci0 | grep -qx 'SYSTEMD_WANTS=.*glucose-gateway.service.*' &&
    [[ "$(prop NRestarts)" == "$restarts_before" ]]
ok=$?; check "udev gave hci0 SYSTEMD_WANTS=glucose-gateway.service (our rule) and NRestarts stayed $restarts_before" "$ok"
run journalctl --no-pager -u "$unit" -o cat -n 4

say "the meter on hci1 (glucose-gateway-simulator --bluez) and a Nightscout double on the guest's loopback"
start_meter() {
    "$(dirname "$binary")/glucose-gateway-simulator" --bluez --adapter hci1 --address "$meter" --name meter+06543210 --pin "$pin" \
        --records 5 --start 2024-03-05T07:30:00 --interval-minutes 60 >> "$out/meter.log" 2>&1 &
    meter_pid=$!
    pids+=("$meter_pid")
}
if ((uart)); then
    # guest/meter.sh in the meter VM: meters/base.json (PIN 123456, 5 records), its own agent and the
    # rotation advertisement; it names its address in the flag meter-ready.
    wait_for 60 test -f "$RB_JOB/flag.meter-ready"
    ok=$?; check "the meter VM's simulator (--bluez) and meter aid are ready" "$ok"
    meter="$(cat "$RB_JOB/flag.meter-ready" 2>/dev/null)"
else
    start_meter
    wait_for 30 grep -q '^ready' "$out/meter.log"
    ok=$?; check "the simulator (--bluez) registered on hci1" "$ok"
    # The meter side's keypad agent (the default agent, answering the meter's PIN) and the second, rotating
    # advertisement that keeps btvirt reporting the meter to a scanner (guest/meter_aid.py).
    python3 "$repo/scripts/real-bluez/guest/meter_aid.py" --pin "$pin" --rotate --adapter hci1 > "$out/meter-aid.log" 2>&1 &
    pids+=($!)
    wait_for 20 grep -q '^ready' "$out/meter-aid.log"
    ok=$?; check "meter-side keypad agent (default agent) and rotation advertisement registered" "$ok"
fi
python3 "$repo/SystemTests/fake_nightscout.py" --port 0 --control-port 0 --secret "$secret" > "$out/nightscout.log" 2>&1 &
pids+=($!)
wait_for 20 grep -q '"port"' "$out/nightscout.log"
ns_port="$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["port"])' "$out/nightscout.log")"
ns_control="$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["control_port"])' "$out/nightscout.log")"

write_config() { # the service's config; extra lines appended
    cat > "$conf" <<EOF
[gateway]
database = "$db"
adapter = "hci0"
time_zone = "Europe/Berlin"
[nightscout]
url = "http://127.0.0.1:$ns_port"
api_secret_file = "/etc/glucose-gateway/nightscout.secret"
$*
EOF
}
install -m 600 -o "$user" -g "$user" /dev/stdin /etc/glucose-gateway/nightscout.secret <<<"$secret"
write_config

say "pair as the service user with the service stopped (as the README says)"
run systemctl stop "$unit"
run as_user "$installed" pair "$meter" --pin "$pin" --timezone Europe/Berlin --wait 30
ok=$?; check "glucose-gateway pair (service user, real BlueZ, passkey entry)" "$ok"

say "the daemon under every hardening line downloads, stores and uploads"
start_at="$(date +%s)"
run systemctl start "$unit"
ok=$?; check "systemctl start" "$ok"
stored() { [[ "$(as_user "$installed" --config "$conf" readings --json 2>/dev/null | grep -c '"sequence"')" -ge 5 ]]; }
wait_for 45 stored
got=$?
if ((got != 0 && uart)); then
    # The meter is in the other VM: it keeps advertising; give the emulated gateway VM longer.
    wait_for 60 stored
    got=$?
elif ((got != 0)); then
    # btvirt reports an advertisement only when advertising or scanning is switched on; when the
    # daemon's scan missed those moments, registering the meter again switches its advertising on anew.
    say "no download yet: the meter registers its advertisement again (an emulated-controller artefact)"
    kill "$meter_pid"; wait "$meter_pid" 2>/dev/null
    start_meter
    wait_for 60 stored
    got=$?
fi
check "the daemon stored all 5 readings of the meter" "$got"
run as_user "$installed" --config "$conf" readings
entries() { curl -s "http://127.0.0.1:$ns_control/__entries" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)))'; }
uploaded() { [[ "$(entries)" -ge 5 ]]; }
wait_for 30 uploaded
ok=$?; check "the daemon uploaded the 5 readings to the Nightscout double" "$ok"
run curl -s "http://127.0.0.1:$ns_control/__stats"; echo
journal_since "$start_at" -u "$unit" > "$out/journal-download.txt"
! grep -Eiq 'SIGSYS|status=31|code=dumped|core dump|Bad system call|seccomp' "$out/journal-download.txt" &&
    ! journalctl --no-pager -k -b | grep -Eq 'audit.*(type=1326|seccomp)'
ok=$?; check "no SIGSYS, seccomp kill or core dump in the journal or the kernel log" "$ok"
[[ "$(prop NRestarts)" == 0 ]] && systemctl is-active --quiet "$unit"
ok=$?; check "the service never restarted while downloading and uploading (NRestarts=$(prop NRestarts))" "$ok"
run journalctl --no-pager -u "$unit" -p warning -o cat --since "@$start_at"

say "reload with a bad config: the service stays up on the old one, reports the error, no secret"
pid="$(prop MainPID)"
cp "$conf" /run/rb-good.toml
# A string left open on a line holding the secret: an error that quoted the line would leak it.
write_config "api_secret = \"$secret"
reload_at="$(date +%s)"
sleep 1
run systemctl reload "$unit"
ok=$?; check "systemctl reload (SIGHUP) with a bad config" "$ok"
reported() { journal_since "$reload_at" -u "$unit" -o cat | grep -q 'configuration not reloaded'; }
wait_for 15 reported
ok=$?; check "the journal says 'configuration not reloaded, keeping the running one: ...'" "$ok"
run journal_since "$reload_at" -u "$unit" -o cat
sleep 1
[[ "$(prop MainPID)" == "$pid" ]] && systemctl is-active --quiet "$unit"
ok=$?; check "same process still active after the bad reload (MainPID $pid)" "$ok"
{ journalctl --no-pager -b -o cat; systemctl status --no-pager "$unit"; prop StatusText; } > "$out/after-reload.txt" 2>&1
! grep -qF "$secret" "$out/after-reload.txt"
ok=$?; check "the secret appears nowhere in the journal, systemctl status or StatusText" "$ok"
run systemctl show -p StatusText "$unit"
cp /run/rb-good.toml "$conf"
run systemctl reload "$unit"
sleep 1
[[ "$(prop MainPID)" == "$pid" ]] && systemctl is-active --quiet "$unit"
ok=$?; check "reload of the good config again: still the same active process" "$ok"

# A drop-in shortens the intervals so the check fits in the run: WatchdogSec=8s (the daemon pings at half
# the interval systemd passes it in WATCHDOG_USEC; the interval also covers its start under emulation) and
# RestartSec=1s. TimeoutAbortSec stays the unit's (TimeoutStopSec=30): the watchdog's SIGABRT itself must
# end a hung daemon.
say "watchdog (drop-in WatchdogSec=8s, RestartSec=1s)"
mkdir -p /run/systemd/system/$unit.d
printf '[Service]\nWatchdogSec=8s\nRestartSec=1s\n' > /run/systemd/system/$unit.d/testbed-watchdog.conf
systemctl daemon-reload
restarts="$(prop NRestarts)"
run systemctl restart "$unit"
ok=$?; check "systemctl restart with the watchdog drop-in" "$ok"
pid="$(prop MainPID)"
sleep 18
[[ "$(prop MainPID)" == "$pid" && "$(prop NRestarts)" == "$restarts" ]] && systemctl is-active --quiet "$unit"
ok=$?; check "not killed over 18 s with WatchdogSec=8s (MainPID $pid kept, NRestarts $(prop NRestarts), was $restarts)" "$ok"
stop_at="$(date +%s)"
sleep 1
run kill -STOP "$pid"
watchdog_restart() { [[ "$(prop NRestarts)" -gt "$restarts" && "$(prop MainPID)" != "$pid" ]] && systemctl is-active --quiet "$unit"; }
wait_for 45 watchdog_restart
ok=$?; check "a SIGSTOPped daemon is killed by the watchdog and restarted (new MainPID $(prop MainPID))" "$ok"
journal_since "$stop_at" -o cat -u "$unit" | grep -E 'Watchdog timeout|Main process exited'
journal_since "$stop_at" -o cat -u "$unit" | grep -qi 'watchdog timeout'
ok=$?; check "the journal names the watchdog timeout (systemd's own message)" "$ok"
journal_since "$stop_at" -o cat -u "$unit" | grep -Eq 'Main process exited, code=(dumped|killed), status=6/ABRT'
ok=$?; check "the watchdog's SIGABRT ended the daemon (status=6/ABRT, not a SIGKILL after TimeoutAbortSec)" "$ok"
rm -f /run/systemd/system/$unit.d/testbed-watchdog.conf
systemctl daemon-reload
run systemctl restart "$unit"
wait_for 20 systemctl is-active --quiet "$unit"

say "systemctl stop completes within 5 s"
t_stop=$EPOCHREALTIME
run systemctl stop "$unit"
rc=$?
took="$(bc <<<"$EPOCHREALTIME - $t_stop")"
echo "stop took ${took}s"
[[ $rc == 0 ]] && (( $(bc <<<"$took < 5") ))
ok=$?; check "systemctl stop in ${took}s (< 5 s)" "$ok"
run systemctl show -p Result -p ExecMainStatus -p ActiveState "$unit"
[[ "$(prop Result)" == success && "$(prop ActiveState)" == inactive ]]
ok=$?; check "stopped cleanly (Result=success, inactive)" "$ok"

say "$((checks - failed)) of $checks checks passed"
exit "$failed"
