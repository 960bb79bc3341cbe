#!/usr/bin/env bash
# Builds the Debian package dist/glucose-gateway_VERSION_ARCH.deb for the machine it runs on (amd64 on a PC,
# arm64 on a Raspberry Pi or an arm64 runner): a release build with the Swift runtime linked in
# (--static-swift-stdlib), so the package needs only Debian's libraries and no Swift toolchain where it
# is installed. The unit, udev rules, D-Bus policy, sysusers and tmpfiles entries and the example config
# are generated from config/ and udev/ with Debian's paths; the manual page and the bash completion from
# the program's own --help texts. lintian must report no error. The meter simulator
# (glucose-gateway-simulator, a test double and the demo's meter) goes to /usr/libexec/glucose-gateway/:
# off PATH, as no user runs it day to day, but there for the demo, for a second Pi playing a meter, and
# for the real-stack bed's arm64 VMs, which get the package and nothing else.
#
#   scripts/package-deb.sh                      build and package (installs dpkg-dev and lintian if missing)
#   scripts/package-deb.sh --arch arm64         the package for Raspberry Pi OS / Debian 13 arm64, from any
#                                               amd64 machine: cross-compiled with Debian trixie's own Swift
#                                               (swiftlang) in the cached root of scripts/trixie-root.sh,
#                                               the Swift runtime linked in from its static archives, the
#                                               dependencies computed against trixie's arm64 libraries, and
#                                               --help run under qemu-aarch64-static (installed if missing)
#   scripts/package-deb.sh --binary PATH        package an already built binary (built with
#                                               --static-swift-stdlib for this architecture) and
#                                               the simulator beside it (or --simulator PATH)
#   scripts/package-deb.sh --output DIR         write the .deb (and its lintian report) to DIR, not dist/
#   scripts/package-deb.sh --no-lintian         skip the lintian run
#
# The version is the VERSION file's, or GLUCOSE_GATEWAY_VERSION. DEBFULLNAME and DEBEMAIL name the
# maintainer; SOURCE_DATE_EPOCH (default: the last commit's time) dates the changelog, the manual page
# and the files in the package, so the same tree gives the same package.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() { sed -n '2,28p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
die() { echo "package-deb.sh: $*" >&2; exit 1; }
say() { echo "package-deb.sh: $*"; }

binary=""
simulator=""
output="$here/dist"
run_lintian=1
arch="$(dpkg --print-architecture)"
host_arch="$arch"
while (($#)); do
    case "$1" in
        --binary) [[ $# -ge 2 ]] || { echo "package-deb.sh: --binary needs a path" >&2; exit 64; }; binary="$2"; shift 2 ;;
        --binary=*) binary="${1#--binary=}"; shift ;;
        --simulator) [[ $# -ge 2 ]] || { echo "package-deb.sh: --simulator needs a path" >&2; exit 64; }; simulator="$2"; shift 2 ;;
        --simulator=*) simulator="${1#--simulator=}"; shift ;;
        --output) [[ $# -ge 2 ]] || { echo "package-deb.sh: --output needs a directory" >&2; exit 64; }; output="$2"; shift 2 ;;
        --output=*) output="${1#--output=}"; shift ;;
        --no-lintian) run_lintian=0; shift ;;
        --arch) [[ $# -ge 2 ]] || { echo "package-deb.sh: --arch needs an architecture" >&2; exit 64; }; arch="$2"; shift 2 ;;
        --arch=*) arch="${1#--arch=}"; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "package-deb.sh: unknown option '$1' (see --help)" >&2; exit 64 ;;
    esac
done

version="${GLUCOSE_GATEWAY_VERSION:-$(tr -d '[:space:]' < "$here/VERSION")}"
[[ -n "$version" ]] || die "no version (VERSION is empty)"
dpkg --validate-version "$version" 2>/dev/null || die "'$version' is not a valid Debian version"
[[ "$version" != *-* ]] || die "'$version': a native package's version has no Debian revision (no '-')"
cross=0
if [[ "$arch" != "$host_arch" ]]; then
    [[ "$arch" == arm64 && "$host_arch" == amd64 ]] \
        || { echo "package-deb.sh: --arch $arch: only arm64 is built on another machine (amd64) than its own" >&2; exit 64; }
    cross=1
fi
maintainer="${DEBFULLNAME:-glucose-gateway maintainers} <${DEBEMAIL:-maintainers@glucose-gateway.example}>"
if [[ -z "${SOURCE_DATE_EPOCH:-}" ]]; then
    SOURCE_DATE_EPOCH="$(git -C "$here" log -1 --format=%ct 2>/dev/null || date +%s)"
fi
export SOURCE_DATE_EPOCH

# 1. Tools from Debian.
want=(dpkg-dev python3 binutils gzip)
((run_lintian)) && want+=(lintian)
((cross)) && want+=(qemu-user-static)
missing=()
for p in "${want[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    say "installing ${missing[*]}"
    sudo_cmd=()
    [[ $(id -u) != 0 ]] && sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# 2. The binary: a release build with the Swift runtime linked in, no $ORIGIN search path, and
#    immediate binding (-z now) for a fully read-only relocation table. Linked by the toolchain's lld
#    with packed relative relocations (DT_RELR, glibc 2.36 and later): the Swift runtime's metadata
#    needs some 31,000 of them, which take 6 KiB instead of 750 KiB to read at every start. The flags
#    are in scripts/package-flags.sh, which the benchmark builds with too.
if [[ -z "$binary" ]] && ((cross)); then
    # Cross-compiled with the trixie root's swiftlang (see scripts/trixie-root.sh), linked by its aarch64
    # GNU ld, which the root's build gives separate read-only, code and data segments and libstdc++
    # from its archive. Of the amd64 package's link options: a read-only relocation table after start
    # (RELRO with immediate binding) and the program's symbols not exported. (Not lld with packed
    # relative relocations: swiftlang 6.0.3's lld fails an assertion on the root's linker script, and
    # without it leaves the writable .rodata writable for good.)
    build_dir="${GLUCOSE_GATEWAY_PACKAGE_BUILD:-$here/.build/package-$arch}"
    mkdir -p "$build_dir"
    say "cross-compiling for $arch in the trixie root"
    EXTRA_SWIFT_FLAGS="$(printf '%s\n' -Xlinker -z -Xlinker relro -Xlinker -z -Xlinker now \
        -Xlinker --no-export-dynamic)" \
        "$here/scripts/trixie-root.sh" build "$arch" "$build_dir/glucose-gateway"
    binary="$build_dir/glucose-gateway"
    EXTRA_SWIFT_FLAGS="$(printf '%s\n' -Xlinker -z -Xlinker relro -Xlinker -z -Xlinker now \
        -Xlinker --no-export-dynamic)" \
        "$here/scripts/trixie-root.sh" build "$arch" "$build_dir/glucose-gateway-simulator" glucose-gateway-simulator
    simulator="$build_dir/glucose-gateway-simulator"
elif [[ -z "$binary" ]]; then
    source "$here/scripts/install-deps.sh"
    export PATH="/opt/swift/usr/bin:$PATH"
    build_dir="${GLUCOSE_GATEWAY_PACKAGE_BUILD:-$here/.build/package}"
    source "$here/scripts/package-flags.sh"
    flags=("${package_flags[@]}")
    say "building (swift build ${flags[*]})"
    swift build "${flags[@]}"
    binary="$(swift build "${flags[@]}" --show-bin-path)/glucose-gateway"
    # The simulator with the same flags, its own product and linker map.
    simulator_flags=()
    for flag in "${flags[@]}"; do
        case "$flag" in
            glucose-gateway) simulator_flags+=(glucose-gateway-simulator) ;;
            -Map=*) simulator_flags+=("-Map=$build_dir/glucose-gateway-simulator.map") ;;
            *) simulator_flags+=("$flag") ;;
        esac
    done
    say "building the simulator (--product glucose-gateway-simulator)"
    swift build "${simulator_flags[@]}"
    simulator="$(swift build "${simulator_flags[@]}" --show-bin-path)/glucose-gateway-simulator"
fi
[[ -f "$binary" && -x "$binary" ]] || die "$binary is not an executable file"
[[ -n "$simulator" ]] || simulator="$(dirname "$binary")/glucose-gateway-simulator"
[[ -f "$simulator" && -x "$simulator" ]] || die "$simulator is not an executable file (the simulator: --simulator PATH)"

work="$(mktemp -d "${TMPDIR:-/tmp}/glucose-gateway-deb.XXXXXX")"
trap 'rm -rf -- "$work"' EXIT
root="$work/root"
install -d -m 0755 "$root"

# Tools that must know the package's architecture: for arm64 those of the trixie root (aarch64 binutils,
# and dpkg-dev with trixie's arm64 libraries in its database), run with the work directory at /work;
# the program itself runs under qemu-aarch64-static with the root's arm64 C libraries.
in_arch() { # SCRIPT (run in $work/src)
    if ((cross)); then
        TRIXIE_BIND="$work" "$here/scripts/trixie-root.sh" run "cd /work/src && dpkg-architecture -a$arch -c bash -c \"\$1\"" "$1"
    else
        (cd "$work/src" && bash -c "$1")
    fi
}
mkdir -p "$work/src/debian"
program="$root/usr/bin/glucose-gateway"
if ((cross)); then
    sysroot="$("$here/scripts/trixie-root.sh" prepare)"
    printf '#!/bin/sh\nexec qemu-aarch64-static -L %q %q "$@"\n' "$sysroot" "$program" > "$work/run-program"
    chmod 0755 "$work/run-program"
    run_program="$work/run-program"
    strip_tool=aarch64-linux-gnu-strip
else
    run_program="$program"
    strip_tool=strip
fi

install -D -m 0755 "$binary" "$program"
install -D -m 0755 "$simulator" "$root/usr/libexec/glucose-gateway/glucose-gateway-simulator"
in_arch "$strip_tool --remove-section=.comment --remove-section=.note --strip-unneeded ../root/usr/bin/glucose-gateway"
in_arch "$strip_tool --remove-section=.comment --remove-section=.note --strip-unneeded ../root/usr/libexec/glucose-gateway/glucose-gateway-simulator"
# The point of the package: nothing from the toolchain at run time.
for packaged in usr/bin/glucose-gateway usr/libexec/glucose-gateway/glucose-gateway-simulator; do
    dynamic="$(readelf -d "$root/$packaged")"
    if grep -E 'NEEDED.*\[lib(swift|Foundation|dispatch|BlocksRuntime)' <<<"$dynamic"; then
        die "/$packaged links the Swift runtime dynamically: build it with --static-swift-stdlib"
    fi
    if grep -E '\((RPATH|RUNPATH)\)' <<<"$dynamic"; then
        die "/$packaged has a library search path: build it with --disable-local-rpath"
    fi
done
machine="$(readelf -h "$root/usr/bin/glucose-gateway" | awk -F: '/Machine/ {gsub(/^ +/, "", $2); print $2}')"
if ((cross)); then
    [[ "$machine" == AArch64 ]] || die "$binary is not built for $arch (machine: $machine)"
else
    [[ "$machine" == "$(readelf -h /bin/sh | awk -F: '/Machine/ {gsub(/^ +/, "", $2); print $2}')" ]] \
        || die "$binary is not built for $arch"
fi
# W^X and RELRO: the unit's MemoryDenyWriteExecute= kills a program with a segment that is both writable
# and executable at its start, and such a segment leaves the code writable everywhere else.
segments="$(readelf -lW "$root/usr/bin/glucose-gateway")"
if awk '$1 == "LOAD" && $(NF - 1) ~ /W/ && $(NF - 1) ~ /E/ { found = 1 } END { exit !found }' <<<"$segments"; then
    die "$binary has a segment that is both writable and executable"
fi
grep -q GNU_RELRO <<<"$segments" || die "$binary has no read-only relocation segment (RELRO)"
"$run_program" --help >/dev/null || die "$binary --help failed"
if ((cross)); then
    qemu-aarch64-static -L "$sysroot" "$root/usr/libexec/glucose-gateway/glucose-gateway-simulator" --help > /dev/null
else
    "$root/usr/libexec/glucose-gateway/glucose-gateway-simulator" --help > /dev/null
fi || die "$simulator --help failed"

# 3. System files, generated from config/ and udev/ with the package's paths, so changes there (unit
#    hardening, new rules) reach the package as they are. Only paths and the "installed as" comments change.
debian_paths() {
    sed -e 's|/usr/local/bin/glucose-gateway|/usr/bin/glucose-gateway|g' \
        -e 's|/usr/local/share/doc/glucose-gateway|/usr/share/doc/glucose-gateway|g' \
        -e 's|/etc/systemd/system/glucose-gateway.service|/usr/lib/systemd/system/glucose-gateway.service|g' \
        -e 's|/etc/udev/rules.d/90-glucose-gateway.rules|/usr/lib/udev/rules.d/90-glucose-gateway.rules|g' \
        -e 's|/etc/dbus-1/system.d/glucose-gateway.conf|/usr/share/dbus-1/system.d/glucose-gateway.conf|g' \
        -e 's|/etc/sysusers.d/glucose-gateway.conf|/usr/lib/sysusers.d/glucose-gateway.conf|g' \
        -e 's|by scripts/install\.sh|by the glucose-gateway package|g' \
        "$@"
}
put_generated() { # SOURCE DESTINATION [sed expressions...]
    local source="$1" destination="$root$2"
    shift 2
    install -d -m 0755 "$(dirname "$destination")"
    debian_paths "$@" "$here/$source" > "$destination"
    chmod 0644 "$destination"
    if grep -n '/usr/local' "$destination"; then
        die "$source names /usr/local after the path change (above): teach debian_paths the new path"
    fi
}
put_generated config/glucose-gateway.service /usr/lib/systemd/system/glucose-gateway.service \
    -e 's|^Documentation=.*|Documentation=man:glucose-gateway(1) file:///usr/share/doc/glucose-gateway/README.md.gz|'
grep -qx 'ExecStart=/usr/bin/glucose-gateway .*' "$root/usr/lib/systemd/system/glucose-gateway.service" \
    || die "the unit's ExecStart does not start /usr/bin/glucose-gateway"
put_generated udev/90-glucose-gateway.rules /usr/lib/udev/rules.d/90-glucose-gateway.rules
put_generated config/glucose-gateway-dbus.conf /usr/share/dbus-1/system.d/glucose-gateway.conf
put_generated config/glucose-gateway.sysusers /usr/lib/sysusers.d/glucose-gateway.conf
put_generated config/glucose-gateway.tmpfiles /usr/lib/tmpfiles.d/glucose-gateway.conf
# The config may hold an API secret inline: readable by root and the service group only (postinst
# gives the directory and the file the group glucose-gateway).
install -d -m 0750 "$root/etc/glucose-gateway"
install -m 0640 "$here/config/glucose-gateway.toml" "$root/etc/glucose-gateway/glucose-gateway.toml"

# 4. Documentation: the manual page and the completion come from the binary being packaged.
date_rfc="$(date -u -R -d "@$SOURCE_DATE_EPOCH")"
date_day="$(date -u +%Y-%m-%d -d "@$SOURCE_DATE_EPOCH")"
install -d -m 0755 "$root/usr/share/man/man1" "$root/usr/share/bash-completion/completions" \
    "$root/usr/share/doc/glucose-gateway" "$root/usr/share/lintian/overrides"
python3 "$here/packaging/gen-docs.py" man "$run_program" "$version" "$date_day" > "$work/glucose-gateway.1"
gzip -9n < "$work/glucose-gateway.1" > "$root/usr/share/man/man1/glucose-gateway.1.gz"
python3 "$here/packaging/gen-docs.py" completion "$run_program" > "$root/usr/share/bash-completion/completions/glucose-gateway"
bash -n "$root/usr/share/bash-completion/completions/glucose-gateway" || die "the generated completion is not valid bash"
gzip -9n < "$here/README.md" > "$root/usr/share/doc/glucose-gateway/README.md.gz"
# The pages an installer needs beside the README (the developers' pages stay in the source tree).
install -d -m 0755 "$root/usr/share/doc/glucose-gateway/docs"
for page in install configuration meters uploads unattended; do
    gzip -9n < "$here/docs/$page.md" > "$root/usr/share/doc/glucose-gateway/docs/$page.md.gz"
done
install -m 0644 "$here/packaging/deb/copyright" "$root/usr/share/doc/glucose-gateway/copyright"
install -m 0644 "$here/packaging/deb/lintian-overrides" "$root/usr/share/lintian/overrides/glucose-gateway"
cat > "$work/src/debian/changelog" <<EOF
glucose-gateway ($version) stable; urgency=medium

  * Package of glucose-gateway $version, built from its source tree.

 -- $maintainer  $date_rfc
EOF
gzip -9n < "$work/src/debian/changelog" > "$root/usr/share/doc/glucose-gateway/changelog.gz"
chmod 0644 "$root"/usr/share/man/man1/* "$root"/usr/share/bash-completion/completions/* "$root"/usr/share/doc/glucose-gateway/docs/*
find "$root"/usr/share/doc/glucose-gateway -maxdepth 1 -type f -exec chmod 0644 {} +

# 5. Control data: dependencies from the binary's NEEDED libraries (dpkg-shlibdeps), the installed size
#    and the fields from packaging/deb/control (dpkg-gencontrol), the maintainer scripts and conffiles.
sed "s|@MAINTAINER@|$maintainer|" "$here/packaging/deb/control" > "$work/src/debian/control"
install -d -m 0755 "$root/DEBIAN"
in_arch "dpkg-shlibdeps -Tdebian/substvars ../root/usr/bin/glucose-gateway ../root/usr/libexec/glucose-gateway/glucose-gateway-simulator"
# Packed relative relocations need a loader that knows them (the GLIBC_ABI_DT_RELR version, glibc 2.36),
# a version without symbols that dpkg-shlibdeps does not count.
if readelf -V "$root/usr/bin/glucose-gateway" | grep -q 'GLIBC_ABI_DT_RELR'; then
    libc="$(sed -nE 's/^shlibs:Depends=.*libc6 \(>= ([^)]+)\).*/\1/p' "$work/src/debian/substvars")"
    if [[ -z "$libc" ]] || dpkg --compare-versions "$libc" lt 2.36; then
        [[ -n "$libc" ]] || die "dpkg-shlibdeps found no libc6 dependency"
        sed -i -E 's/libc6 \(>= [^)]+\)/libc6 (>= 2.36)/' "$work/src/debian/substvars"
    fi
fi
in_arch "dpkg-gencontrol -pglucose-gateway -P../root -Tdebian/substvars -fdebian/files"
for script in postinst prerm postrm; do
    install -m 0755 "$here/packaging/deb/$script" "$root/DEBIAN/$script"
done
echo /etc/glucose-gateway/glucose-gateway.toml > "$root/DEBIAN/conffiles"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum > DEBIAN/md5sums)
chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/conffiles" "$root/DEBIAN/md5sums"

mkdir -p "$output"
deb="$(cd "$output" && pwd)/glucose-gateway_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
say "built $deb ($(du -k "$deb" | cut -f1) KiB)"
dpkg-deb --field "$deb" Depends Recommends Installed-Size | sed 's/^/package-deb.sh:   /'

# 6. lintian: errors fail the build; warnings and notes are printed and kept beside the package.
if ((run_lintian)); then
    report="${deb%.deb}.lintian.txt"
    set +e
    lintian --display-info --pedantic --fail-on error "$deb" > "$report" 2>&1
    status=$?
    set -e
    if [[ -s "$report" ]]; then sed 's/^/lintian: /' "$report"; else say "lintian: no tags"; fi
    ((status == 0)) || die "lintian reports errors (above)"
fi
