# Gateway VM of the bond-loss scenario: pair and sync; the meter forgets the bond (the gateway's
# bluetoothd keeps its keys); the daemon must find "re-pair needed", alert once (on_meter_error), leave
# the meter alone; sync must name the fix; pair makes the meter work again. dbus-monitor records what
# bluetoothd said (kept in the job directory).
source "$RB_LIBDIR/guest/gw-lib.sh"
cat >> "$GW_DIR/gateway.toml" <<TOML
on_meter_error = ["/bin/sh", "-c", "echo \$GATEWAY_ERROR_CODE \$GATEWAY_METER >> $GW_DIR/meter-alerts.txt"]
TOML
gw_connects() { grep -a -c "member=Connect$" "$RB_OUT/dbus-monitor.txt"; }
gw_wait_meter
gw_pair "pair" 123456 0
rb_step "sync" 0 gw sync "$METER" --wait 20
gw_check_readings "all 5 records stored once"
dbus-monitor --system "sender='org.bluez'" "type='error'" "type='method_call',destination='org.bluez'" \
    > "$RB_OUT/dbus-monitor.txt" 2>&1 &
mon=$!
own="$(bluetoothctl list | awk '/^Controller/ {print $2; exit}')"
rb_signal forget-bond "$own"
rb_await bond-forgotten 60 > /dev/null || rb_check "the meter forgot the bond" false
gw_daemon_start
found=no
deadline=$((SECONDS + 90))
while ((SECONDS < deadline)); do
    grep -q '"state": "re-pair-needed"' <<< "$(gw status --json 2> /dev/null)" && { found=yes; break; }
    sleep 1
done
rb_expect_eq "the daemon finds the meter needs pairing again" yes "$found"
rb_step "bluetoothctl info (the gateway's bluetoothd keeps the key)" any bluetoothctl info "$METER"
rb_check "BlueZ still shows the bond" grep -q "Bonded: yes" <<< "$RB_OUTPUT"
mark="$(gw_connects)"
rb_note "Connect calls until re-pair needed: $mark"
sleep 20
rb_expect_eq "the daemon does not connect again to a meter that needs re-pairing" "$mark" "$(gw_connects)"
rb_step "status --json" 0 gw status --json
rb_check "status --json shows re-pair needed" grep -q '"state": "re-pair-needed"' <<< "$RB_OUTPUT"
rb_step "status" 0 gw status
rb_check "status names the fix" grep -q "^PROBLEM: meter $METER: re-pair needed.*glucose-gateway pair $METER" <<< "$RB_OUTPUT"
rb_expect_eq "on_meter_error ran once, with the meter's address" "2003 $METER" "$(cat "$GW_DIR/meter-alerts.txt" 2> /dev/null)"
gw_daemon_stop
rb_check "the daemon logged re-pair needed" grep -q "re-pair needed" "$GW_LOG"
rb_step "sync after the meter forgot the bond" 69 gw sync "$METER" --wait 20
rb_check "sync names the fix" grep -q "re-pair needed: .*glucose-gateway pair $METER" <<< "$RB_OUTPUT"
gw_pair "pair again" 123456 0
rb_step "status --json after pairing again" 0 gw status --json
rb_check "re-pair needed is gone" bash -c '! grep -q "re-pair-needed" <<< "$1"' _ "$RB_OUTPUT"
rb_step "sync after pairing again" 0 gw sync "$METER" --wait 20
gw_check_incremental "the sync after pairing again finds nothing new"
gw_check_readings "still exactly the 5 records"
kill "$mon" 2> /dev/null
rb_done
