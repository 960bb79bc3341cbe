#!/usr/bin/env bash
# A Debian 13 (trixie) amd64 root with Debian's own Swift toolchain (swiftlang, the one a Raspberry Pi OS
# user can `apt install`) and, through multiarch, the arm64 C libraries plus the arm64 Swift runtime and
# its static archives: it builds the gateway with that toolchain, for amd64 natively and for arm64 by
# cross-compiling (a Pi needs no toolchain of its own). The root is made with debootstrap from the
# machine's own Debian mirror (read from its apt sources, never written into the repository) and cached
# under /var/tmp/glucose-gateway-trixie (GLUCOSE_GATEWAY_TRIXIE); it is made again when its recipe
# (the package list below) changes. Needs root (debootstrap, chroot, mount namespaces).
#
#   scripts/trixie-root.sh prepare               create the root, or reuse the cached one; prints its path
#   scripts/trixie-root.sh build ARCH OUTPUT [PRODUCT]   release build of glucose-gateway (or PRODUCT,
#                                                e.g. glucose-gateway-simulator) for ARCH (amd64 or arm64)
#                                                with the root's Swift, copied to OUTPUT; EXTRA_SWIFT_FLAGS
#                                                (an array in the environment, one per line) are passed on
#   scripts/trixie-root.sh run SCRIPT [ARGS]     runs a bash script in the root, the repository at /src
#                                                (and the directory TRIXIE_BIND, if set, at /work)
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${GLUCOSE_GATEWAY_TRIXIE:-/var/tmp/glucose-gateway-trixie}"
root="$cache/root"
say() { echo "trixie-root.sh: $*" >&2; }
die() { say "$*"; exit 1; }

# What the root holds. amd64: the toolchain, the C libraries' headers (libcurl and libmosquitto are only
# headers for the gateway: it loads them at run time), dpkg-dev for dpkg-shlibdeps, and binutils for
# aarch64 to strip an arm64 binary. arm64: the C run-time and the two libraries the gateway links
# (libdbus, libsqlite3), whose development files also give pkg-config what an arm64 build needs.
host_packages="swiftlang libc6-dev libstdc++-14-dev pkg-config libdbus-1-dev libsqlite3-dev libcurl4-openssl-dev libmosquitto-dev dpkg-dev binutils-aarch64-linux-gnu file"
arm64_packages="libc6-dev:arm64 libgcc-14-dev:arm64 libstdc++-14-dev:arm64 libdbus-1-dev:arm64 libsqlite3-dev:arm64"
# The arm64 Swift modules and static runtime come from the arm64 swiftlang package, unpacked (not
# installed: it would replace the amd64 compiler) under this directory of the root; so do libcurl's
# arm64 headers (the gateway uses only its headers, and installing libcurl4-openssl-dev:arm64 beside
# the amd64 one fails on a file that differs between the two libpsl-dev).
arm64_swift=/opt/swift-arm64
recipe="trixie amd64+arm64 | $host_packages | $arm64_packages | swiftlang:arm64 libcurl4-openssl-dev:arm64 -> $arm64_swift | 2"

# The machine's Debian mirror: the first URI of an enabled deb source of its own release's main.
host_mirror() {
    local codename
    codename="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
    [[ -n "$codename" ]] || die "no VERSION_CODENAME in /etc/os-release"
    local f
    for f in /etc/apt/sources.list.d/*.sources; do
        [[ -f "$f" ]] || continue
        awk -v codename="$codename" '
            function flush() {
                if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " codename " ") && (" " comps " ") ~ / main / && enabled != "no" && uris != "") {
                    split(uris, u, " "); print u[1]; found = 1; exit
                }
                types = suites = comps = uris = ""; enabled = "yes"
            }
            BEGIN { enabled = "yes" }
            /^[ \t]*$/ { flush(); next }
            /^#/ || /^[ \t]/ { next }
            { key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^ +/, "")
              if (key == "types") types = $0; else if (key == "suites") suites = $0
              else if (key == "components") comps = $0; else if (key == "uris") uris = $0
              else if (key == "enabled") enabled = tolower($0) }
            END { if (!found) flush() }' "$f"
    done | head -n 1 | grep . && return 0
    if [[ -f /etc/apt/sources.list ]]; then
        sed -E 's/\[[^]]*\]//' /etc/apt/sources.list | awk -v codename="$codename" \
            '$1 == "deb" && $3 == codename { for (i = 4; i <= NF; i++) if ($i == "main") { print $2; exit } }' | grep . && return 0
    fi
    die "no apt source for $codename main on this machine"
}

# Runs a bash script inside the root in a private mount namespace (/proc, /dev, the repository at /src,
# the build cache at /build, and TRIXIE_BIND, a directory, at /work): nothing mounted outlives it.
IN_ROOT='
set -euo pipefail
root="$1"; src="$2"; build="$3"; bind="$4"; shift 4
mount -t proc proc "$root/proc"
mount --bind /dev "$root/dev"
mkdir -p "$root/src" "$root/build" "$root/work"
mount --bind "$src" "$root/src"
mount --bind "$build" "$root/build"
[[ -z "$bind" ]] || mount --bind "$bind" "$root/work"
exec chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 HOME=/root TMPDIR=/tmp /bin/bash -c "$@"
'
in_root() { # SCRIPT [ARGS...]
    mkdir -p "$cache/build"
    unshare --mount --propagation private bash -c "$IN_ROOT" in-root "$1" "$here" "$cache/build" "${TRIXIE_BIND:-}" "${@:2}"
}

prepare() {
    [[ $(id -u) == 0 ]] || die "making the trixie root needs root (debootstrap, chroot)"
    mkdir -p "$cache"
    exec 9> "$cache/.lock"
    flock 9
    if [[ -d "$root" && "$(cat "$cache/recipe" 2>/dev/null)" == "$recipe" ]]; then
        echo "$root"
        return 0
    fi
    if ! command -v debootstrap > /dev/null; then
        say "installing debootstrap"
        apt-get -o DPkg::Lock::Timeout=600 update -qq
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends debootstrap > /dev/null
    fi
    local mirror new="$cache/root.new"
    mirror="$(host_mirror)"
    rm -rf -- "$new" "$root" "$cache/recipe"
    say "debootstrap trixie amd64 into $new"
    debootstrap --variant=minbase --arch=amd64 trixie "$new" "$mirror" > "$cache/debootstrap.log" 2>&1 \
        || { tail -n 20 "$cache/debootstrap.log" >&2; die "debootstrap failed (log: $cache/debootstrap.log)"; }
    printf '#!/bin/sh\n# No service starts in this root.\nexit 101\n' > "$new/usr/sbin/policy-rc.d"
    chmod 0755 "$new/usr/sbin/policy-rc.d"
    say "installing swiftlang and the amd64 and arm64 libraries"
    in_root "$new" '
        dpkg --add-architecture arm64
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends '"$host_packages $arm64_packages"' > /dev/null
        cd /tmp
        apt-get download -qq swiftlang:arm64 libcurl4-openssl-dev:arm64
        mkdir -p '"$arm64_swift"'
        dpkg-deb --fsys-tarfile swiftlang_*_arm64.deb \
            | tar -x -C '"$arm64_swift"' ./usr/libexec/swift/lib/swift ./usr/libexec/swift/lib/swift_static ./usr/libexec/swift/lib/clang
        dpkg-deb --fsys-tarfile libcurl4-openssl-dev_*_arm64.deb | tar -x -C '"$arm64_swift"' ./usr/include/aarch64-linux-gnu/curl
        rm -f swiftlang_*_arm64.deb libcurl4-openssl-dev_*_arm64.deb
        apt-get clean
        swift --version' > "$cache/install.log" 2>&1 \
        || { tail -n 20 "$cache/install.log" >&2; die "installing into the root failed (log: $cache/install.log)"; }
    mv "$new" "$root"
    printf '%s\n' "$recipe" > "$cache/recipe"
    echo "$root"
}

build() { # ARCH OUTPUT [PRODUCT]
    local arch="$1" output="$2" product="${3:-glucose-gateway}"
    prepare > /dev/null
    exec 9>&-
    local flags=(-c release --product "$product" --static-swift-stdlib --disable-local-rpath
                 --package-path /src --scratch-path "/build/$arch")
    local env=() setup="" relink=""
    case "$arch" in
        amd64) ;;
        arm64)
            # The amd64 compiler generates aarch64 code; the arm64 Swift modules, runtime archives and
            # link arguments come from the unpacked arm64 swiftlang (its static resource directory: an
            # explicit one is not swapped for swift_static by --static-swift-stdlib), the C run-time and
            # libraries from the multiarch directories, and pkg-config reads arm64's files.
            flags+=(--triple aarch64-unknown-linux-gnu --sdk /
                    -Xswiftc -resource-dir -Xswiftc "$arm64_swift/usr/libexec/swift/lib/swift_static"
                    -Xcc -I -Xcc "$arm64_swift/usr/include/aarch64-linux-gnu")
            env+=(PKG_CONFIG_LIBDIR=/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig)
            # Linked by the root's aarch64 GNU ld. This compiler (and the runtime archives built with
            # it) puts some protocol conformance descriptors in .rodata sections marked writable; ld
            # gives the output .rodata the union of its inputs' flags, so the code and everything after
            # it shared one read-write-execute LOAD segment, with no room for a RELRO segment. The
            # script below sends those writable .rodata inputs to a section after .data.rel.ro,
            # read-only once the loader has relocated it (their relocations are all relative: nothing
            # is written there at run time anyway), and -z separate-code gives the code a LOAD segment
            # of its own, apart from the read-only data. (INSERT keeps ld's own script, and the
            # inputs are assigned to this section before its .rodata rule sees them.)
            mkdir -p "$cache/build"
            printf '%s\n' '/* Made by scripts/trixie-root.sh: .rodata inputs marked writable go with the RELRO data. */' \
                'SECTIONS' '{' '  .data.rel.ro.rodata : { INPUT_SECTION_FLAGS (SHF_WRITE) *(.rodata .rodata.*) }' '}' \
                'INSERT AFTER .data.rel.ro;' > "$cache/build/rodata-relro.ld.new"
            if cmp -s "$cache/build/rodata-relro.ld.new" "$cache/build/rodata-relro.ld"; then
                rm -f -- "$cache/build/rodata-relro.ld.new"
            else
                mv -- "$cache/build/rodata-relro.ld.new" "$cache/build/rodata-relro.ld"
            fi
            # libstdc++ linked in: the runtime's link arguments (static-stdlib-args.lnk) name -lstdc++
            # themselves, so clang's -static-libstdc++ has no effect on them; ld takes the archive
            # when the first directory with a libstdc++ holds nothing else.
            setup='mkdir -p /build/static-libstdc++-arm64
cxx="$(/usr/libexec/swift/bin/clang --target=aarch64-linux-gnu -print-file-name=libstdc++.a)"
[[ "$cxx" == /* ]] || { echo "trixie-root.sh: no arm64 libstdc++.a in the root" >&2; exit 1; }
ln -sfn "$cxx" /build/static-libstdc++-arm64/libstdc++.a
'
            flags+=(-Xlinker -T -Xlinker /build/rodata-relro.ld -Xlinker -z -Xlinker separate-code
                    -Xswiftc -Xclang-linker -Xswiftc -L/build/static-libstdc++-arm64)
            # swift build links again when its link flags change, not when the script's text does.
            relink=/build/rodata-relro.ld ;;
        *) die "unknown architecture '$arch' (amd64 or arm64)" ;;
    esac
    if [[ -n "${EXTRA_SWIFT_FLAGS:-}" ]]; then
        local extra
        mapfile -t extra <<< "$EXTRA_SWIFT_FLAGS"
        flags+=("${extra[@]}")
    fi
    say "swift build ${flags[*]}"
    local quoted
    quoted="$(printf '%q ' "${flags[@]}")"
    local program="\"\$(swift build $quoted --show-bin-path)/$product\""
    [[ -z "$relink" ]] || setup+="[[ ! $relink -nt $program ]] || rm -f -- $program"$'\n'
    in_root "$root" "${setup}env ${env[*]} swift build $quoted && cp $program /build/$product-$arch.out"
    install -m 0755 "$cache/build/$product-$arch.out" "$output"
}

case "${1:-}" in
    prepare) prepare ;;
    build) [[ $# == 3 || $# == 4 ]] || die "usage: build ARCH OUTPUT [PRODUCT]"; build "$2" "$3" "${4:-}" ;;
    run) [[ $# -ge 2 ]] || die "usage: run SCRIPT [ARGS]"; prepare > /dev/null; exec 9>&-; in_root "$root" "$2" run "${@:3}" ;;
    *) sed -n '2,15p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit 64 ;;
esac
