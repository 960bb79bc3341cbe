# shellcheck shell=bash
# Real-Bluetooth-stack test bed: throw-away QEMU VMs running Debian's own kernel (real bluetooth.ko, SMP,
# L2CAP, ATT), Debian's bluetoothd and a system dbus-daemon, with btvirt controllers. The VM's root is the
# host's root, shared read-only over virtio-9p under a tmpfs overlay, so every host binary (bash, python3,
# bluetoothd, the gateway under test) runs unchanged inside.
#
# Source this file from bash (scripts/test-real-bluez.sh and every scenario do). Interface (stable):
#
#   rb_prepare
#       Idempotent. Installs the Debian packages the VMs need (apt, non-interactive, no service started on
#       the host), downloads and unpacks a pinned good kernel, builds the initramfs, picks KVM or TCG.
#       Returns 0, or RB_SKIP (77) with the reason on stderr when no VM can boot here (no qemu, no kernel).
#       Sets RB_KVER, RB_KDIR (unpacked kernel package), RB_VMLINUZ, RB_INITRD, RB_ACCEL.
#       Cache: $RB_WORK (default /var/tmp/glucose-gateway-vm), never inside the repository.
#
#   rb_job_dir NAME   -> prints a fresh job directory $RB_WORK/jobs/NAME.<pid> (created). A job directory is
#       shared read-write with every VM booted with --job DIR; inside a VM it is mounted at /run/rbjob.
#       Files go in and out through it; two VMs given the same DIR share it.
#
#   rb_boot VMNAME [OPTIONS] [-- SCRIPT [ARGS...]]
#       Starts a VM in the background (qemu under timeout(1)), records its pid; returns at once.
#       Options:
#         --job DIR            job directory (required): console log DIR/VMNAME.console, the guest's exit
#                              status DIR/VMNAME.rc, artifacts in DIR/VMNAME/ (= $RB_OUT in the guest)
#         --init MODE|PROGRAM  PID 1 after switch_root. "rb" (default): scripts/real-bluez/guest-init.sh,
#                              which brings up dbus-daemon, btvirt/bridge, bluetoothd, runs SCRIPT ARGS as
#                              root and powers off. Any other absolute path (e.g. /lib/systemd/systemd) is
#                              exec'd as PID 1 as it is, with the root overlay, /lib/modules/$RB_KVER of
#                              the test kernel bound in place, and the job directory mounted at /run/rbjob
#                              (9p tag rbjob, mounted before PID 1 starts). Such a PID 1 ends the VM itself
#                              (poweroff/reboot; qemu runs with -no-reboot).
#         --init-arg ARG       one more argument for a custom PID 1 (repeatable; no newlines)
#         --qemu-arg ARG       one more qemu argument, as it is (repeatable), e.g.
#                              --qemu-arg -drive --qemu-arg file=DISK,if=virtio,format=raw
#         --cmdline TEXT       more kernel command line
#         --mem MiB            memory (default 1024)   --smp N  vCPUs (default 2, 1 each when two VMs run)
#         --timeout S          hard limit for the VM's life (default 300); qemu is killed after it
#         --btvirt ARGS        (rb) btvirt arguments, default "-L -l2": two LE controllers in this VM
#         --air server|client|uart  (two VMs) joins this VM's controllers to one btvirt "air" over
#                              virtio-serial: "server" runs btvirt -s -L -l1 (its own controller plus the
#                              air), "client" gets one controller whose other end is a btdev of the
#                              server's btvirt (through /dev/vhci); "uart" the same controller through a
#                              virtio console (/dev/hvc0) attached with btattach as an H4 UART (hci_uart),
#                              for kernels without hci_vhci. Needs the same --job DIR on both; boot the
#                              server first.
#         --release R          boot this VM with release R's kernel and root instead of RB_RELEASE's
#                              (the arm64 gateway VM's meter is an x86_64 VM); its time limit still
#                              multiplies by the scenario's RB_SLOW
#         --bluetoothd-args ARGS  (rb) bluetoothd arguments (default: "-f main-noeatt.conf", EATT off;
#                              "" for Debian's defaults, EATT on)
#         --controllers N      (rb) controllers to wait for under bluetoothd (default: 2 local, 1 with --air; 0: no btvirt,
#                              for scenarios without radio)
#         --btmon              (rb) record btmon -w $RB_OUT/btsnoop.log
#         --env NAME=VALUE     exported to SCRIPT (rb) via DIR/VMNAME.env (repeatable)
#   rb_wait VMNAME            waits for the VM to end; returns the guest script's exit status (rb mode),
#                             the custom PID 1's DIR/VMNAME.rc when it wrote one, else 125 (no status).
#   rb_stop VMNAME            kills the VM now (by pid). rb_stop_all: every VM this shell started.
#                             Sourcing installs an EXIT trap that calls rb_stop_all.
#   rb_console_tail VMNAME [N]   prints the last N lines of a VM's console.
#   rb_follow VMNAME [PREFIX]    prints the VM's step lines while it runs (ends with the VM).
#   Scenario helpers (documented where they are defined, below): rb_two_vms METER_SCRIPT GATEWAY_SCRIPT
#   (meter VM + gateway VM sharing one btvirt air), rb_one_vm SCRIPT (one VM, two controllers, one
#   bluetoothd), rb_gateway_bin.
#
# Inside an rb-mode VM, SCRIPT runs with $RB_OUT, $RB_JOB (= /run/rbjob), $RB_NAME, $RB_REPO (the tree
# under test, same path as on the host), DBUS_SYSTEM_BUS_ADDRESS, and can source
# scripts/real-bluez/guest-lib.sh for steps and checks. Host /tmp is hidden by the guest's /tmp.

RB_SKIP=77
RB_LIBDIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
RB_REPO="$(cd "$RB_LIBDIR/../.." && pwd)"
RB_WORK="${RB_WORK:-/var/tmp/glucose-gateway-vm}"
# Kernels known good with btvirt + SMP, in order of preference. 6.1.0-55/56/57 (6.1.192) kill bluetoothd
# in the kernel (list_del corruption in hci_chan_del) on the first disconnect after pairing.
RB_GOOD_KERNELS=(linux-image-6.1.0-54-amd64 linux-image-6.1.0-53-amd64 linux-image-6.1.0-50-amd64)
RB_BAD_KERNELS=(linux-image-6.1.0-55-amd64 linux-image-6.1.0-56-amd64 linux-image-6.1.0-57-amd64)
RB_PACKAGES=(qemu-system-x86 bluez bluez-test-tools busybox-static kmod dbus python3-dbus python3-gi cpio
             util-linux procps coreutils)
# shellcheck source=release.sh
source "$RB_LIBDIR/release.sh"
# shellcheck source=arch.sh
source "$RB_LIBDIR/arch.sh"
declare -gA RB_PIDS=()
RB_FOLLOWERS=()

rb_log() { printf 'rb: %s\n' "$*" >&2; }

rb__need_install() {
    local p
    local -a want=("${RB_PACKAGES[@]}")
    [[ $RB_RELEASE != bookworm ]] && want+=(debootstrap)
    [[ $RB_RELEASE == arm64 ]] && want+=(qemu-system-arm)
    for p in "${want[@]}"; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || { echo "$p"; }
    done
}

rb_install_packages() {
    local missing
    missing="$(rb__need_install | tr '\n' ' ')"
    [[ -z ${missing// /} ]] && return 0
    if [[ $(id -u) != 0 ]]; then
        rb_log "missing packages ($missing) and not root: cannot install them"
        return 1
    fi
    rb_log "installing from Debian: $missing"
    # A policy-rc.d refusing every start keeps bluetoothd/dbus from being started on the host by the
    # packages' scripts; one already in place is left alone.
    local made_policy=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && made_policy=1
    fi
    local status=0
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing \
            > "$RB_WORK/apt.log" 2>&1; then
        DEBIAN_FRONTEND=noninteractive apt-get update -q > "$RB_WORK/apt-update.log" 2>&1
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing \
            > "$RB_WORK/apt.log" 2>&1 || status=$?
    fi
    [[ $made_policy == 1 ]] && rm -f /usr/sbin/policy-rc.d
    if [[ $status != 0 ]]; then
        rb_log "apt-get install failed (see $RB_WORK/apt.log): $(tail -n 1 "$RB_WORK/apt.log")"
        return 1
    fi
}

rb__is_bad_kernel() {
    local k
    for k in "${RB_BAD_KERNELS[@]}"; do [[ $1 == "$k" ]] && return 0; done
    return 1
}

rb__available() { apt-cache show --no-all-versions "$1" > /dev/null 2>&1; }

# Chooses the kernel package: RB_KERNEL_PKG, else the first pinned good one still in the archive (or
# already cached). Prints the package name.
rb_pick_kernel() {
    local pkg
    [[ $RB_RELEASE != bookworm ]] && { rb_release_kernel; return; }
    if [[ -n ${RB_KERNEL_PKG:-} ]]; then
        if rb__is_bad_kernel "$RB_KERNEL_PKG"; then
            rb_log "refusing $RB_KERNEL_PKG: 6.1.0-55/56/57 (6.1.192) crash bluetoothd in the kernel on the first disconnect after pairing (list_del corruption in hci_chan_del); use ${RB_GOOD_KERNELS[*]}"
            return 1
        fi
        echo "$RB_KERNEL_PKG"; return 0
    fi
    local first=1
    for pkg in "${RB_GOOD_KERNELS[@]}"; do
        if [[ -f $RB_WORK/kernel-$pkg/.ready ]] || rb__available "$pkg"; then
            [[ $first == 0 ]] && rb_log "falling back to $pkg"
            echo "$pkg"; return 0
        fi
        rb_log "pinned kernel $pkg is gone from the archive"
        first=0
    done
    rb_log "none of the pinned good kernels (${RB_GOOD_KERNELS[*]}) can be had; the newer ${RB_BAD_KERNELS[*]} are known bad (bluetoothd crashes in the kernel after pairing) and are refused; set RB_KERNEL_PKG to a later fixed one"
    return 1
}

rb_get_kernel() {
    local pkg="$1" dir="$RB_WORK/kernel-$1"
    if [[ ! -f $dir/.ready ]]; then
        mkdir -p "$RB_WORK/dl"
        local deb
        deb="$(ls "$RB_WORK"/dl/"${pkg}"_*.deb 2> /dev/null | head -n 1)"
        if [[ -z $deb ]]; then
            rb_log "downloading $pkg"
            (cd "$RB_WORK/dl" && rb_kernel_download "$pkg" > "$RB_WORK/dl/download.log" 2>&1) || {
                rb_log "apt-get download $pkg failed: $(tail -n 1 "$RB_WORK/dl/download.log")"; return 1; }
            deb="$(ls "$RB_WORK"/dl/"${pkg}"_*.deb | head -n 1)"
        fi
        rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
        dpkg -x "$deb" "$dir.tmp" || return 1
        # trixie's kernels keep their modules under /usr/lib/modules (merged /usr): one layout for all.
        if [[ -d $dir.tmp/usr/lib/modules ]]; then mkdir -p "$dir.tmp/lib" && mv "$dir.tmp/usr/lib/modules" "$dir.tmp/lib/"; fi
        local ver
        ver="$(ls "$dir.tmp/lib/modules" | head -n 1)"
        depmod -b "$dir.tmp" "$ver" || return 1
        rm -rf "$dir" && mv "$dir.tmp" "$dir" && touch "$dir/.ready"
    fi
    RB_KDIR="$dir"
    RB_KVER="$(ls "$dir/lib/modules" | head -n 1)"
    RB_VMLINUZ="$(rb_arch_kernel_image "$dir/boot/vmlinuz-$RB_KVER")" || return 1
}

# The initramfs: busybox-static, the modules to reach the 9p root and the overlay, and its /init.
rb_build_initramfs() {
    local out="$RB_WORK/initramfs-$RB_KVER.cpio.gz" stamp
    local busybox
    busybox="$(rb_arch_busybox)"
    stamp="$(cat "$RB_LIBDIR/initramfs-init.sh" "$busybox" | md5sum | cut -c1-12)"
    RB_INITRD="$out"
    [[ -f $out && "$(cat "$out.stamp" 2> /dev/null)" == "$stamp" ]] && return 0
    local tree="$RB_WORK/initramfs-tree"
    rm -rf "$tree" && mkdir -p "$tree"/{bin,dev,proc,sys,newroot,mods}
    cp "$busybox" "$tree/bin/busybox"
    cp "$RB_LIBDIR/initramfs-init.sh" "$tree/init" && chmod 755 "$tree/init"
    # Modules in load order (dependencies first), as modprobe resolves them against the test kernel.
    local m line order=()
    for m in virtio_pci 9pnet_virtio 9p overlay virtio_console virtio_blk; do
        while read -r line; do
            [[ $line == insmod* ]] || continue
            line="${line#insmod }"; line="${line%% *}"
            [[ " ${order[*]} " == *" $line "* ]] || order+=("$line")
        done < <(modprobe -d "$RB_KDIR" -S "$RB_KVER" --show-depends "$m" 2> /dev/null)
    done
    : > "$tree/mods/order"
    # busybox's insmod hands the file to the kernel as it is: compressed modules (trixie's .ko.xz) are
    # unpacked here.
    for m in "${order[@]}"; do
        case "$m" in
            *.xz) xz -dc "$m" > "$tree/mods/$(basename "${m%.xz}")" ;;
            *.zst) zstd -qdc "$m" > "$tree/mods/$(basename "${m%.zst}")" ;;
            *) cp "$m" "$tree/mods/" ;;
        esac
        m="$(basename "$m")"; m="${m%.xz}"; echo "${m%.zst}" >> "$tree/mods/order"
    done
    (cd "$tree" && find . | cpio -o -H newc --quiet | gzip -1) > "$out.tmp" && mv "$out.tmp" "$out"
    echo "$stamp" > "$out.stamp"
}

rb__qemu_base() {
    local accel="$1"
    if [[ $accel == kvm ]]; then
        printf '%s\n' -accel kvm -cpu host
    else
        printf '%s\n' -accel tcg,thread=multi -cpu max
    fi
}

# KVM only when the CPU shows vmx/svm and a probe boot of the test kernel reaches the initramfs.
rb_pick_accel() {
    if [[ -n ${RB_ACCEL:-} ]]; then return 0; fi
    RB_ACCEL=tcg
    [[ $RB_ARCH != amd64 ]] && return 0
    if [[ -c /dev/kvm && -w /dev/kvm ]] && grep -qwE 'vmx|svm' /proc/cpuinfo; then
        local cache="$RB_WORK/accel-$RB_KVER"
        if [[ -f $cache ]]; then RB_ACCEL="$(cat "$cache")"; return 0; fi
        local log="$RB_WORK/kvm-probe.log"
        timeout 40 qemu-system-x86_64 -accel kvm -cpu host -machine q35 -m 512 -nic none -no-reboot \
            -display none -serial "file:$log" -kernel "$RB_VMLINUZ" -initrd "$RB_INITRD" \
            -append "console=ttyS0 panic=-1 rb.probe=1" > /dev/null 2>&1
        if grep -q 'RB-PROBE-OK' "$log" 2> /dev/null; then RB_ACCEL=kvm; fi
        echo "$RB_ACCEL" > "$cache"
        [[ $RB_ACCEL == tcg ]] && rb_log "KVM present but a probe boot failed: using TCG (software emulation)"
    fi
}

rb_prepare() {
    [[ -n ${RB_PREPARED:-} ]] && return 0
    mkdir -p "$RB_WORK" || { rb_log "cannot create $RB_WORK"; return $RB_SKIP; }
    case "$RB_WORK/" in "$RB_REPO"/*) rb_log "RB_WORK must be outside the repository"; return 1 ;; esac
    if [[ $(uname -m) != x86_64 ]]; then rb_log "no VM: this bed runs amd64 kernels, host is $(uname -m)"; return $RB_SKIP; fi
    # Runs started side by side share the cache: one prepares it at a time.
    local lockfd status=0
    # One lock per release: a long first preparation of one (the arm64 root) does not hold up the others.
    exec {lockfd}> "$RB_WORK/.prepare-${RB_RELEASE}.lock"
    flock "$lockfd"
    rb__prepare_locked || status=$?
    exec {lockfd}>&-
    return "$status"
}

rb__prepare_locked() {
    rb_install_packages || { rb_log "no VM: required packages are missing"; return $RB_SKIP; }
    rb_release_prepare || { rb_log "no VM: the $RB_RELEASE root cannot be made"; return $RB_SKIP; }
    command -v "$(rb_arch_qemu)" > /dev/null || { rb_log "no VM: $(rb_arch_qemu) is not available"; return $RB_SKIP; }
    local pkg
    pkg="$(rb_pick_kernel)" || { rb_log "no VM: no usable kernel"; return $RB_SKIP; }
    rb_get_kernel "$pkg" || { rb_log "no VM: cannot obtain $pkg"; return $RB_SKIP; }
    rb_build_initramfs || { rb_log "no VM: building the initramfs failed"; return $RB_SKIP; }
    rb_pick_accel
    export RB_KVER RB_KDIR RB_VMLINUZ RB_INITRD RB_ACCEL
    rb_release_finish || { rb_log "no VM: the $RB_RELEASE root cannot be finished"; return $RB_SKIP; }
    rb_release_deb_depends || { rb_log "the dependencies of $RB_DEB cannot be fetched"; return 1; }
    RB_PREPARED=1
    export RB_KVER RB_KDIR RB_VMLINUZ RB_INITRD RB_ACCEL RB_PREPARED RB_WORK
    rb_log "release $RB_RELEASE ($RB_ARCH${RB_ROOT:+, root $RB_ROOT}), kernel $RB_KVER ($pkg), accel $RB_ACCEL, work dir $RB_WORK"
}

rb_job_dir() {
    local d="$RB_WORK/jobs/$1.$$.$RANDOM"
    rm -rf "$d" && mkdir -p "$d" && echo "$d"
}

rb__quote() { local q; printf -v q '%q' "$1"; printf '%s' "$q"; }

rb_boot() {
    local name="$1"; shift
    local job="" init=rb mem=1024 smp="" timeout=300 btvirt="-L -l2" air="" bdargs="-f $RB_LIBDIR/main-noeatt.conf" controllers="" btmon=0
    local -a qargs=() iargs=() envs=() script=()
    local cmdline="" release=""
    local -a all=("$@")
    while (($#)); do
        case "$1" in
            --job) job="$2"; shift 2 ;;
            --init) init="$2"; shift 2 ;;
            --init-arg) iargs+=("$2"); shift 2 ;;
            --qemu-arg) qargs+=("$2"); shift 2 ;;
            --cmdline) cmdline+=" $2"; shift 2 ;;
            --mem) mem="$2"; shift 2 ;;
            --smp) smp="$2"; shift 2 ;;
            --timeout) timeout="$2"; shift 2 ;;
            --btvirt) btvirt="$2"; shift 2 ;;
            --air) air="$2"; shift 2 ;;
            --release) release="$2"; shift 2 ;;
            --bluetoothd-args) bdargs="$2"; shift 2 ;;
            --controllers) controllers="$2"; shift 2 ;;
            --btmon) btmon=1; shift ;;
            --env) envs+=("$2"); shift 2 ;;
            --) shift; script=("$@"); break ;;
            *) rb_log "rb_boot: unknown option $1"; return 64 ;;
        esac
    done
    [[ -n $job && -d $job ]] || { rb_log "rb_boot $name: --job DIR (existing) is required"; return 64; }
    if [[ -n $release && $release != "$RB_RELEASE" ]]; then
        local -a rest=()
        local i
        for ((i = 0; i < ${#all[@]}; i++)); do
            [[ ${all[i]} == -- ]] && { rest+=("${all[@]:i}"); break; }
            [[ ${all[i]} == --release ]] && { i=$((i + 1)); continue; }
            rest+=("${all[i]}")
        done
        rb_with_release "$release" rb_boot "$name" "${rest[@]}"
        return
    fi
    rb_prepare || return $?
    mkdir -p "$job/$name"
    rm -f "$job/$name.rc"
    [[ -z $smp ]] && smp=2
    timeout=$((timeout * RB_SLOW))
    [[ -z $controllers ]] && { [[ -n $air ]] && controllers=1 || controllers=2; }
    local -a q=("$(rb_arch_qemu)")
    mapfile -t -O 1 q < <(rb_arch_qemu_base "$RB_ACCEL")
    q+=(-m "$mem" -smp "$smp" -nic none -no-reboot -display none -nodefaults
        -serial "file:$job/$name.console"
        -kernel "$RB_VMLINUZ" -initrd "$RB_INITRD"
        -fsdev "local,id=hostroot,path=${RB_ROOT:-/},readonly=on,security_model=none,multidevs=remap"
        -device "virtio-9p-pci,fsdev=hostroot,mount_tag=hostroot"
        -fsdev "local,id=rbjob,path=$job,security_model=none,multidevs=remap"
        -device "virtio-9p-pci,fsdev=rbjob,mount_tag=rbjob")
    case "$air" in
        "") ;;
        server) q+=(-chardev "socket,id=air,path=$job/air.sock,server=on,wait=off") ;;
        client|uart) q+=(-chardev "socket,id=air,path=$job/air.sock,reconnect=1") ;;
        *) rb_log "rb_boot: --air server|client|uart"; return 64 ;;
    esac
    # A virtconsole port is a tty (/dev/hvcN) that btattach can put the HCI line discipline on; a
    # virtserialport is a plain character device.
    [[ -n $air && $air != uart ]] && q+=(-device virtio-serial-pci -device "virtserialport,chardev=air,name=rb.air")
    [[ $air == uart ]] && q+=(-device virtio-serial-pci -device "virtconsole,chardev=air,name=rb.air")
    # A release root other than the host's: the host's root as well (read-only), from which the initramfs
    # binds the tree under test, the gateway binary's directory, /opt/swift and the kernel's modules.
    : > "$job/$name.binds"
    if [[ -n $RB_ROOT ]]; then
        q+=(-fsdev "local,id=hostfs,path=/,readonly=on,security_model=none,multidevs=remap"
            -device "virtio-9p-pci,fsdev=hostfs,mount_tag=hostfs")
        rb_release_binds "$(rb_gateway_bin 2> /dev/null)" > "$job/$name.binds"
    fi
    q+=("${qargs[@]}")
    local initprog="$init"
    [[ $init == rb ]] && initprog="$RB_LIBDIR/guest-init.sh"
    # The guest's settings: PID 1 and its arguments on the kernel command line (as the initramfs reads
    # them), everything else in DIR/VMNAME.env.
    {
        echo "RB_NAME=$(rb__quote "$name")"
        echo "RB_REPO=$(rb__quote "$RB_REPO")"
        echo "RB_LIBDIR=$(rb__quote "$RB_LIBDIR")"
        echo "RB_KVER=$(rb__quote "$RB_KVER")"
        echo "RB_BTVIRT=$(rb__quote "$btvirt")"
        echo "export RB_AIR=$(rb__quote "$air")"
        echo "RB_BLUETOOTHD_ARGS=$(rb__quote "$bdargs")"
        echo "RB_CONTROLLERS=$(rb__quote "$controllers")"
        echo "RB_BTMON=$btmon"
        echo "export RB_SLOW=$RB_SLOW"
        local e
        for e in "${envs[@]}"; do echo "export ${e%%=*}=$(rb__quote "${e#*=}")"; done
        printf 'RB_SCRIPT=('; for e in "${script[@]}"; do printf '%s ' "$(rb__quote "$e")"; done; echo ')'
    } > "$job/$name.env"
    : > "$job/$name.initargs"
    for e in "${iargs[@]}"; do printf '%s\n' "$e" >> "$job/$name.initargs"; done
    local append="console=$(rb_arch_console) loglevel=4 panic=-1 rb.name=$name rb.init=$initprog rb.kdir=$RB_KDIR$cmdline"
    : > "$job/$name.console"
    timeout --kill-after=5 "$timeout" "${q[@]}" -append "$append" > "$job/$name.qemu.log" 2>&1 < /dev/null &
    RB_PIDS[$name]=$!
    echo "$job" > "$RB_WORK/.last-job" 2> /dev/null || true
    declare -g "RB_JOB_$name=$job" 2> /dev/null || true
    if [[ $air == server ]]; then
        local deadline=$((SECONDS + 30))
        while [[ ! -S $job/air.sock ]] && ((SECONDS < deadline)); do sleep 0.1; done
    fi
}

rb__job_of() { local v="RB_JOB_$1"; printf '%s' "${!v:-}"; }

rb_wait() {
    local name="$1" pid="${RB_PIDS[$1]:-}" job
    job="$(rb__job_of "$name")"
    [[ -n $pid ]] || return 125
    wait "$pid"
    local qs=$?
    unset "RB_PIDS[$name]"
    [[ $qs == 124 || $qs == 137 ]] && rb_log "VM $name hit its time limit and was killed"
    [[ $qs != 0 && $qs != 124 && $qs != 137 ]] && rb_log "qemu for $name exited $qs: $(tail -n 3 "$job/$name.qemu.log" 2> /dev/null)"
    if [[ -s $job/$name.rc ]]; then
        local rc
        rc="$(tr -dc 0-9 < "$job/$name.rc")"
        return "${rc:-125}"
    fi
    return 125
}

# rb_follow VMNAME [PREFIX]: shows the VM's step lines (RB-STEP/RB-CHECK/RB-NOTE/rb-guest) as they come,
# in the background; the follower ends by itself with the VM (tail --pid).
rb_follow() {
    local name="$1" pid="${RB_PIDS[$1]:-}" job
    job="$(rb__job_of "$name")"
    [[ -n $pid ]] || return 0
    tail --pid="$pid" -n +1 -F "$job/$name.console" 2> /dev/null \
        | grep -a --line-buffered -E '^(RB-STEP|RB-CHECK|RB-NOTE|RB-FAIL|rb-guest)' \
        | sed -u "s/^/[${2:-$name}] /" &
    RB_FOLLOWERS+=($!)
}
rb__end_followers() {
    local p
    for p in "${RB_FOLLOWERS[@]}"; do wait "$p" 2> /dev/null; done
    RB_FOLLOWERS=()
}

rb_stop() {
    local pid="${RB_PIDS[$1]:-}"
    [[ -n $pid ]] || return 0
    # timeout(1) forwards the signal to qemu; wait reaps both.
    kill -TERM "$pid" 2> /dev/null
    local i
    for ((i = 0; i < 50; i++)); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2> /dev/null
    wait "$pid" 2> /dev/null
    unset "RB_PIDS[$1]"
}

rb_stop_all() {
    local n
    for n in "${!RB_PIDS[@]}"; do rb_stop "$n"; done
    rb__end_followers
}

rb_console_tail() {
    local job
    job="$(rb__job_of "$1")"
    tail -n "${2:-40}" "$job/$1.console" 2> /dev/null | sed "s/^/[$1] /"
}

# Prints the guest's step lines (RB-STEP/RB-CHECK/RB-NOTE) of a VM's console.
rb_console_steps() {
    local job
    job="$(rb__job_of "$1")"
    grep -a -E '^(RB-STEP|RB-CHECK|RB-NOTE|RB-FAIL|rb-guest)' "$job/$1.console" 2> /dev/null | sed "s/^/[$1] /"
}

trap 'rb_stop_all' EXIT
# A TERM or INT (the runner's timeout, Ctrl-C) still runs the EXIT trap, so no VM outlives its scenario.
trap 'exit 143' TERM
trap 'exit 130' INT

# --- helpers for scenarios --------------------------------------------------------------------------------

# The gateway binary under test: $RB_GATEWAY_BIN, else .build/debug/glucose-gateway of this tree.
# On arm64 the gateway is the package RB_DEB, installed in each VM (guest-init.sh): its path there.
rb_gateway_bin() {
    if [[ $RB_RELEASE == arm64 ]]; then
        [[ -n ${RB_DEB:-} && -f $RB_DEB ]] || { rb_log "arm64: no gateway package (set RB_DEB to the arm64 .deb)"; return 1; }
        # Where the package puts the executable (usr/bin, as a rule).
        local path
        path="$(dpkg-deb -c "$RB_DEB" 2> /dev/null | awk '{print $NF}' | grep -m1 '/bin/glucose-gateway$')"
        echo "/${path#./}"
        return 0
    fi
    local bin="${RB_GATEWAY_BIN:-$RB_REPO/.build/debug/glucose-gateway}"
    [[ -x $bin ]] || { rb_log "no gateway binary at $bin (swift build, or set RB_GATEWAY_BIN)"; return 1; }
    echo "$bin"
}

# The release of the meter VM when the scenario's kernel has no hci_vhci (arm64): an x86_64 one.
RB_METER_RELEASE="${RB_METER_RELEASE:-bookworm}"

# Whether the current release's kernel has hci_vhci (btvirt's controllers need it). Debian's arm64
# kernel is built without it (CONFIG_BT_HCIVHCI is not set).
rb_kernel_has_vhci() {
    grep -q '^CONFIG_BT_HCIVHCI=[ym]' "$RB_KDIR/boot/config-$RB_KVER" 2> /dev/null
}

# rb_two_vms METER_SCRIPT GATEWAY_SCRIPT [--meter-opt OPT]... [--gateway-opt OPT]... [--env N=V]...
# The meter VM ("meter", btvirt server, one controller) and the gateway VM ("gw", its controller a btdev
# of the meter's btvirt over virtio-serial), 1 vCPU each, each with its own kernel, dbus-daemon and
# bluetoothd (on a kernel without hci_vhci, arm64: the meter VM is an x86_64 VM of RB_METER_RELEASE,
# default bookworm, and the gateway VM's controller is attached over a virtio console with btattach).
# Both scripts get the same job directory ($RB_JOB) to exchange files; the meter script
# should end when $RB_JOB/gateway.done appears (rb_guest_wait_gateway_done in guest-lib.sh), which is
# written as soon as the gateway VM has ended. Prints both VMs' step lines; returns 0 when both scripts
# exited 0, else the gateway's status (or the meter's when only it failed).
rb_two_vms() {
    local mscript="$1" gscript="$2"; shift 2
    local -a mopts=() gopts=() envs=()
    while (($#)); do
        case "$1" in
            --meter-opt) mopts+=("$2"); shift 2 ;;
            --gateway-opt) gopts+=("$2"); shift 2 ;;
            --env) envs+=(--env "$2"); shift 2 ;;
            *) rb_log "rb_two_vms: unknown option $1"; return 64 ;;
        esac
    done
    local gg
    local -a menvs=("${envs[@]}") genvs=("${envs[@]}") mrel=() gair=client
    gg="$(rb_gateway_bin 2> /dev/null)" && genvs+=(--env "RB_GATEWAY_BIN=$gg")
    if rb_kernel_has_vhci; then
        [[ -n $gg ]] && menvs+=(--env "RB_GATEWAY_BIN=$gg")
    else
        # No hci_vhci in this kernel (Debian's arm64): the meter VM is an x86_64 one (btvirt's server
        # needs /dev/vhci for its own controller) running this tree's simulator, and the gateway VM's
        # controller comes over a virtio console attached as an H4 UART, as a Pi's on-board one is.
        local mbin
        mbin="$(RB_RELEASE="$RB_METER_RELEASE" rb_gateway_bin)" || return 1
        menvs+=(--env "RB_GATEWAY_BIN=$mbin" --env RB_METER_AWAIT_GATEWAY=gw)
        mrel=(--release "$RB_METER_RELEASE")
        gair=uart
    fi
    [[ $RB_RELEASE == arm64 && -n ${RB_DEB:-} ]] && genvs+=(--env "RB_DEB=$RB_DEB")
    local job
    job="$(rb_job_dir "${RB_SCENARIO:-two}")"
    RB_LAST_JOB="$job"
    local t0=$SECONDS
    rb_boot meter --job "$job" "${mrel[@]}" --smp 1 --air server --timeout "${RB_VM_TIMEOUT:-300}" "${menvs[@]}" \
        "${mopts[@]}" -- "$mscript" || return $?
    rb_boot gw --job "$job" --smp 1 --air "$gair" --timeout "${RB_VM_TIMEOUT:-300}" "${genvs[@]}" "${gopts[@]}" \
        -- "$gscript" || return $?
    rb_follow meter
    rb_follow gw
    rb_wait gw; local gs=$?
    touch "$job/gateway.done"
    rb_wait meter; local ms=$?
    rb__end_followers
    rb_log "meter VM exit $ms, gateway VM exit $gs, $((SECONDS - t0)) s; logs in $job"
    if ((gs != 0 || ms != 0)); then
        ((gs == 125)) && rb_console_tail gw 30
        ((ms == 125)) && rb_console_tail meter 30
        ((gs != 0)) && return "$gs"
        return "$ms"
    fi
    return 0
}

# rb_one_vm SCRIPT [rb_boot options]: one VM ("vm", 2 vCPUs, btvirt's two controllers hci0 and hci1
# under one bluetoothd). Prints its step lines; returns its script's status.
rb_one_vm() {
    local script="$1"; shift
    local gg
    local -a genv=()
    gg="$(rb_gateway_bin 2> /dev/null)" && genv+=(--env "RB_GATEWAY_BIN=$gg")
    [[ $RB_RELEASE == arm64 && -n ${RB_DEB:-} ]] && genv+=(--env "RB_DEB=$RB_DEB")
    local job
    job="$(rb_job_dir "${RB_SCENARIO:-one}")"
    RB_LAST_JOB="$job"
    local t0=$SECONDS
    rb_boot vm --job "$job" --timeout "${RB_VM_TIMEOUT:-300}" "${genv[@]}" "$@" -- "$script" || return $?
    rb_follow vm
    rb_wait vm; local s=$?
    rb__end_followers
    rb_log "VM exit $s, $((SECONDS - t0)) s; logs in $job"
    ((s == 125)) && rb_console_tail vm 30
    return "$s"
}
