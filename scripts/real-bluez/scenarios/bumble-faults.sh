# rb-about: the Bumble meter drops the link mid-download, answers the report with an RACP error code, disconnects right after the RACP response
# rb-topology: one VM, no btvirt: Bumble's emulated controller is the kernel's hci0 (/dev/vhci), linked to the meters' own emulated controllers
# rb-ci: yes
# rb-releases: bookworm
# rb-timeout: 420
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$RB_LIBDIR/bumble.sh"
rb_bumble_vm "$RB_LIBDIR/guest/gw-bumble-faults.sh"
