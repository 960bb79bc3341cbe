#!/usr/bin/env bash
# The gateway against a bleak-based Python peer, for a 1,000-record sync with upload to the loopback
# Nightscout double, measured in one run (see docs/performance.md, "How the gateway compares with a Python peer").
# Builds the benchmarks and the gateway the way the Debian package builds it (scripts/package-flags.sh:
# the Swift runtime linked in, immediate binding, packed relative relocations, ...), makes the test virtual environment with bleak if it is missing, then runs
#   glucose-gateway-bench sync-vs-peer --gateway <that gateway> "$@"
# e.g. scripts/bench/sync-vs-peer.sh --runs 7 --strace /tmp/sync.strace
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$here"
source scripts/install-deps.sh --test
export PATH="/opt/swift/usr/bin:$PATH"
build_dir="${GLUCOSE_GATEWAY_PACKAGE_BUILD:-$here/.build/package}"
source scripts/package-flags.sh
flags=("${package_flags[@]}")
swift build "${flags[@]}" >&2
gateway="$(swift build "${flags[@]}" --show-bin-path)/glucose-gateway"
swift build -c release --product glucose-gateway-bench >&2
# The meter simulator beside the benchmark (its speed is not measured).
swift build -c release --product glucose-gateway-simulator >&2
exec "$(swift build -c release --show-bin-path)/glucose-gateway-bench" sync-vs-peer --gateway "$gateway" "$@"
