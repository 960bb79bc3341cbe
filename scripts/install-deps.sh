#!/usr/bin/env bash
# Installs what glucose-gateway needs to build and run on Debian 12 or Raspberry Pi OS (Bookworm):
# the C libraries it links, the D-Bus daemon, and (with --test) a Python virtual environment with the
# outside software the test suite checks the gateway against. Idempotent: installs only what is missing.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
want_test=0
[[ "${1:-}" == "--test" ]] && want_test=1

# libmosquitto-dev: headers only (the library, libmosquitto1, is loaded at run time when [mqtt] is set).
packages=(libdbus-1-dev libsqlite3-dev libcurl4-openssl-dev libmosquitto-dev libmosquitto1 dbus-daemon pkg-config sqlite3 python3 python3-venv)
# mosquitto and mosquitto-clients: the real broker the MQTT tests publish to, and mosquitto_sub to read it back.
[[ $want_test == 1 ]] && packages+=(udev mosquitto mosquitto-clients)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "installing: ${missing[*]}" >&2
    sudo_cmd=()
    [[ $(id -u) != 0 ]] && sudo_cmd=(sudo)
    "${sudo_cmd[@]}" apt-get -o DPkg::Lock::Timeout=600 update -qq
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v swift >/dev/null 2>&1; then
    if [[ -x /opt/swift/usr/bin/swift ]]; then
        export PATH="/opt/swift/usr/bin:$PATH"
    else
        echo "error: no Swift toolchain found; install Swift 6 (see docs/install.md)" >&2
        exit 69
    fi
fi

if [[ $want_test == 1 ]]; then
    venv="$here/.venv"
    if [[ ! -x "$venv/bin/python" ]]; then
        python3 -m venv "$venv"
    fi
    if ! "$venv/bin/python" -c 'import bleak, bluezoo, fhir.resources, pytest, xdist' 2>/dev/null; then
        "$venv/bin/pip" install -q --disable-pip-version-check -r "$here/SystemTests/requirements.txt"
    fi
fi
