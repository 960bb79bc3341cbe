# rb-about: power cuts: qemu SIGKILLed at random moments of a 1,000-record download and of an upload, the database on an ext4 virtual disk; after each cut the store is intact, keeps all the server holds, the next sync or upload completes, every record exactly once in the store and on the server
# rb-topology: one VM per boot, no Bluetooth (glucose-gateway-simulator --standin on a private dbus-daemon); one virtio disk per cut; the Nightscout double on the host, reached over virtio-serial (power-cut-relay.py)
# rb-ci: yes
# rb-releases: bookworm trixie arm64
# rb-needs-bluetooth: no
# rb-timeout: 1200
#
# Environment: RB_POWER_CUTS (default 20; 4 under --ci, RB_CI=1), RB_POWER_CUT_SEED (replays a run: the
# seed is printed first), RB_POWER_CUT_RECORDS (default 1000).
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
gg="$(rb_gateway_bin)" || exit 1
cuts="${RB_POWER_CUTS:-$([[ ${RB_CI:-0} == 1 ]] && echo 4 || echo 20)}"
seed="${RB_POWER_CUT_SEED:-$(( $(date +%s%N) % 1000000 ))}"
records="${RB_POWER_CUT_RECORDS:-1000}"
rb_log "power-cut: $cuts cuts, seed $seed (replay: RB_POWER_CUT_SEED=$seed RB_POWER_CUTS=$cuts), $records records"
RANDOM="$seed"
job="$(rb_job_dir power-cut)"
t0=$SECONDS
failed=0
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done
    rb_stop_all
}
trap cleanup EXIT

# The Nightscout double on the host (its state survives every cut, as a server's would) and the relay
# the VMs' virtio-serial port connects to.
python3 "$RB_REPO/SystemTests/fake_nightscout.py" --port 0 --control-port 0 --secret correct-horse-battery \
    > "$job/nightscout.json" 2> "$job/nightscout.log" &
pids+=($!)
for _ in $(seq 100); do grep -q '"port"' "$job/nightscout.json" 2>/dev/null && break; sleep 0.1; done
port() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$job/nightscout.json" "$1"; }
api_port="$(port port)" && control_port="$(port control_port)" || { rb_log "the Nightscout double did not start"; exit 1; }
python3 "$RB_LIBDIR/power-cut-relay.py" host "$job/nightscout.sock" "127.0.0.1:$api_port" "127.0.0.1:$control_port" \
    > "$job/relay.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do [[ -S $job/nightscout.sock ]] && break; sleep 0.1; done

new_disk() { truncate -s 96M "$1" && mkfs.ext4 -q -F -E lazy_itable_init=0,lazy_journal_init=0 "$1"; }
disk_args() { # IMAGE...: a virtio disk each, in order vda, vdb, ...
    local d
    for d in "$@"; do
        printf '%s\n' --qemu-arg -drive --qemu-arg "file=$d,format=raw,if=virtio,cache=none,aio=threads"
    done
}
boot() { # NAME MODE [IMAGES...] -- env...
    local name="$1" mode="$2"; shift 2
    local -a images=() envs=()
    while (($#)) && [[ $1 != -- ]]; do images+=("$1"); shift; done
    [[ ${1:-} == -- ]] && shift
    local e
    for e in "$@"; do envs+=(--env "$e"); done
    mapfile -t drives < <(disk_args "${images[@]}")
    rb_boot "$name" --job "$job" --init "$RB_LIBDIR/power-cut-guest.sh" --init-arg "$mode" --mem 768 \
        --timeout "${RB_VM_TIMEOUT:-240}" "${drives[@]}" \
        --qemu-arg -device --qemu-arg virtio-serial-pci \
        --qemu-arg -chardev --qemu-arg "socket,id=ns,path=$job/nightscout.sock" \
        --qemu-arg -device --qemu-arg "virtserialport,chardev=ns,name=rb.nightscout" \
        --env "GG_BIN=$gg" --env "GG_REPO=$RB_REPO" --env "PC_COUNT=$records" "${envs[@]}" \
        $([[ $RB_RELEASE == arm64 ]] && printf -- '--env RB_DEB=%s' "$RB_DEB")
}
collect() { # NAME: its check lines into the summary
    local f="$job/$1/results.txt"
    [[ -f $f ]] || return 0
    grep -a '^RB-CHECK' "$f" | sed "s/^/[$1] /"
    failed=$((failed + $(grep -ac '^RB-CHECK .*: FAIL' "$f")))
}
result() { sed -n "s/^RESULT $2=//p" "$job/$1/results.txt" 2>/dev/null | tail -n 1; }

# Boot 0: the templates (a paired store; the same with all records stored, upload pending) and the time
# one download and one upload take here, to spread the cuts over them.
new_disk "$job/template-download.img" && new_disk "$job/template-upload.img" && new_disk "$job/scratch.img" ||
    { rb_log "mkfs.ext4 failed"; exit 1; }
boot pc0 prepare "$job/template-download.img" "$job/template-upload.img" "$job/scratch.img"
rb_wait pc0
s=$?
collect pc0
if [[ $s != 0 ]]; then
    rb_console_tail pc0 30
    rb_log "preparation failed (exit $s)"
    exit 1
fi
rm -f "$job/scratch.img"
download_s="$(result pc0 download_seconds)"
upload_s="$(result pc0 upload_seconds)"
rb_log "one download of $records records: ${download_s}s, one upload: ${upload_s}s (in the VM)"

midway=0 partial=0 missed=0
prev="" prev_kind=""
for ((i = 1; i <= cuts; i++)); do
    kind=download
    ((i % 2 == 0)) && kind=upload
    disk="$job/cut-$i.img"
    cp --sparse=always "$job/template-$kind.img" "$disk"
    duration="$download_s"
    [[ $kind == upload ]] && duration="$upload_s"
    # The cut: uniform over the whole command, from its start (process start included) to its end.
    delay="$(awk -v d="$duration" -v r="$RANDOM" 'BEGIN { printf "%.3f", d * r / 32767 }')"
    if [[ -n $prev ]]; then
        boot "pc$i" cut "$disk" "$prev" -- "PC_KIND=$kind" "PC_PREV_KIND=$prev_kind"
    else
        boot "pc$i" cut "$disk" -- "PC_KIND=$kind"
    fi
    deadline=$((SECONDS + 180))
    until [[ -f $job/pc$i/go ]] || ((SECONDS > deadline)) || ! kill -0 "${RB_PIDS[pc$i]}" 2>/dev/null; do sleep 0.05; done
    if [[ -f $job/pc$i/go ]]; then
        sleep "$delay"
        qemu_pid="$(pgrep -P "${RB_PIDS[pc$i]}" | head -n 1)"
        [[ -n $qemu_pid ]] && kill -KILL "$qemu_pid"
        rb_log "cut $i ($kind): power cut ${delay}s after the start"
    else
        rb_log "cut $i ($kind): the guest never started the $kind"
        rb_console_tail "pc$i" 30
        failed=$((failed + 1))
    fi
    rb_wait "pc$i" 2>/dev/null   # a cut VM "hit its time limit" (SIGKILL): that is the cut
    collect "pc$i"
    [[ "$(result "pc$i" cut_midway)" == 1 ]] && midway=$((midway + 1))
    [[ "$(result "pc$i" cut_partial)" == 1 ]] && partial=$((partial + 1))
    if [[ -n "$(result "pc$i" cut_missed)" ]]; then
        missed=$((missed + 1))
        # The timing boot ran slower than this one (the host was busier then): spread the next cuts of
        # this kind over the time the command took here.
        took="$(result "pc$i" cut_command_seconds)"
        if [[ -n $took ]] && awk -v t="$took" -v d="$duration" 'BEGIN { exit !(t > 0 && t < d) }'; then
            if [[ $kind == upload ]]; then upload_s="$took"; else download_s="$took"; fi
            rb_log "cut $i ($kind): the $kind ended after ${took}s, before the cut; later ${kind}s are cut within that"
        fi
    fi
    [[ -n $prev ]] && rm -f "$prev"
    prev="$disk" prev_kind="$kind"
done

# The last disk cut is checked in a boot of its own.
boot pcF check "$prev" -- "PC_PREV_KIND=$prev_kind"
rb_wait pcF
s=$?
collect pcF
if [[ $s == 125 ]]; then
    rb_log "the final check boot ended without a status"
    rb_console_tail pcF 30
    failed=$((failed + 1))
fi
[[ "$(result pcF cut_midway)" == 1 ]] && midway=$((midway + 1))
[[ "$(result pcF cut_partial)" == 1 ]] && partial=$((partial + 1))
rm -f "$prev"

# The cuts must really land inside the downloads and uploads (the store not yet complete or not all
# acknowledged), or nothing was tested.
need=$(( (cuts + 1) / 2 ))
line="at least $need of $cuts cuts landed before the command ended: $midway ($partial with the store or the server partly filled; $missed after the command had ended)"
if ((midway >= need)); then
    echo "RB-CHECK $line: ok"
else
    echo "RB-CHECK $line: FAIL"
    failed=$((failed + 1))
fi
rb_log "power-cut: $cuts cuts, seed $seed, $failed failed check(s), $((SECONDS - t0)) s; logs in $job"
((failed == 0))
