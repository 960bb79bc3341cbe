# rb-about: scan lists two Bumble meters; legacy passkey entry (a wrong PIN refused, the right one bonds, reconnections encrypted with the meter's own key) and a meter that sends an SMP Security Request; on the Bumble meter
# rb-topology: one VM, no btvirt: Bumble's emulated controller is the kernel's hci0 (/dev/vhci), linked to the meters' own emulated controllers
# rb-ci: yes
# rb-releases: bookworm
# rb-timeout: 420
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$RB_LIBDIR/bumble.sh"
rb_bumble_vm "$RB_LIBDIR/guest/gw-bumble-pairing.sh"
