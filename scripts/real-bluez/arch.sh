# shellcheck shell=bash
# What differs between an x86_64 VM and an arm64 one (sourced by lib.sh, after release.sh). The arm64
# VM is a Raspberry Pi's userland on a generic machine: qemu's "virt" board with a Cortex-A72 (the Pi 4's
# core), emulated by TCG on this x86_64 host, booting trixie's linux-image-arm64 straight from -kernel.

rb__arm() { [[ ${RB_RELEASE:-bookworm} == arm64 ]]; }

# Emulating a Cortex-A72 on x86_64 is some times slower than emulating x86_64: every VM's time limit is
# multiplied by RB_SLOW (scenarios may read it for their own waits).
RB_SLOW_SET="${RB_SLOW:-}"
rb_arch_slow() { RB_SLOW="${RB_SLOW_SET:-$(rb__arm && echo 3 || echo 1)}"; export RB_SLOW; }
rb_arch_slow

rb_arch_qemu() { rb__arm && echo qemu-system-aarch64 || echo qemu-system-x86_64; }

# The accelerator, CPU and board, one argument a line.
rb_arch_qemu_base() {
    if rb__arm; then
        printf '%s\n' -accel tcg,thread=multi -machine virt -cpu "${RB_ARM_CPU:-cortex-a72}"
    elif [[ $1 == kvm ]]; then
        printf '%s\n' -accel kvm -cpu host -machine q35
    else
        printf '%s\n' -accel tcg,thread=multi -cpu max -machine q35
    fi
}

# The serial console the VM's -serial file is: the PL011 on the virt board, COM1 on a PC.
rb_arch_console() { rb__arm && echo ttyAMA0 || echo ttyS0; }

# The image qemu boots. Debian's arm64 vmlinuz may be an EFI "zboot" image (a PE file holding the
# compressed Image), which qemu 7.2's -kernel cannot load: the Image inside it is unpacked once, next to it.
rb_arch_kernel_image() {
    local vmlinuz="$1"
    rb__arm || { echo "$vmlinuz"; return 0; }
    local image="${vmlinuz%/*}/Image-${vmlinuz##*/vmlinuz-}"
    if [[ ! -s $image ]]; then
        python3 - "$vmlinuz" "$image" <<'PY' || return 1
import gzip, lzma, struct, sys, zlib
data = open(sys.argv[1], "rb").read()
if data[:2] == b"MZ" and data[4:8] == b"zimg":
    # struct: "MZ", 2 bytes, "zimg", payload offset (le32), payload size (le32), 8 bytes, compression name
    offset, size = struct.unpack_from("<II", data, 8)
    kind = data[24:32].rstrip(b"\0").decode()
    payload = data[offset:offset + size]
    if kind == "gzip":
        image = zlib.decompress(payload, 47)
    elif kind in ("xz", "lzma"):
        image = lzma.decompress(payload)
    elif kind == "zstd":
        import subprocess
        image = subprocess.run(["zstd", "-dc"], input=payload, capture_output=True, check=True).stdout
    else:
        sys.exit(f"zboot image compressed with {kind}: not handled")
elif data[:2] == b"\x1f\x8b":
    image = gzip.decompress(data)
else:
    image = data
open(sys.argv[2], "wb").write(image)
PY
    fi
    echo "$image"
}

# The static busybox of the initramfs: the host's for x86_64, the arm64 root's for arm64.
# Before debootstrap's second stage the arm64 root holds busybox-static only as a .deb in its apt cache:
# the binary is taken from it.
rb_arch_busybox() {
    rb__arm || { echo /bin/busybox; return 0; }
    if [[ -x $RB_ROOT/usr/bin/busybox ]]; then echo "$RB_ROOT/usr/bin/busybox"; return 0; fi
    local deb dir="$RB_WORK/busybox-arm64"
    if [[ ! -x $dir/usr/bin/busybox ]]; then
        deb="$(ls "$RB_ROOT"/var/cache/apt/archives/busybox-static_*_arm64.deb 2> /dev/null | head -n 1)"
        [[ -n $deb ]] && rm -rf "$dir" && dpkg -x "$deb" "$dir"
    fi
    echo "$dir/usr/bin/busybox"
}
