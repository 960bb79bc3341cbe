# rb-about: Just Works without --pin, numeric comparison (refused without a terminal, --confirm), a passkey meter without --pin (exit 64), a meter that cancels, one that never answers; on the Bumble meter
# rb-topology: one VM, no btvirt: Bumble's emulated controller is the kernel's hci0 (/dev/vhci), linked to the meters' own emulated controllers
# rb-ci: no
# rb-releases: bookworm
# rb-timeout: 420
# Waits for the gateway's Just Works, numeric comparison and honest pairing failures: not in CI until then.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$RB_LIBDIR/bumble.sh"
rb_bumble_vm "$RB_LIBDIR/guest/gw-bumble-pairing-methods.sh"
