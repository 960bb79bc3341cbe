# Gateway VM of the pair scenario: scan, wrong PIN, right PIN, bond checks, unpair, pair again.
source "$RB_LIBDIR/guest/gw-lib.sh"
gw_wait_meter
rb_step "scan" 0 gw scan --timeout 8 --json
rb_check "scan lists the meter" grep -q "\"address\": \"$METER\"" <<< "$RB_OUTPUT"
gw_pair_wrong_then_right
gw_unpair_and_pair_again
rb_step "sync after pairing again" 0 gw sync "$METER" --wait 20
gw_check_readings "the meter's records arrive after the new pairing"
rb_done
