#!/usr/bin/env bash
# Writes packaging/text-order.txt, the order in which the package links the gateway's hot code (see
# packaging/text-order.py and docs/performance.md, "How the gateway compares with a Python peer"). Builds the gateway
# as the package does (scripts/package-flags.sh, which writes a linker map), then runs it under valgrind's
# callgrind on a private bus with `glucose-gateway-simulator --standin` (1,000 records) and the loopback Nightscout
# double: `pair`, a `sync` with upload, `status` and `--help`. Every function that ran is listed, in its
# present order. Run it again when much of the code has changed: a stale list only packs less well (lld
# skips names it does not find). Installs valgrind from Debian if it is missing.
#
#   scripts/bench/text-order.sh            write packaging/text-order.txt
#   scripts/bench/text-order.sh --check    only print how many of the listed symbols the build still has
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$here"
check=0
[[ "${1:-}" == "--check" ]] && check=1
source scripts/install-deps.sh --test
export PATH="/opt/swift/usr/bin:$PATH"
if ! command -v valgrind >/dev/null; then
    sudo_cmd=()
    [[ $(id -u) != 0 ]] && sudo_cmd=(sudo)
    DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends valgrind >/dev/null
fi
build_dir="${GLUCOSE_GATEWAY_PACKAGE_BUILD:-$here/.build/package}"
source scripts/package-flags.sh
work="$(mktemp -d "${TMPDIR:-/tmp}/glucose-gateway-text-order.XXXXXX")"
pids=()
cleanup() { ((${#pids[@]})) && kill "${pids[@]}" 2>/dev/null; rm -rf -- "$work"; }
trap cleanup EXIT

swift build "${package_flags[@]}" >&2
gateway="$work/glucose-gateway"
cp "$release_dir/glucose-gateway" "$gateway"
# Valgrind 3.19 (Debian 12) gives up on the toolchain's DWARF 5; the symbol table is all callgrind needs here.
strip --strip-debug "$gateway"
cp "$build_dir/glucose-gateway.map" "$work/map"
if ((check)); then
    total=$(grep -c . packaging/text-order.txt)
    found=$(grep -cFxf <(awk 'NF >= 5 && $5 !~ /:\(/ {print $5}' "$work/map" | sort -u) packaging/text-order.txt || true)
    echo "text-order.sh: $found of the $total listed symbols are in the build"
    exit 0
fi

# The meter simulator, a release build of its own (it is not the program measured).
swift build -c release --product glucose-gateway-simulator >&2
simulator="$(swift build -c release --show-bin-path)/glucose-gateway-simulator"
sed "s|{socket}|$work/bus.sock|" Tests/TestSupport/private-bus.conf > "$work/bus.conf"
dbus-daemon --nofork --nopidfile --config-file="$work/bus.conf" & pids+=($!)
for _ in $(seq 50); do [[ -S "$work/bus.sock" ]] && break; sleep 0.1; done
export DBUS_SYSTEM_BUS_ADDRESS="unix:path=$work/bus.sock" TZ=UTC
address=C0:26:DA:0B:E4:02
"$simulator" --standin --address "$address" --name text-order --pin 123456 --records 1000 > "$work/meter.log" 2>&1 & pids+=($!)
secret=text-order-secret
.venv/bin/python SystemTests/fake_nightscout.py --delay-401 0 --secret "$secret" > "$work/nightscout.out" 2> "$work/nightscout.log" & pids+=($!)
for _ in $(seq 100); do [[ -s "$work/nightscout.out" ]] && break; sleep 0.1; done
port="$(python3 -c 'import json, sys; print(json.loads(open(sys.argv[1]).readline())["port"])' "$work/nightscout.out")"
printf '%s' "$secret" > "$work/secret"
chmod 600 "$work/secret"
cat > "$work/gateway.toml" <<EOT
[gateway]
database = "$work/gateway.sqlite3"
[nightscout]
url = "http://127.0.0.1:$port"
api_secret_file = "$work/secret"
EOT

profile() { # NAME ARGS...
    local name="$1"
    shift
    valgrind --tool=callgrind --callgrind-out-file="$work/$name.callgrind" --dump-instr=yes --dump-line=no \
        --compress-strings=no --compress-pos=no --demangle=no "$gateway" "$@" > "$work/$name.log" 2>&1 \
        || { cat "$work/$name.log" >&2; echo "text-order.sh: $name failed" >&2; exit 1; }
}
sleep 1
profile pair --config "$work/gateway.toml" pair "$address" --pin 123456
profile sync --config "$work/gateway.toml" sync
grep -q "1000 uploaded" "$work/sync.log" || { cat "$work/sync.log" >&2; echo "text-order.sh: the sync did not upload 1,000 readings" >&2; exit 1; }
profile status --config "$work/gateway.toml" status
profile help --help
python3 packaging/text-order.py "$work/map" "$gateway" "$work"/{sync,pair,status,help}.callgrind > packaging/text-order.txt
echo "text-order.sh: wrote packaging/text-order.txt ($(grep -c . packaging/text-order.txt) symbols)"
