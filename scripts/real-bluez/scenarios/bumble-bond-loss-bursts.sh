# rb-about: as bumble-daemon, but the meter forgets the bond while it keeps advertising in bursts: the daemon must still find "re-pair needed"
# rb-topology: one VM, no btvirt: Bumble's emulated controller is the kernel's hci0 (/dev/vhci), linked to the meter's own emulated controller
# rb-ci: yes
# rb-releases: bookworm
# rb-timeout: 420
# The key refusals come between connection attempts that end otherwise (the meter's pause:
# le-connection-abort-by-local, a Connect with no reply); the daemon counts a session with any refusal.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$RB_LIBDIR/bumble.sh"
rb_bumble_vm "$RB_LIBDIR/guest/gw-bumble-daemon.sh" --env RB_BOND_LOSS_IN_BURSTS=1
