# rb-about: the daemon with the Bumble meter advertising in bursts downloads every record; the meter forgets the bond: re-pair needed, sync names the fix, pair again
# rb-topology: one VM, no btvirt: Bumble's emulated controller is the kernel's hci0 (/dev/vhci), linked to the meters' own emulated controllers
# rb-ci: no
# rb-releases: bookworm
# rb-timeout: 420
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$RB_LIBDIR/bumble.sh"
rb_bumble_vm "$RB_LIBDIR/guest/gw-bumble-daemon.sh"
