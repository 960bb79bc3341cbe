#!/usr/bin/env bash
# Removes what scripts/install.sh installed: stops and disables the service, removes the binary, unit,
# udev rules, D-Bus policy, sysusers entry, documentation, /etc/glucose-gateway (config and secret files)
# and the system user. The readings database in /var/lib/glucose-gateway is kept unless --purge.
#
#   sudo scripts/uninstall.sh             keep /var/lib/glucose-gateway
#   sudo scripts/uninstall.sh --purge     remove it too
#   scripts/uninstall.sh --root DIR ...   remove the files under DIR only (see install.sh --root)
set -euo pipefail

root=""
purge=0
while (($#)); do
    case "$1" in
        --root) [[ $# -ge 2 ]] || { echo "uninstall.sh: --root needs a directory" >&2; exit 64; }; root="$2"; shift 2 ;;
        --root=*) root="${1#--root=}"; shift ;;
        --purge) purge=1; shift ;;
        -h|--help) sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "uninstall.sh: unknown option '$1' (see --help)" >&2; exit 64 ;;
    esac
done

live=1
if [[ -n "$root" ]]; then
    live=0
    [[ -d "$root" ]] || { echo "uninstall.sh: --root $root is not a directory" >&2; exit 64; }
    root="$(cd "$root" && pwd)"
elif [[ $(id -u) != 0 ]]; then
    echo "uninstall.sh: run as root (sudo scripts/uninstall.sh), or use --root DIR" >&2
    exit 77
fi

user=glucose-gateway
statedir=/var/lib/glucose-gateway
say() { echo "uninstall.sh: $*"; }

if ((live)) && command -v systemctl >/dev/null 2>&1; then
    systemctl disable --now glucose-gateway.service 2>/dev/null || true
fi

files=(
    /usr/local/bin/glucose-gateway
    /etc/systemd/system/glucose-gateway.service
    /etc/udev/rules.d/90-glucose-gateway.rules
    /etc/dbus-1/system.d/glucose-gateway.conf
    /etc/sysusers.d/glucose-gateway.conf
)
for f in "${files[@]}"; do
    if [[ -e "$root$f" || -L "$root$f" ]]; then
        rm -f -- "$root$f"
        say "removed $f"
    fi
done
# Directories that belong to the gateway alone.
for d in /usr/local/share/doc/glucose-gateway /etc/glucose-gateway /etc/systemd/system/glucose-gateway.service.d; do
    if [[ -d "$root$d" ]]; then
        rm -rf -- "$root$d"
        say "removed $d/"
    fi
done

if ((purge)); then
    if [[ -d "$root$statedir" ]]; then
        rm -rf -- "$root$statedir"
        say "removed $statedir/ (readings database)"
    fi
elif [[ -d "$root$statedir" ]]; then
    say "kept $statedir/ (readings database); remove it with --purge"
fi

if ((live)); then
    if getent passwd "$user" >/dev/null; then
        userdel "$user" 2>/dev/null || say "could not remove user $user"
    fi
    if getent group "$user" >/dev/null; then
        groupdel "$user" 2>/dev/null || true
    fi
    systemctl daemon-reload 2>/dev/null || true
    udevadm control --reload-rules 2>/dev/null || true
    systemctl reload dbus.service 2>/dev/null || true
fi
say "done"
