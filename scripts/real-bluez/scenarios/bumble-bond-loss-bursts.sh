# rb-about: as bumble-daemon, but the meter forgets the bond while it keeps advertising in bursts: the daemon must still find "re-pair needed"
# rb-topology: one VM, no btvirt: Bumble's emulated controller is the kernel's hci0 (/dev/vhci), linked to the meter's own emulated controller
# rb-ci: no
# rb-releases: bookworm
# rb-timeout: 420
# Fails today: the key refusals are interleaved with connection attempts that end otherwise (the meter's
# pause: le-connection-abort-by-local, a Connect with no reply), so "refused 3 times in a row" never
# comes. Not in CI until the gateway counts refusals across those.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$RB_LIBDIR/bumble.sh"
rb_bumble_vm "$RB_LIBDIR/guest/gw-bumble-daemon.sh" --env RB_BOND_LOSS_IN_BURSTS=1
