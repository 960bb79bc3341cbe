# Gateway VM of the link scenario: LE discovery must report the meter VM's controller.
source "$RB_LIBDIR/guest-lib.sh"
meter="$(rb_await advertising 60)"
rb_note "meter controller $meter"
rb_step "btmgmt find -l" any timeout 15 script -qc "btmgmt find -l" /dev/null
rb_check "the meter's controller was found" grep -q "dev_found: $meter type LE" <<< "$RB_OUTPUT"
rb_done
