# rb-about: a wrong PIN is refused and the right one bonds; sync downloads every record exactly once (exact values, times); a second sync is incremental (0 new, nothing re-stored)
# rb-topology: two VMs: own kernel + bluetoothd each (a meter and a gateway as in the field)
# rb-ci: yes
# rb-releases: bookworm trixie arm64
# rb-ci-releases: arm64
# In CI on arm64 only (the package installed with apt, pair and sync on the Pi's architecture): on
# bookworm and trixie unprivileged runs the same flow (scan, pair, sync, incremental sync) as the
# service user; this one adds a third sync and status, as root.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
rb_two_vms "$RB_LIBDIR/guest/meter.sh" "$RB_LIBDIR/guest/gw-sync.sh"
