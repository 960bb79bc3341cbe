# shellcheck shell=bash
# The release axis of the real-stack bed, sourced by lib.sh. RB_RELEASE picks what the VMs run:
#
#   bookworm  (default) the host's own root (Debian 12) shared over 9p, bookworm's kernel, x86_64
#   trixie    a debootstrapped Debian 13 root (cached under $RB_WORK/roots), trixie's kernel, x86_64
#   arm64     a debootstrapped Debian 13 arm64 root, trixie's arm64 kernel, qemu-system-aarch64 (TCG),
#             the Raspberry Pi OS userland's release and architecture (see arch-arm64.sh)
#
# A trixie root is not the host's: the tree under test, the gateway binary's directory and the host's
# Swift runtime (/opt/swift, which the host-built binary needs) are bound into it at their host paths by
# the initramfs (rb.binds=), so every scenario script runs unchanged on either root.
#
# The mirror is this machine's own (its apt sources); nothing here names one.
#
#   rb_release_prepare   (called by rb_prepare) sets RB_ROOT ("" = host root), RB_ARCH (amd64|arm64),
#                        RB_KERNEL_CANDIDATES; builds the cached root when missing.

RB_RELEASE="${RB_RELEASE:-bookworm}"
# What a trixie root holds: the stack under test (bluez, dbus, systemd, udev), what the scenario scripts
# call (python3 with dbus and gi, bc, curl, iproute2, kmod, script from bsdutils, GNU time), and the
# gateway's C libraries. The arm64 root adds valgrind for instruction counts.
RB_ROOT_PACKAGES=(bluez bluez-test-tools dbus systemd systemd-sysv udev python3 python3-dbus python3-gi kmod
                  iproute2 procps util-linux bsdutils bc curl libsqlite3-0 libmosquitto1 libdbus-1-3 sqlite3
                  time e2fsprogs busybox-static cpio ca-certificates)
RB_ROOT_PACKAGES_ARM64=(valgrind)

# The machine's Debian mirror: the first "deb" source of its release's main component (deb822 .sources
# files or sources.list), as apt itself has it.
rb_host_mirror() {
    local codename f
    codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -f $f ]] || continue
        awk -v rel="$codename" '
            BEGIN { RS = ""; FS = "\n" }
            {
                types = ""; uris = ""; suites = ""; comps = ""
                for (i = 1; i <= NF; i++) {
                    split($i, kv, ":[ \t]*")
                    key = tolower(kv[1]); val = substr($i, length(kv[1]) + 2); sub(/^[ \t]+/, "", val)
                    if (key == "types") types = val; else if (key == "uris") uris = val
                    else if (key == "suites") suites = val; else if (key == "components") comps = val
                }
                if ((" " types " ") ~ / deb / && (" " suites " ") ~ (" " rel " ") && (" " comps " ") ~ / main /) {
                    split(uris, u, " "); print u[1]; exit
                }
            }' "$f"
    done | head -n 1 | grep . && return 0
    [[ -f /etc/apt/sources.list ]] &&
        sed 's/\[[^]]*\]//' /etc/apt/sources.list | awk -v rel="$codename" '$1 == "deb" && $3 == rel { print $2; exit }' | grep .
}

rb__debian_arch() { [[ $RB_RELEASE == arm64 ]] && echo arm64 || echo amd64; }

rb_release_prepare() {
    case "$RB_RELEASE" in
        bookworm)
            RB_ROOT="" RB_ARCH=amd64
            RB_KERNEL_CANDIDATES=("${RB_GOOD_KERNELS[@]}")
            ;;
        trixie|arm64)
            RB_ARCH="$(rb__debian_arch)"
            RB_ROOT="$RB_WORK/roots/trixie-$RB_ARCH"
            # trixie's kernel meta package names the current ABI; the root's apt lists resolve it.
            RB_KERNEL_CANDIDATES=("linux-image-$RB_ARCH")
            rb_root_build || return 1
            ;;
        *) rb_log "RB_RELEASE must be bookworm, trixie or arm64 (got '$RB_RELEASE')"; return 64 ;;
    esac
    rb_arch_slow
    export RB_RELEASE RB_ROOT RB_ARCH
}

# apt on the host against a root's own lists (its sources.list, written by debootstrap from the
# machine's mirror), without touching the machine's apt state.
rb_root_apt() {
    local root="$1"; shift
    apt-get -q -o Dir="$root" -o Dir::State::Status="$root/var/lib/dpkg/status" \
        -o APT::Architecture="$RB_ARCH" -o APT::Architectures="$RB_ARCH" \
        -o Dir::Etc::Trusted=/usr/share/keyrings/debian-archive-trixie-stable.gpg \
        -o Dir::Etc::TrustedParts=/usr/share/keyrings \
        -o Debug::NoLocking=1 "$@"
}

# Builds the cached root: debootstrap (first stage on the host; for arm64 the second stage runs in an
# arm64 VM, as the host cannot execute arm64 programs), then a few settings the VMs need.
rb_root_build() {
    local root="$RB_ROOT"
    [[ -f $root.ready || -f $root.stage1 ]] && return 0
    local mirror include
    mirror="$(rb_host_mirror)" || { rb_log "no Debian mirror in this machine's apt sources"; return 1; }
    include="$(IFS=,; echo "${RB_ROOT_PACKAGES[*]}")"
    [[ $RB_ARCH == arm64 ]] && include+=",$(IFS=,; echo "${RB_ROOT_PACKAGES_ARM64[*]}")"
    command -v debootstrap > /dev/null || { rb_log "debootstrap is missing"; return 1; }
    rm -rf "$root" && mkdir -p "$root"
    local t0=$SECONDS log="$root.debootstrap.log"
    rb_log "debootstrap trixie $RB_ARCH into $root (once; several minutes)"
    local -a stage=()
    [[ $RB_ARCH != "$(dpkg --print-architecture)" ]] && stage=(--foreign)
    if ! debootstrap "${stage[@]}" --variant=minbase --arch="$RB_ARCH" --include="$include" \
            --keyring=/usr/share/keyrings/debian-archive-trixie-stable.gpg trixie "$root" "$mirror" > "$log" 2>&1; then
        rb_log "debootstrap failed (see $log): $(tail -n 2 "$log")"
        return 1
    fi
    if ((${#stage[@]})); then
        # Finished in a VM by rb_release_finish, once the kernel and the initramfs are there.
        echo "$mirror" > "$root.stage1"
        return 0
    fi
    rb__root_settings "$root"
    echo "trixie $RB_ARCH $mirror $((SECONDS - t0))s" > "$root.ready"
    rb_log "trixie $RB_ARCH root ready in $((SECONDS - t0)) s"
}

# The settings every release root gets once its packages are configured.
rb__root_settings() {
    local root="$1"
    printf '#!/bin/sh\n# No service starts while packages are installed in this root.\nexit 101\n' > "$root/usr/sbin/policy-rc.d"
    chmod 755 "$root/usr/sbin/policy-rc.d"
    # Mount points for the job directory and the host's /opt/swift.
    mkdir -p "$root/run/rbjob" "$root/opt"
    rm -f "$root/etc/hostname"
}

# The second stage of a foreign-architecture debootstrap, run as PID 1 of a VM of that architecture
# (this host cannot execute the root's programs): the VM copies the root into its memory, finishes it
# there and writes it back as a tar stream into the job directory, which replaces the cached root.
rb_release_finish() {
    local root="$RB_ROOT"
    [[ -n $root && -f $root.stage1 && ! -f $root.ready ]] || return 0
    local t0=$SECONDS job d
    # debootstrap's first stage, unable to mount /proc in a container, links it to the host's: the VM's
    # PID 1 mounts its own there.
    for d in proc sys; do [[ -L $root/$d ]] && rm -f "$root/$d" && mkdir -p "$root/$d"; done
    job="$(rb_job_dir second-stage)"
    # dpkg over 9p (a round trip per file operation, an fsync per file) would take an hour under TCG:
    # the root is copied into the VM's memory, finished there, and comes back as one tar stream.
    cat > "$job/second-stage.sh" <<'SH'
#!/bin/sh
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
name="$(tr ' ' '\n' < /proc/cmdline | sed -n 's/^rb.name=//p')"
out="/run/rbjob/$name"
mkdir -p "$out" /run/stage
mount -t tmpfs -o size=2500m tmpfs /run/stage
echo "rb-guest: copying the root into memory" > /dev/console
tar -C / --one-file-system -cf - . | tar -C /run/stage -xf -
mkdir -p /run/stage/proc /run/stage/sys /run/stage/dev
mount -t proc proc /run/stage/proc
mount --bind /dev /run/stage/dev
echo "force-unsafe-io" > /run/stage/etc/dpkg/dpkg.cfg.d/rb-unsafe-io
echo "rb-guest: debootstrap --second-stage" > /dev/console
# container=lxc skips debootstrap's own device nodes; /dev is the kernel's devtmpfs.
container=lxc chroot /run/stage /debootstrap/debootstrap --second-stage > "$out/second-stage.log" 2>&1
rc=$?
rm -f /run/stage/etc/dpkg/dpkg.cfg.d/rb-unsafe-io
umount /run/stage/proc /run/stage/dev
if [ "$rc" = 0 ]; then
    echo "rb-guest: writing the root back" > /dev/console
    tar -C /run/stage -cf /run/rbjob/root.tar . || rc=1
fi
echo "rb-guest: RB-EXIT-CODE=$rc" > /dev/console
echo "$rc" > "/run/rbjob/$name.rc"
sync
echo o > /proc/sysrq-trigger
sleep 10
SH
    chmod 755 "$job/second-stage.sh"
    rb_log "debootstrap's second stage in an $RB_ARCH VM (once; 10-20 minutes under TCG)"
    RB_PREPARED=1 rb_boot stage2 --job "$job" --init /run/rbjob/second-stage.sh --timeout 1200 --mem 3584
    rb_wait stage2
    local rc=$?
    if [[ $rc != 0 ]]; then
        rb_log "second stage failed (exit $rc); see $job/stage2/second-stage.log and $job/stage2.console"
        return 1
    fi
    rm -rf "$root" && mkdir -p "$root" && tar -C "$root" -xf "$job/root.tar" && rm -f "$job/root.tar" || return 1
    rm -f "$root.stage1"
    rb__root_settings "$root"
    echo "trixie $RB_ARCH $(rb_host_mirror) second stage $((SECONDS - t0))s" > "$root.ready"
    rb_log "trixie $RB_ARCH root ready: second stage in $((SECONDS - t0)) s"
}

# The host paths a release root gets bound in at the same paths, one a line: the tree under test, the
# directory of the gateway binary (when outside the tree), the host's Swift runtime that a host-built
# binary loads (its RUNPATH), and RB_DEB's directory (a package to install in the VM).
rb_release_binds() {
    local bin="${1:-}" p
    echo "$RB_REPO"
    if [[ -n $bin && $RB_ARCH == amd64 ]]; then
        p="$(dirname "$bin")"
        [[ $p/ == "$RB_REPO"/* ]] || echo "$p"
    fi
    [[ $RB_ARCH == amd64 && -d /opt/swift ]] && echo /opt/swift
    [[ -n ${RB_DEB:-} ]] && echo "$(dirname "$RB_DEB")"
    return 0
}

# The kernel package of the release: the one trixie's linux-image-ARCH meta package depends on now.
rb_release_kernel() {
    local pkg
    pkg="$(apt-cache -o Dir="$RB_ROOT" \
        -o Dir::State::Status="$RB_ROOT/var/lib/dpkg/status" -o APT::Architecture="$RB_ARCH" \
        depends "linux-image-$RB_ARCH" 2> /dev/null | sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*\).*/\1/p' | head -n 1)"
    if [[ -z $pkg ]]; then
        # The cached kernel of an earlier run, when the lists cannot answer.
        pkg="$(cd "$RB_WORK" && ls -d kernel-linux-image-6.*-"$RB_ARCH" 2> /dev/null | sed 's/^kernel-//' | tail -n 1)"
    fi
    [[ -n $pkg ]] || { rb_log "no trixie kernel package for $RB_ARCH in the root's apt lists"; return 1; }
    echo "$pkg"
}

# Downloads a kernel package into the current directory: bookworm's from the machine's apt, the
# release's from the root's lists.
rb_kernel_download() {
    if [[ -n ${RB_ROOT:-} ]]; then
        rb_root_apt "$RB_ROOT" download "$1"
    else
        apt-get download -q "$1"
    fi
}

# arm64 with RB_DEB: the package's dependencies fetched into the root's apt cache on the host (apt
# resolves them against the root's own status and lists; nothing is unpacked), so `apt install ./DEB` in
# the VM needs no network. Once per package (by its checksum).
rb_release_deb_depends() {
    [[ $RB_RELEASE == arm64 && -n ${RB_DEB:-} ]] || return 0
    [[ -f $RB_DEB ]] || { rb_log "RB_DEB=$RB_DEB: no such file"; return 1; }
    local sum
    sum="$(sha256sum "$RB_DEB" | cut -c1-16)"
    [[ -f $RB_ROOT.deb-$sum ]] && return 0
    rb_log "fetching the dependencies of $(basename "$RB_DEB") into the arm64 root's apt cache"
    rb_root_apt "$RB_ROOT" install -y --download-only --no-install-recommends "$RB_DEB" > "$RB_ROOT.deb-deps.log" 2>&1 || {
        rb_log "apt --download-only failed: $(tail -n 2 "$RB_ROOT.deb-deps.log")"; return 1; }
    touch "$RB_ROOT.deb-$sum"
}

# What the user asked for (RB_ACCEL before any preparation chose one): a VM of another release picks
# its own accelerator unless the user fixed it.
RB_ACCEL_ASKED="${RB_ACCEL_ASKED-${RB_ACCEL:-}}"
export RB_ACCEL_ASKED

# rb_with_release R CMD [ARGS...]: runs CMD (in this shell) with release R prepared and selected, then
# puts the current release back. RB_SLOW stays the current one: a VM of R lives as long as the scenario
# it serves (the x86_64 meter VM of an arm64 gateway VM).
rb_with_release() {
    local r="$1"; shift
    local v status=0
    local -a vars=(RB_RELEASE RB_ROOT RB_ARCH RB_KVER RB_KDIR RB_VMLINUZ RB_INITRD RB_ACCEL RB_PREPARED RB_SLOW)
    local -A saved=()
    for v in "${vars[@]}"; do saved[$v]="${!v-}"; done
    local -a candidates=("${RB_KERNEL_CANDIDATES[@]}")
    unset RB_ROOT RB_KVER RB_KDIR RB_VMLINUZ RB_INITRD RB_PREPARED
    RB_RELEASE="$r" RB_ACCEL="$RB_ACCEL_ASKED"
    [[ -z $RB_ACCEL ]] && unset RB_ACCEL
    if rb_prepare > "$RB_WORK/.prepare-$r.log" 2>&1; then
        RB_SLOW="${saved[RB_SLOW]}"
        "$@" || status=$?
    else
        status=$?
        rb_log "release $r cannot be prepared: $(tail -n 2 "$RB_WORK/.prepare-$r.log")"
    fi
    for v in "${vars[@]}"; do printf -v "$v" '%s' "${saved[$v]}"; done
    RB_KERNEL_CANDIDATES=("${candidates[@]}")
    export "${vars[@]}"
    return "$status"
}
