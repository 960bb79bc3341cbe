# Gateway VM of the bond-loss scenario: pair and sync; the meter forgets the bond (the gateway's
# bluetoothd keeps its keys); the next sync and the daemon must show "re-pair needed", leave the meter
# alone, and name the fix; pair makes the meter work again. dbus-monitor records what bluetoothd said.
source "$RB_LIBDIR/guest/gw-lib.sh"
gw_wait_meter
gw_pair "pair" 123456 0
rb_step "sync" 0 gw sync "$METER" --wait 20
gw_check_readings "all 5 records stored once"
own="$(bluetoothctl list | awk '/^Controller/ {print $2; exit}')"
rb_signal forget-bond "$own"
rb_await bond-forgotten 60 > /dev/null || rb_check "the meter forgot the bond" false
dbus-monitor --system "sender='org.bluez'" "type='error'" "type='method_call',destination='org.bluez'" \
    > "$RB_OUT/dbus-monitor.txt" 2>&1 &
mon=$!
sleep 0.5
rb_step "sync after the meter forgot the bond" 69 gw sync "$METER" --wait 20
rb_check "sync names the fix" grep -q "glucose-gateway pair $METER" <<< "$RB_OUTPUT"
rb_step "bluetoothctl info after the failed sync" any bluetoothctl info "$METER"
rb_step "status --json" 0 gw status --json
rb_check "status shows re-pair needed" grep -q '"state": "re-pair-needed"' <<< "$RB_OUTPUT"
rb_step "status" 0 gw status
rb_check "status text says re-pair needed" grep -q "re-pair needed" <<< "$RB_OUTPUT"
gw_daemon_start
sleep 25
connects="$(grep -a -c "org.bluez.Device1.*Connect\|member=Connect$" "$RB_OUT/dbus-monitor.txt")"
rb_note "Connect calls seen so far: $connects"
mark="$(grep -a -c "member=Connect$" "$RB_OUT/dbus-monitor.txt")"
sleep 15
after="$(grep -a -c "member=Connect$" "$RB_OUT/dbus-monitor.txt")"
rb_expect_eq "the daemon does not connect to a meter that needs re-pairing" "$mark" "$after"
rb_step "status --json while the daemon runs" 0 gw status --json
rb_check "the daemon's status shows re-pair needed" grep -q '"state": "re-pair-needed"' <<< "$RB_OUTPUT"
gw_daemon_stop
gw_pair "pair again" 123456 0
rb_step "status --json after pairing again" 0 gw status --json
rb_check "re-pair needed is gone" bash -c '! grep -q "re-pair-needed" <<< "$1"' _ "$RB_OUTPUT"
rb_step "sync after pairing again" 0 gw sync "$METER" --wait 20
gw_check_incremental "the sync after pairing again finds nothing new"
gw_check_readings "still exactly the 5 records"
kill "$mon" 2> /dev/null
echo "--- dbus-monitor (org.bluez signals, errors, calls to org.bluez)"; cat "$RB_OUT/dbus-monitor.txt"
echo "--- bluetoothd (gateway) log, tail"; tail -n 150 "$RB_OUT/bluetoothd.log"
rb_done
