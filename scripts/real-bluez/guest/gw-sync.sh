# Gateway VM of the sync scenario: a wrong PIN refused, the right one bonds; every record exactly once
# with exact values and times, then a second sync (the documented `sync --wait SECONDS` form, no
# ADDRESS) that is incremental.
source "$RB_LIBDIR/guest/gw-lib.sh"
gw_wait_meter
gw_pair_wrong_then_right
rb_step "sync (--verbose)" 0 gw --verbose sync "$METER" --wait 20
rb_expect_eq "sync reports every record as new" "$METER: 5 new readings" "$(grep -a "^$METER:" <<< "$RB_OUTPUT")"
# bluetoothd offers AcquireNotify on the characteristics that notify: the records came through its socket.
rb_check "the measurements came through an AcquireNotify socket" grep -q "0x2a18 of $METER notifies through an acquired socket" <<< "$RB_OUTPUT"
gw_check_readings "all 5 records stored once, exact values and times"
cp "$GW_DIR/readings.json" "$GW_DIR/readings-1.json"
rb_step "second sync (sync --wait 20, all meters)" 0 gw sync --wait 20
gw_check_incremental "the second sync finds nothing new"
gw_check_readings "still exactly the 5 records"
rb_check "the stored readings are untouched (same ids, received times)" cmp -s "$GW_DIR/readings-1.json" "$GW_DIR/readings.json"
rb_step "third sync (with ADDRESS)" 0 gw sync "$METER" --wait 20
gw_check_incremental "the third sync finds nothing new"
gw_check_readings "still exactly the 5 records after the third sync"
# bluetoothd's objects and interfaces after a download (connection closed, bond kept), kept with the run's
# artifacts: BlueZ versions are compared on this file.
/usr/bin/python3 "$RB_LIBDIR/guest/dump_objects.py" > "$RB_OUT/bluez-objects.txt" 2>&1
rb_note "bluetoothd $(/usr/libexec/bluetooth/bluetoothd -v): $(grep -c . "$RB_OUT/bluez-objects.txt") interface lines in bluez-objects.txt"
rb_step "status" 0 gw status --json
rb_check "status sees bluetoothd and the powered adapter" grep -q '"powered": true' <<< "$RB_OUTPUT"
rb_done
