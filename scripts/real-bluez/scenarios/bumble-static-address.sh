# rb-about: a gateway adapter with no public address (static random): pair, sync, and the daemon downloads from the bonded Bumble meter
# rb-topology: one VM, no btvirt: Bumble's emulated controller is the kernel's hci0 (/dev/vhci), linked to the meters' own emulated controllers
# rb-ci: no
# rb-releases: bookworm
# rb-timeout: 420
# The gateway stops its own discovery while it connects, so the link comes from the identity address.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$RB_LIBDIR/bumble.sh"
rb_bumble_vm "$RB_LIBDIR/guest/gw-bumble-static-address.sh"
