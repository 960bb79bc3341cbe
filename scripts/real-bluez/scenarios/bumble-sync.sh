# rb-about: a meter on another host stack (Bumble, LE Secure Connections passkey entry): scan, a wrong PIN refused and the right one bonds, sync stores every record exactly once, a second sync is incremental
# rb-topology: one VM, no btvirt: Bumble's emulated controller is the kernel's hci0 (/dev/vhci), linked to the meter's own emulated controller; ATT MTU 23, no EATT
# rb-ci: no
# rb-releases: bookworm
# rb-timeout: 420
# Not in the CI subset: bumble-pairing scans, pairs with a wrong then the right PIN and syncs twice
# (incrementally) on the same stack; this one adds LE Secure Connections as the method and the MTU check.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$RB_LIBDIR/bumble.sh"
rb_bumble_vm "$RB_LIBDIR/guest/gw-bumble-sync.sh"
