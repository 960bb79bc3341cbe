# rb-about: meter profiles on the real stack: per profile pair, sync (every record exactly once, exact values and times, the clock skew), meters set-clock, an incremental second sync (the clock now right)
# rb-topology: two VMs: own kernel + bluetoothd each; the meter VM plays the profiles one after another
# rb-ci: no
# Not in the CI subset: two VMs plus about 20-25 s per meter (pair, two syncs, unpair) took 57-66 s for
# the two default profiles on an otherwise idle 2-core machine and 91-106 s while other builds ran, at or
# above the minute a CI scenario may add; in CI the stand-in system test (test_meter_profiles.py) covers
# every profile, and pair/unprivileged the same real-stack flow for the spec-following meter file.
# RB_PROFILES (default "contour-next-one accu-chek-guide"): the meters to play, in order; "file:NAME" plays
# meters/NAME.json instead of a profile.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
rb_two_vms "$RB_LIBDIR/guest/meter-profiles.sh" "$RB_LIBDIR/guest/gw-profiles.sh" \
    --env "RB_PROFILES=${RB_PROFILES:-contour-next-one accu-chek-guide}"
