# Gateway VM of the pair scenario: scan, wrong PIN, right PIN, bond checks, unpair, pair again.
source "$RB_LIBDIR/guest/gw-lib.sh"
gw_wait_meter
rb_step "scan" 0 gw scan --timeout 8 --json
rb_check "scan lists the meter" grep -q "\"address\": \"$METER\"" <<< "$RB_OUTPUT"
gw_pair "pair with a wrong PIN" 111111 1
rb_check "the wrong PIN is reported as such" grep -qi "wrong PIN" <<< "$RB_OUTPUT"
rb_step "meters after the wrong PIN" 0 gw meters --json
rb_expect_eq "no meter stored after the wrong PIN" "[]" "$(tr -d ' \n' <<< "$RB_OUTPUT")"
gw_pair "pair with the right PIN" 123456 0
rb_step "meters" 0 gw meters --json
rb_check "the meter is stored with its zone" grep -q '"time_zone": "Europe/Berlin"' <<< "$RB_OUTPUT"
rb_check "the meter's identity was read" grep -q '"model": "GlucoSim 1"' <<< "$RB_OUTPUT"
rb_step "bluetoothctl info" any bluetoothctl info "$METER"
rb_check "BlueZ holds a bond" grep -q "Bonded: yes" <<< "$RB_OUTPUT"
rb_step "unpair" 0 gw unpair "$METER"
rb_step "meters after unpair" 0 gw meters --json
rb_expect_eq "no meter stored after unpair" "[]" "$(tr -d ' \n' <<< "$RB_OUTPUT")"
rb_step "bluetoothctl info after unpair" any bluetoothctl info "$METER"
rb_check "the bond is gone from BlueZ" bash -c '! grep -q "Bonded: yes" <<< "$1"' _ "$RB_OUTPUT"
gw_pair "pair again" 123456 0
rb_step "sync after pairing again" 0 gw sync "$METER" --wait 20
gw_check_readings "the meter's records arrive after the new pairing"
rb_done
