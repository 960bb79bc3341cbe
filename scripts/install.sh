#!/usr/bin/env bash
# Installs glucose-gateway as a system service: builds the release binary (unless --binary is given),
# then installs the binary, the systemd unit, the udev rules, the D-Bus policy, the system user
# (systemd-sysusers) and an example config, and enables and starts the service.
#
#   sudo scripts/install.sh                 build in release and install on this machine
#   sudo scripts/install.sh --binary PATH   install an already built binary
#   scripts/install.sh --root DIR ...       install the files under DIR only (packaging and tests): no
#                                           user, no ownership changes, no systemctl or udevadm calls
#
# An existing /etc/glucose-gateway/glucose-gateway.toml is never overwritten. Undo with scripts/uninstall.sh.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

usage() {
    sed -n '2,12p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    echo "options: --root DIR, --binary PATH, --no-start, --help"
}

root=""
binary=""
start=1
while (($#)); do
    case "$1" in
        --root) [[ $# -ge 2 ]] || { echo "install.sh: --root needs a directory" >&2; exit 64; }; root="$2"; shift 2 ;;
        --root=*) root="${1#--root=}"; shift ;;
        --binary) [[ $# -ge 2 ]] || { echo "install.sh: --binary needs a path" >&2; exit 64; }; binary="$2"; shift 2 ;;
        --binary=*) binary="${1#--binary=}"; shift ;;
        --no-start) start=0; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "install.sh: unknown option '$1' (see --help)" >&2; exit 64 ;;
    esac
done

live=1
if [[ -n "$root" ]]; then
    live=0
    [[ -d "$root" ]] || { echo "install.sh: --root $root is not a directory" >&2; exit 64; }
    root="$(cd "$root" && pwd)"
elif [[ $(id -u) != 0 ]]; then
    echo "install.sh: run as root (sudo scripts/install.sh), or use --root DIR" >&2
    exit 77
fi

user=glucose-gateway
bindir=/usr/local/bin
docdir=/usr/local/share/doc/glucose-gateway
confdir=/etc/glucose-gateway
statedir=/var/lib/glucose-gateway

say() { echo "install.sh: $*"; }

find_swift() {
    local candidates=("$(command -v swift 2>/dev/null || true)" /opt/swift/usr/bin/swift /usr/share/swift/usr/bin/swift)
    if [[ -n "${SUDO_USER:-}" ]]; then
        local home
        home="$(getent passwd "$SUDO_USER" | cut -d: -f6)"
        candidates+=("$home/.local/share/swiftly/bin/swift")
    fi
    for c in "${candidates[@]}"; do
        [[ -n "$c" && -x "$c" ]] && { echo "$c"; return 0; }
    done
    return 1
}

# 1. The binary. Only the gateway: the meter simulator (glucose-gateway-simulator, a test double and the
#    demo's meter) stays in the build tree, where the demo (scripts/demo.sh, which needs the source
#    tree anyway) finds it beside the gateway; the service never runs it. The Debian package does ship
#    it, in /usr/libexec/glucose-gateway, for machines that have no source tree (see package-deb.sh).
if [[ -z "$binary" ]]; then
    if ((live)); then
        "$here/scripts/install-deps.sh"
    fi
    swift="$(find_swift)" || { echo "install.sh: no Swift toolchain found (see docs/install.md)" >&2; exit 69; }
    say "building the release binary with $swift (this takes a while on a Raspberry Pi)"
    build=("$swift" build -c release --product glucose-gateway --package-path "$here")
    if ((live)) && [[ -n "${SUDO_USER:-}" && "${SUDO_USER}" != root ]]; then
        # Build as the invoking user so .build/ stays theirs.
        runuser -u "$SUDO_USER" -- env PATH="$(dirname "$swift"):/usr/bin:/bin" "${build[@]}"
    else
        "${build[@]}"
    fi
    binary="$("$swift" build -c release --product glucose-gateway --package-path "$here" --show-bin-path)/glucose-gateway"
elif ((live)); then
    # A prebuilt binary still needs the C libraries it links and BlueZ.
    missing=()
    for p in libdbus-1-3 libsqlite3-0 libcurl4 bluez; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if ((${#missing[@]})); then
        say "installing ${missing[*]}"
        apt-get -o DPkg::Lock::Timeout=600 update -qq
        DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
fi
[[ -f "$binary" && -x "$binary" ]] || { echo "install.sh: $binary is not an executable file" >&2; exit 66; }

# 2. Files. install(1) creates missing parent directories (mode 0755).
put() { # MODE SOURCE DESTINATION
    install -D -m "$1" "$2" "$root$3"
    say "installed $3 (mode $1)"
}
put 0755 "$binary" "$bindir/glucose-gateway"
put 0644 "$here/config/glucose-gateway.service" /etc/systemd/system/glucose-gateway.service
put 0644 "$here/udev/90-glucose-gateway.rules" /etc/udev/rules.d/90-glucose-gateway.rules
put 0644 "$here/config/glucose-gateway-dbus.conf" /etc/dbus-1/system.d/glucose-gateway.conf
put 0644 "$here/config/glucose-gateway.sysusers" /etc/sysusers.d/glucose-gateway.conf
put 0644 "$here/README.md" "$docdir/README.md"
for page in install configuration meters uploads unattended; do
    put 0644 "$here/docs/$page.md" "$docdir/docs/$page.md"
done

# 3. The service user (group glucose-gateway, member of bluetooth).
if ((live)); then
    if command -v systemd-sysusers >/dev/null 2>&1; then
        systemd-sysusers /etc/sysusers.d/glucose-gateway.conf
    elif ! getent passwd "$user" >/dev/null; then
        getent group bluetooth >/dev/null || groupadd --system bluetooth
        useradd --system --user-group --home-dir "$statedir" --no-create-home --shell /usr/sbin/nologin \
            --groups bluetooth --comment "glucose-gateway daemon" "$user"
    fi
    getent passwd "$user" >/dev/null || { echo "install.sh: could not create user $user" >&2; exit 1; }
    id -nG "$user" | tr ' ' '\n' | grep -qx bluetooth || usermod -a -G bluetooth "$user"
    say "system user $user is in groups: $(id -nG "$user")"
fi

# 4. Config directory (root-owned, readable by the service group) and the example config.
install -d -m 0750 "$root$confdir"
if [[ -e "$root$confdir/glucose-gateway.toml" ]]; then
    say "kept the existing $confdir/glucose-gateway.toml"
else
    install -m 0640 "$here/config/glucose-gateway.toml" "$root$confdir/glucose-gateway.toml"
    say "installed $confdir/glucose-gateway.toml (mode 0640)"
fi
# 5. State directory for the database (the unit's StateDirectory= also keeps it so).
install -d -m 0700 "$root$statedir"
if ((live)); then
    chown root:"$user" "$confdir" "$confdir/glucose-gateway.toml"
    chown "$user":"$user" "$statedir"
fi

# 6. Tell the running system.
if ((live)); then
    systemctl daemon-reload
    udevadm control --reload-rules || true
    systemctl reload dbus.service 2>/dev/null || true
    systemctl enable glucose-gateway.service
    if ((start)); then
        systemctl restart glucose-gateway.service
        say "service started; see: systemctl status glucose-gateway"
    fi
    cat <<EOF

Next steps:
  1. Pair the meter (put it in pairing mode first; it shows a 6-digit PIN):
       sudo systemctl stop glucose-gateway
       sudo -u $user glucose-gateway scan
       sudo -u $user glucose-gateway pair <ADDRESS> --pin <PIN> --timezone <Area/City>
       sudo systemctl start glucose-gateway
  2. Set the upload destination in $confdir/glucose-gateway.toml, the secret in a file only the
     service user can read:
       sudo install -m 600 -o $user -g $user /dev/stdin $confdir/nightscout.secret
     then:  sudo glucose-gateway config check && sudo systemctl restart glucose-gateway
  3. Check:  sudo -u $user glucose-gateway status   and   journalctl -u glucose-gateway
EOF
else
    say "files installed under $root (no user, ownership or service changes with --root)"
fi
