# Meter VM: `glucose-gateway-simulator --bluez` on this VM's controller with the meter file
# meters/${RB_METER:-base}.json (its "ADDRESS" replaced by the controller's address, RB_METER_EXTRA merged
# in), which imposes the meter's PIN through its own KeyboardOnly agent, plus the rotation advertisement
# (guest/meter_aid.py; RB_METER_AGENT=keypad adds meter_aid's own keypad agent instead). Announces the
# address as flag meter-ready, runs until the gateway VM is done.
source "$RB_LIBDIR/guest-lib.sh"
addr="$(bluetoothctl list | awk '/^Controller/ {print $2; exit}')"
/usr/bin/python3 - "$RB_LIBDIR/meters/${RB_METER:-base}.json" "$addr" "${RB_METER_EXTRA:-{\}}" > /tmp/meter.json <<'PY'
import json, sys
meter = json.load(open(sys.argv[1]))
meter["address"] = sys.argv[2]
meter.update(json.loads(sys.argv[3]))
print(json.dumps(meter))
PY
rb_note "meter file: $(cat /tmp/meter.json)"
# A meter's timed events (new records, advertising bursts) count from the simulator's start: when the
# gateway VM boots much later than this one (emulated arm64, installing the package first), the
# simulator starts once the gateway VM's controller is up, as it would with two VMs of one speed.
if [[ -n ${RB_METER_AWAIT_GATEWAY:-} ]]; then
    deadline=$((SECONDS + 300 * ${RB_SLOW:-1}))
    while [[ ! -f $RB_JOB/ready.$RB_METER_AWAIT_GATEWAY ]] && ((SECONDS < deadline)); do sleep 0.3; done
    rb_note "the gateway VM's controller is up"
fi
"$RB_SIMULATOR_BIN" --bluez --adapter hci0 --meter /tmp/meter.json > "$RB_OUT/simulator.log" 2>&1 &
sim=$!
deadline=$((SECONDS + 40))
while ((SECONDS < deadline)); do grep -q '^ready' "$RB_OUT/simulator.log" && break; kill -0 $sim 2> /dev/null || break; sleep 0.2; done
rb_check "the simulator (--bluez) registered (ready)" grep -q '^ready' "$RB_OUT/simulator.log"
aid=(--rotate)
[[ ${RB_METER_AGENT:-simulator} == keypad ]] && aid+=(--pin "$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["pin"])' /tmp/meter.json)")
/usr/bin/python3 "$RB_LIBDIR/guest/meter_aid.py" "${aid[@]}" > "$RB_OUT/meter_aid.log" 2>&1 &
aidpid=$!
deadline=$((SECONDS + 30))
while ((SECONDS < deadline)); do grep -q '^ready' "$RB_OUT/meter_aid.log" && break; sleep 0.2; done
rb_check "meter aid ready" grep -q '^ready' "$RB_OUT/meter_aid.log"
rb_signal meter-ready "$addr"
[[ -n ${RB_METER_FORGET:-} ]] && (source "$RB_LIBDIR/guest/meter-forget.sh") &
rb_guest_wait_gateway_done 280
rb_check "the simulator ran to the end" kill -0 $sim
kill $sim $aidpid 2> /dev/null
wait $sim
rb_note "simulator exit $?"
echo "--- simulator output"; cat "$RB_OUT/simulator.log"
echo "--- meter aid output"; cat "$RB_OUT/meter_aid.log"
rb_done
