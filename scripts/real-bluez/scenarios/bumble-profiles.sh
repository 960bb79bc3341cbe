# rb-about: the simulator's meter profiles (RB_PROFILES, default contour-next-one accu-chek-guide) played by the Bumble meter: pair with each one's PIN, sync every record exactly (values, times, exclusions, the clock), a second sync finds nothing new
# rb-topology: one VM, no btvirt: Bumble's emulated controller is the kernel's hci0 (/dev/vhci), linked to one emulated controller per meter
# rb-ci: no
# rb-releases: bookworm
# rb-timeout: 480
# Every built-in profile but caresens loads (its malformed records and i-SENS vendor clock are not played
# by the Bumble meter). Not in CI: the profiles scenario covers the same checks on the BlueZ meter.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$RB_LIBDIR/bumble.sh"
rb_bumble_vm "$RB_LIBDIR/guest/gw-bumble-profiles.sh"
