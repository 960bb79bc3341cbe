# Gateway VM of the resume scenario: the meter drops the link after 2 measurements of the first download;
# the next sync resumes after what was stored, and in the end every record is stored exactly once.
source "$RB_LIBDIR/guest/gw-lib.sh"
gw_wait_meter
gw_pair "pair" 123456 0
rb_step "sync (the meter drops the link mid-download)" 1 gw sync "$METER" --wait 20
first="$(gw_count)"
rb_note "stored after the interrupted download: $first"
rb_check "the interrupted download kept what arrived, not everything (0 < $first < 5)" test "$first" -gt 0 -a "$first" -lt 5
rb_step "sync again (resumes)" 0 gw sync "$METER" --wait 20
rb_expect_eq "the resumed sync fetches exactly the rest" "$METER: $((5 - first)) new readings" "$(grep -a "^$METER:" <<< "$RB_OUTPUT")"
gw_check_readings "all 5 records stored exactly once, exact values and times"
rb_done
