#!/bin/bash
# PID 1 of an rb-mode VM: brings up dbus-daemon, the btvirt controllers (or this VM's end of the shared
# air), bluetoothd, waits for the controllers, runs the job's script as root, saves artifacts, powers off.
set -u
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8
exec < /dev/null
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts -o gid=5,mode=620,ptmxmode=666
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
mkdir -p /run/lock /run/rb /var/lib/bluetooth
chmod 0755 /run/rb

name="$(tr ' ' '\n' < /proc/cmdline | sed -n 's/^rb.name=//p')"
export RB_JOB=/run/rbjob RB_OUT="/run/rbjob/$name"
# shellcheck disable=SC1090
source "$RB_JOB/$name.env"
export RB_NAME RB_REPO RB_LIBDIR RB_KVER
# shellcheck source=scripts/real-bluez/guest-tmp.sh
source "$RB_LIBDIR/guest-tmp.sh"
rb_private_tmp "$RB_REPO" "$RB_LIBDIR" "${RB_GATEWAY_BIN:-}" "${RB_SCRIPT:-}"
note() { echo "rb-guest [$(cut -d' ' -f1 /proc/uptime)s]: $*"; }
mkdir -p "$RB_OUT"
# arm64: the gateway is the package under test, installed as a user would (apt install ./FILE.deb) on
# this VM's throw-away overlay; its dependencies wait in the root's apt cache (no network here).
if [[ -n ${RB_DEB:-} ]]; then
    t_deb=$SECONDS
    if DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$RB_DEB" > "$RB_OUT/apt-install.log" 2>&1; then
        note "apt install $(basename "$RB_DEB"): ok in $((SECONDS - t_deb)) s"
    else
        note "apt install $(basename "$RB_DEB") failed: $(tail -n 2 "$RB_OUT/apt-install.log" | tr '\n' ' ')"
    fi
fi
# The gateway under test at a path every user can reach: the checkout may live in a directory only its
# owner can enter (mktemp -d gives 0700, as CI work directories do), which the service user cannot
# traverse. A bind mount of the file needs no copy; its libraries come from /opt/swift and the system.
# The meter simulator likewise: the build's glucose-gateway-simulator beside the gateway binary, else the
# package's (arm64).
if [[ -n ${RB_GATEWAY_BIN:-} && -f $RB_GATEWAY_BIN ]]; then
    mkdir -p /run/rb/gateway && : > /run/rb/gateway/glucose-gateway
    simulator="$(dirname "$RB_GATEWAY_BIN")/glucose-gateway-simulator"
    if [[ -f $simulator ]]; then
        : > /run/rb/gateway/glucose-gateway-simulator
        mount --bind "$simulator" /run/rb/gateway/glucose-gateway-simulator && export RB_SIMULATOR_BIN=/run/rb/gateway/glucose-gateway-simulator
    fi
    mount --bind "$RB_GATEWAY_BIN" /run/rb/gateway/glucose-gateway && RB_GATEWAY_BIN=/run/rb/gateway/glucose-gateway
    export RB_GATEWAY_BIN
fi
if [[ -z ${RB_SIMULATOR_BIN:-} ]]; then
    export RB_SIMULATOR_BIN=/usr/libexec/glucose-gateway/glucose-gateway-simulator
fi
mkdir -p "$RB_OUT"
finish() {
    local rc="$1"
    note "RB-EXIT-CODE=$rc"
    dmesg > "$RB_OUT/dmesg.log" 2>&1
    [[ -f /run/rb/bluetoothd.pid ]] && kill "$(cat /run/rb/bluetoothd.pid)" 2> /dev/null
    sleep 0.2
    cp -r /var/lib/bluetooth "$RB_OUT/var-lib-bluetooth" 2> /dev/null
    echo "$rc" > "$RB_JOB/$RB_NAME.rc"
    sync
    echo b > /proc/sysrq-trigger
    sleep 10
}
note "PID 1 up (kernel $(uname -r))"
hostname "$RB_NAME"
ip link set lo up 2> /dev/null

# The controller's driver: hci_vhci for btvirt's controllers, hci_uart (H4 line discipline) for the
# controller that comes over a virtio console (--air uart: a kernel without hci_vhci).
driver=hci_vhci
[[ $RB_AIR == uart ]] && driver=hci_uart
[[ $RB_CONTROLLERS == 0 ]] && driver=""
for m in drbg ecdh_generic cmac ecb bluetooth $driver; do
    modprobe "$m" || note "modprobe $m failed"
done

mkdir -p /run/dbus
dbus-daemon --system --nofork --nopidfile > "$RB_OUT/dbus.log" 2>&1 &
echo $! > /run/rb/dbus.pid
deadline=$((SECONDS + 30))
while [[ ! -S /run/dbus/system_bus_socket ]] && ((SECONDS < deadline)); do sleep 0.05; done
export DBUS_SYSTEM_BUS_ADDRESS=unix:path=/run/dbus/system_bus_socket
note "dbus-daemon up"

if [[ $RB_BTMON == 1 ]]; then
    btmon -w "$RB_OUT/btsnoop.log" > /dev/null 2>&1 &
    echo $! > /run/rb/btmon.pid
    sleep 0.3
fi

port_of() {
    local d
    for d in /sys/class/virtio-ports/*; do
        [[ "$(cat "$d/name" 2> /dev/null)" == "$1" ]] && { echo "/dev/${d##*/}"; return 0; }
    done
    return 1
}
start_bluetoothd() {
    # shellcheck disable=SC2086
    /usr/libexec/bluetooth/bluetoothd -n $RB_BLUETOOTHD_ARGS >> "$RB_OUT/bluetoothd.log" 2>&1 &
    echo $! > /run/rb/bluetoothd.pid
}
controllers() { bluetoothctl list 2> /dev/null | grep -c '^Controller'; }
# Waits up to $2 seconds for $1 controllers under bluetoothd.
# Gives up early when the kernel reports a timed-out HCI command during the set-up.
timeouts() { dmesg | grep -a -c 'failed: -110'; }
fail_base=0
wait_controllers() {
    local deadline=$((SECONDS + $2)) failed="$fail_base"
    while ((SECONDS < deadline)); do
        (($(controllers) >= $1)) && return 0
        (($(dmesg | grep -a -c 'failed: -110') > failed)) && { sleep 0.5; (($(controllers) >= $1)) && return 0; return 1; }
        sleep 0.2
    done
    return 1
}
start_btvirt() {
    fail_base="$(timeouts)"
    # shellcheck disable=SC2086
    btvirt "$@" >> "$RB_OUT/btvirt.log" 2>&1 &
    echo $! > /run/rb/btvirt.pid
}
# Under TCG on a loaded host a controller's init can miss the kernel's 2 s HCI command timeout
# ("hci0: Opcode 0x0c03 failed: -110"): the emulated controller is a user-space process that was not
# scheduled in time, not a fault of the stack under test. The controller is then set up again, at most
# three times; each retry is noted on the console.
retry_note() {
    note "controller set-up failed ($1), setting it up again: $(dmesg | grep -a 'Bluetooth: hci' | tail -n 2 | tr '\n' ' ')"
}
case "$RB_AIR" in
    ""|server) ;;
    *) start_bluetoothd ;;
esac
started=0
# btvirt first, bluetoothd a moment later: on one vCPU bluetoothd's start-up otherwise starves the
# controller's set-up.
start_btvirt_then_bluetoothd() {
    start_btvirt "$@"
    if ((started == 0)); then sleep 1.5; start_bluetoothd; started=1; fi
}
case "$RB_AIR" in
    "")
        # No controller wanted (--controllers 0: a scenario without radio): bluetoothd alone.
        ((RB_CONTROLLERS == 0)) && start_bluetoothd
        ((RB_CONTROLLERS == 0)) || for try in 1 2 3; do
            start_btvirt_then_bluetoothd $RB_BTVIRT
            wait_controllers "$RB_CONTROLLERS" 25 && break
            retry_note "try $try"
            kill "$(cat /run/rb/btvirt.pid)"; sleep 1
        done ;;
    server)
        for try in 1 2 3; do
            start_btvirt_then_bluetoothd -s -L -l1
            wait_controllers 1 25 && break
            retry_note "try $try"
            kill "$(cat /run/rb/btvirt.pid)"; sleep 1; rm -f /tmp/bt-server-*
        done
        deadline=$((SECONDS + 10))
        while [[ ! -S /tmp/bt-server-le ]] && ((SECONDS < deadline)); do sleep 0.1; done
        /usr/bin/python3 "$RB_LIBDIR/guest/hci_bridge.py" air "$(port_of rb.air)" /tmp/bt-server-le \
            >> "$RB_OUT/bridge.log" 2>&1 &
        echo $! > /run/rb/bridge.pid
        # The other VM creates its controller only now: its commands have somebody to answer them.
        sleep 0.5
        touch "$RB_JOB/air.up" ;;
    uart)
        deadline=$((SECONDS + 180 * ${RB_SLOW:-1}))
        while [[ ! -f $RB_JOB/air.up ]] && ((SECONDS < deadline)); do sleep 0.2; done
        [[ -f $RB_JOB/air.up ]] || note "the server VM never brought up the air"
        # The virtio console rb.air is a tty, hvc0 (the VM's only virtio console; the kernel's console is
        # the board's UART): btattach puts the HCI line discipline (hci_uart, H4) on it, and the kernel
        # registers the controller whose other end is a btdev of the meter VM's btvirt. No flow control:
        # virtio's queues are lossless.
        tty=/dev/hvc0
        note "controller over $tty (btattach -P h4)"
        for try in 1 2 3; do
            fail_base="$(timeouts)"
            btattach -B "$tty" -P h4 -N >> "$RB_OUT/btattach.log" 2>&1 &
            echo $! > /run/rb/btattach.pid
            wait_controllers 1 $((25 * ${RB_SLOW:-1})) && break
            retry_note "try $try"
            kill "$(cat /run/rb/btattach.pid)"; sleep 1
        done ;;
    client)
        deadline=$((SECONDS + 180))
        while [[ ! -f $RB_JOB/air.up ]] && ((SECONDS < deadline)); do sleep 0.2; done
        [[ -f $RB_JOB/air.up ]] || note "the server VM never brought up the air"
        fail_base="$(timeouts)"
        /usr/bin/python3 "$RB_LIBDIR/guest/hci_bridge.py" vhci "$(port_of rb.air)" >> "$RB_OUT/bridge.log" 2>&1 &
        echo $! > /run/rb/bridge.pid
        for try in 1 2 3; do
            wait_controllers 1 25 && break
            retry_note "try $try"
            kill -USR1 "$(cat /run/rb/bridge.pid)"; sleep 1
            fail_base="$(timeouts)"
            kill -USR2 "$(cat /run/rb/bridge.pid)"
        done ;;
esac
n="$(controllers)"
if ((n < RB_CONTROLLERS)); then
    note "only $n of $RB_CONTROLLERS controllers under bluetoothd"
    tail -n 20 "$RB_OUT/bluetoothd.log" "$RB_OUT/btvirt.log" "$RB_OUT/bridge.log" 2> /dev/null
    dmesg | tail -n 20
    finish 125
fi
note "CONTROLLERS-READY ($n)"
# For the other VM of a pair (guest/meter.sh may wait for it: RB_METER_AWAIT_GATEWAY).
touch "$RB_JOB/ready.$RB_NAME"

if ((${#RB_SCRIPT[@]} == 0)); then
    finish 0
fi
cd "$RB_JOB" || finish 125
bash "${RB_SCRIPT[@]}" 2>&1 | tee "$RB_OUT/script.log"
finish "${PIPESTATUS[0]}"
