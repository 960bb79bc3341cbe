#!/bin/bash
# One boot of the power-cut scenario: PID 1 of the VM (rb_boot --init, see lib.sh), as root.
#
#   power-cut-guest.sh prepare|cut|check
#
# Reads the job's VMNAME.env (/run/rbjob/VMNAME.env, VMNAME from rb.name= on the kernel command line):
#   GG_BIN       the gateway binary (on the host root)
#   GG_REPO      the repository (for the relay)
#   PC_KIND      download | upload: what the cut boot interrupts
#   PC_PREV_KIND download | upload | "": the kind of the disk cut in the previous boot (checked first)
#   PC_COUNT     records on the meter (1000)
# Disks (virtio, ext4, made on the host): prepare: vda (download template), vdb (upload template),
# vdc (scratch, to time an upload); cut: vda (the disk cut now) and, after the first cut, vdb (the disk
# cut in the previous boot); check: vdb alone.
#
# The meter is `glucose-gateway-simulator --standin` on a private dbus-daemon (durability does not depend on the
# radio; real BlueZ would only make each boot slower). Nightscout is the host's double, reached through
# power-cut-relay.py: the guest's 127.0.0.1:17580 is its API, 127.0.0.1:17581 its control port.
#
# Results go to /run/rbjob/VMNAME/: "go" (written right before the command the host cuts), results.txt
# (one "RESULT name=value" or "RB-CHECK what: ok|FAIL" line each), the gateway's logs; the number of
# failed checks to /run/rbjob/VMNAME.rc when the boot ends by itself.
set -u
mode="${1:?prepare|cut|check}"
[[ $$ == 1 ]] && mount -t proc proc /proc
name="$(tr ' ' '\n' < /proc/cmdline | sed -n 's/^rb\.name=//p' | tail -n 1)"
job=/run/rbjob
# shellcheck disable=SC1090
source "$job/$name.env"
out="$job/$name"
mkdir -p "$out"
results="$out/results.txt"
: > "$results"
api=http://127.0.0.1:17580
control=http://127.0.0.1:17581
meter=C0:26:DA:01:02:03
count="${PC_COUNT:-1000}"
failed=0
t0=$EPOCHREALTIME

say() { echo "RB-NOTE power-cut [$(printf '%.2f' "$(bc <<<"$EPOCHREALTIME - $t0")")s]: $*"; }
result() { echo "RESULT $1=$2" | tee -a "$results"; }
check() { # check WHAT STATUS
    if [[ "$2" == 0 ]]; then
        echo "RB-CHECK $1: ok" | tee -a "$results"
    else
        echo "RB-CHECK $1: FAIL (exit $2)" | tee -a "$results"
        failed=$((failed + 1))
    fi
}
finish() {
    cp /run/pc/*.log "$out/" 2>/dev/null
    sync
    echo "RB-EXIT-CODE=$failed"
    echo "$failed" > "$job/$name.rc"
    sync
    if [[ $$ == 1 ]]; then
        umount /data /prev /scratch 2>/dev/null
        echo o > /proc/sysrq-trigger
        sleep 30
    fi
    exit "$failed"
}

# --- The machine.
if [[ $$ == 1 ]]; then
    mount -t sysfs sys /sys
    # shellcheck source=scripts/real-bluez/guest-tmp.sh
    source "$(dirname "${BASH_SOURCE[0]}")/guest-tmp.sh"
    rb_private_tmp "$GG_REPO" "$GG_BIN" "$(dirname "${BASH_SOURCE[0]}")"
    ip link set lo up
fi
# arm64: the gateway is the package, installed on this boot's overlay (its dependencies are cached).
if [[ -n ${RB_DEB:-} && ! -x $GG_BIN ]]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$RB_DEB" > /run/apt-install.log 2>&1 ||
        echo "RB-NOTE apt install of $RB_DEB failed: $(tail -n 1 /run/apt-install.log)"
fi
# The meter simulator beside the gateway binary (a build), else the package's.
simulator="$(dirname "$GG_BIN")/glucose-gateway-simulator"
[[ -x $simulator ]] || simulator=/usr/libexec/glucose-gateway/glucose-gateway-simulator
modprobe -a virtio_blk ext4 virtio_console >/dev/null 2>&1
# The virtio-serial port by its name (no udev here to make the /dev/virtio-ports/ link).
port_dev=""
for _ in $(seq 50); do
    for n in /sys/class/virtio-ports/*/name; do
        [[ -f $n && "$(cat "$n")" == rb.nightscout ]] && port_dev="/dev/$(basename "$(dirname "$n")")"
    done
    [[ -n $port_dev && -e $port_dev ]] && break
    sleep 0.1
done

mount_disk() { # DEVICE DIR
    mkdir -p "$2"
    mount -t ext4 "$1" "$2" || { echo "power-cut: cannot mount $1"; return 1; }
}

# Private system-style bus (the tests' permissive policy) and the relay to the host's Nightscout double.
mkdir -p /run/pc
cat > /run/pc/bus.conf <<EOF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>system</type>
  <listen>unix:path=/run/pc/bus.sock</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow user="*"/><allow own="*"/>
    <allow send_type="method_call"/><allow send_type="signal"/><allow send_type="method_return"/><allow send_type="error"/>
    <allow receive_type="method_call"/><allow receive_type="signal"/><allow receive_type="method_return"/><allow receive_type="error"/>
  </policy>
  <limit name="max_replies_per_connection">100000</limit>
</busconfig>
EOF
dbus-daemon --nofork --nopidfile --config-file=/run/pc/bus.conf > /run/pc/bus.log 2>&1 &
export DBUS_SYSTEM_BUS_ADDRESS=unix:path=/run/pc/bus.sock
python3 "$GG_REPO/scripts/real-bluez/power-cut-relay.py" guest "$port_dev" 17580 17581 \
    > /run/pc/relay.log 2>&1 &
for _ in $(seq 300); do [[ -S /run/pc/bus.sock ]] && break; sleep 0.1; done

# The meter: 1000 records, one notification each as fast as the stand-in sends them.
python3 - "$count" > /run/pc/meter.json <<'EOF'
import datetime, json, sys
n = int(sys.argv[1])
base = datetime.datetime(2024, 3, 5)
records = [{"sequence": s, "time": (base + datetime.timedelta(minutes=20 * s)).strftime("%Y-%m-%dT%H:%M:%S"),
            "timeOffset": 60, "mgdl": 70 + s % 150} for s in range(1, n + 1)]
print(json.dumps({"address": "C0:26:DA:01:02:03", "name": "meter+010203", "pin": "123456",
                  "deviceInformation": {"manufacturer": "Simulated Meters", "model": "GlucoSim 1", "serial": "SIM03"},
                  "records": records}))
EOF
# The meter keeps its bond in the job directory: it is not the machine that loses power.
"$simulator" --standin --meter /run/pc/meter.json --state "$job/meter-bonds.json" > /run/pc/standin.log 2>&1 &
for _ in $(seq 300); do grep -q '^ready' /run/pc/standin.log && grep -q 'relay ready' /run/pc/relay.log && break; sleep 0.1; done
grep -q 'relay ready' /run/pc/relay.log || { echo "power-cut: the relay did not start"; cat /run/pc/relay.log; failed=1; finish; }
grep -q '^ready' /run/pc/standin.log || { echo "power-cut: the stand-in did not start"; cat /run/pc/standin.log; failed=1; finish; }
say "private bus, relay and stand-in meter up"

gw() { # gw DIR ARGS...: the gateway with the config on that disk
    local dir="$1"; shift
    TZ=UTC "$GG_BIN" --config "$dir/gw/gateway.toml" "$@"
}
q() { sqlite3 -batch -noheader "$1/gw/gateway.sqlite3" "$2"; }
server() { curl -s -m 20 "$@"; }
# Identifiers the server holds, one a line, sorted.
server_ids() { server "$control/__entries" | python3 -c 'import json,sys; [print(d["identifier"]) for d in json.load(sys.stdin)]' | sort; }

write_config() { # DIR WITH_NIGHTSCOUT
    mkdir -p "$1/gw"
    {
        # Paths relative to the config file: a disk is checked under another mount point than it was made.
        printf '[gateway]\ndatabase = "gateway.sqlite3"\ndownload_idle_timeout_s = 5\n'
        if [[ "$2" == 1 ]]; then
            printf '[nightscout]\nurl = "%s"\napi_secret_file = "nightscout.secret"\n' "$api"
            printf '[network]\nretry_count = 0\nnetwork_timeout_ms = 10000\n'
        fi
    } > "$1/gw/gateway.toml"
    (umask 077 && echo correct-horse-battery > "$1/gw/nightscout.secret")
}

# The checks after a cut: the store is intact, nothing the server holds is missing from it, and the next
# sync or upload completes: every record exactly once in the store (and on the server for an upload disk).
check_disk() { # DIR KIND
    local dir="$1" kind="$2" ic before ids_server ids_store acked rc
    ic="$(q "$dir" 'PRAGMA integrity_check' 2>&1)"
    [[ "$ic" == ok ]]
    ok=$?; check "PRAGMA integrity_check after the cut: $ic" "$ok"
    before="$(q "$dir" 'SELECT count(*) FROM reading')"
    result stored_after_cut "$before"
    if [[ "$kind" == download ]]; then
        (( before < count )) && result cut_midway 1
        (( before > 0 && before < count )) && result cut_partial 1
        gw "$dir" sync > "$out/sync-after.log" 2>&1
        rc=$?
        check "sync after the cut fetches the rest (exit $rc)" "$rc"
    else
        ids_server="$(server_ids)"
        ids_store="$(q "$dir" 'SELECT idempotency_key FROM outbox JOIN reading ON reading.id = outbox.reading_id' | sort)"
        acked="$(q "$dir" "SELECT idempotency_key FROM outbox WHERE state = 'acknowledged'" | sort)"
        local n_server n_acked
        n_server="$(grep -c . <<<"$ids_server")"
        n_acked="$(grep -c . <<<"$acked")"
        result server_after_cut "$n_server"
        result acknowledged_after_cut "$n_acked"
        (( n_acked < count )) && result cut_midway 1
        (( n_server > 0 && n_acked < count )) && result cut_partial 1
        [[ -z "$(comm -23 <(echo "$ids_server") <(echo "$ids_store"))" ]]
        ok=$?; check "every reading the server holds ($n_server) is in the store" "$ok"
        [[ -z "$(comm -23 <(echo "$acked") <(echo "$ids_server"))" ]]
        ok=$?; check "every upload the store marks acknowledged ($n_acked) is on the server" "$ok"
        gw "$dir" upload > "$out/upload-after.log" 2>&1
        rc=$?
        check "upload after the cut sends the rest (exit $rc)" "$rc"
        ids_server="$(server_ids)"
        [[ "$(grep -c . <<<"$ids_server")" == "$count" && "$(sort -u <<<"$ids_server" | grep -c .)" == "$count" ]]
        ok=$?; check "the server holds $count entries, each once ($(grep -c . <<<"$ids_server") entries, $(sort -u <<<"$ids_server" | grep -c .) distinct)" "$ok"
        [[ "$(q "$dir" "SELECT count(*) FROM outbox WHERE state != 'acknowledged'")" == 0 ]]
        ok=$?; check "nothing left pending in the outbox" "$ok"
        result server_stats "$(server "$control/__stats" | tr -d '\n ')"
    fi
    local seqs
    seqs="$(q "$dir" 'SELECT count(*), count(DISTINCT sequence), min(sequence), max(sequence) FROM reading')"
    [[ "$seqs" == "$count|$count|1|$count" ]]
    ok=$?; check "the store holds records 1..$count exactly once (count|distinct|min|max = $seqs)" "$ok"
}

case "$mode" in
prepare)
    mount_disk /dev/vda /data && mount_disk /dev/vdb /prev && mount_disk /dev/vdc /scratch || { failed=1; finish; }
    say "pair on the download template"
    write_config /data 0
    gw /data pair "$meter" --pin 123456 --wait 10 > "$out/pair.log" 2>&1
    ok=$?; check "pair with the stand-in meter" "$ok"
    say "time one download on a scratch copy"
    mkdir -p /scratch/gw && cp -a /data/gw/. /scratch/gw/
    start=$EPOCHREALTIME
    gw /scratch sync > "$out/sync-timing.log" 2>&1
    ok=$?; check "a whole download of $count records (exit $ok)" "$ok"
    result download_seconds "$(bc <<<"$EPOCHREALTIME - $start")"
    rm -rf /scratch/gw
    say "the upload template: the same pairing, all $count records stored while the server is down"
    mkdir -p /prev/gw && cp -a /data/gw/gateway.sqlite3* /prev/gw/
    write_config /prev 1
    server -X POST -d '{"mode": "down"}' "$control/__control" > /dev/null
    gw /prev sync > "$out/sync-template.log" 2>&1
    rc=$?
    [[ $rc == 75 ]]
    ok=$?; check "sync stores everything and defers the upload (exit $rc, wanted 75)" "$ok"
    [[ "$(q /prev 'SELECT count(*) FROM reading')" == "$count" ]]
    ok=$?; check "the upload template holds $count readings" "$ok"
    say "time one upload on a scratch copy"
    server -X POST -d '{"mode": "up"}' "$control/__control" > /dev/null
    mkdir -p /scratch/gw && cp -a /prev/gw/. /scratch/gw/
    write_config /scratch 1
    start=$EPOCHREALTIME
    gw /scratch upload > "$out/upload-template.log" 2>&1
    rc=$?
    result upload_seconds "$(bc <<<"$EPOCHREALTIME - $start")"
    check "a whole upload of $count readings (exit $rc)" "$rc"
    server -X POST "$control/__reset" > /dev/null
    ;;
cut|check)
    if [[ -n "${PC_PREV_KIND:-}" ]]; then
        dev=/dev/vdb
        [[ "$mode" == check ]] && dev=/dev/vda
        if mount_disk "$dev" /prev; then
            say "check the disk cut in the previous boot ($PC_PREV_KIND)"
            check_disk /prev "$PC_PREV_KIND"
        else
            check "mount the disk cut in the previous boot (ext4 journal replay)" 1
        fi
        sync
    fi
    if [[ "$mode" == cut ]]; then
        mount_disk /dev/vda /data || { failed=1; finish; }
        server -X POST "$control/__reset" > /dev/null
        sync
        say "start the $PC_KIND; the host cuts the power at a random moment"
        echo go > "$out/go"
        sync
        start=$EPOCHREALTIME
        if [[ "$PC_KIND" == download ]]; then
            gw /data sync > "$out/cut-op.log" 2>&1
        else
            gw /data upload > "$out/cut-op.log" 2>&1
        fi
        rc=$?
        # How long the command really took, so the host spreads the next cuts over that.
        result cut_command_seconds "$(bc <<<"$EPOCHREALTIME - $start")"
        result cut_missed "$rc"
        say "the $PC_KIND ended before the cut"
    fi
    ;;
*)
    echo "usage: power-cut-guest.sh prepare|cut|check" >&2
    failed=64
    ;;
esac
finish
