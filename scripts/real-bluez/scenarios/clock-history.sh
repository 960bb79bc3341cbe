# rb-about: the meter's clock history on the real stack: a DST-unaware meter (UTC+2 all year) synced weekly from three weeks before the autumn switch to three after, every reading exact; the clock set 40 min back (time running backwards) or forward (no step) between syncs: exact, or time-uncertain and never uploaded; uploads checked on a loopback Nightscout double
# rb-topology: one VM, no btvirt: the Bumble meter and the gateway on the one guest clock, moved to each sync's time with date -s
# rb-ci: yes
# rb-releases: bookworm
# rb-timeout: 420
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
source "$RB_LIBDIR/bumble.sh"
rb_bumble_vm "$RB_LIBDIR/guest/gw-bumble-clock.sh"
