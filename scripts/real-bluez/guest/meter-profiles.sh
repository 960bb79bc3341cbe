# Meter VM of the profiles scenario: plays each meter of RB_PROFILES in turn (a profile name:
# `glucose-gateway-simulator --bluez --profile NAME`; "file:NAME": the meter file meters/NAME.json) on this VM's
# controller, next to the rotation advertisement (guest/meter_aid.py, with the meter's name). Before each
# meter it writes the meter's own description (records, PIN, clock; guest/describe_meter.py) to the job
# directory as meter.N.json, announces "ADDRESS NAME" as flag meter-ready.N, and waits for gateway-done.N.
# A meter with a clock runs it 5 minutes fast in the gateway's meter zone; afterwards its log must show
# the one clock write of the gateway's meters set-clock.
source "$RB_LIBDIR/guest-lib.sh"
addr="$(bluetoothctl list | awk '/^Controller/ {print $2; exit}')"
i=0
for item in ${RB_PROFILES:-contour-next-one accu-chek-guide}; do
    i=$((i + 1))
    if [[ $item == file:* ]]; then
        name="${item#file:}"
        sed "s/\"ADDRESS\"/\"$addr\"/" "$RB_LIBDIR/meters/$name.json" > "/tmp/meter.$i.json"
        args=(--meter "/tmp/meter.$i.json")
    else
        name="$item"
        args=(--profile "$name")
    fi
    # A meter with a clock shows the local time of the gateway's meter zone (its offset now), 5 minutes
    # fast, as a meter set by hand in the field does; the gateway then sets it (meters set-clock).
    clock_kind="$(/usr/bin/python3 "$RB_LIBDIR/guest/describe_meter.py" "$RB_SIMULATOR_BIN" "${args[@]}" \
        | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin).get("clock", {}).get("kind", "none"))')"
    rb_note "$name: meter clock ${clock_kind:-unknown}"
    if [[ ${clock_kind:-none} != none ]]; then
        z="$(TZ=Europe/Berlin date +%z)"
        offset=$(( ${z:0:1}1 * (10#${z:1:2} * 60 + 10#${z:3:2}) ))
        args+=(--clock-skew 300 --clock-utc-offset "$offset")
    fi
    rb_step "$name: the meter's own description" 0 \
        bash -c '/usr/bin/python3 "$1" "$2" "${@:4}" > "$3"' _ "$RB_LIBDIR/guest/describe_meter.py" "$RB_SIMULATOR_BIN" \
        "$RB_JOB/meter.$i.json" "${args[@]}"
    # The rotation advertisement carries the meter's own name, as every advertisement of a real meter does
    # (the gateway's handling of a Fora TN'G goes by the name).
    meter_name="$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["name"])' "$RB_JOB/meter.$i.json")"
    /usr/bin/python3 "$RB_LIBDIR/guest/meter_aid.py" --rotate --name "$meter_name" > "$RB_OUT/meter_aid.$i.log" 2>&1 &
    aidpid=$!
    deadline=$((SECONDS + 30))
    while ((SECONDS < deadline)); do grep -q '^ready' "$RB_OUT/meter_aid.$i.log" && break; sleep 0.2; done
    rb_check "$name: meter aid ready" grep -q '^ready' "$RB_OUT/meter_aid.$i.log"
    log="$RB_OUT/simulator.$i.log"
    "$RB_SIMULATOR_BIN" --bluez --adapter hci0 "${args[@]}" > "$log" 2>&1 &
    sim=$!
    deadline=$((SECONDS + 40))
    while ((SECONDS < deadline)); do grep -q '^ready' "$log" && break; kill -0 $sim 2> /dev/null || break; sleep 0.2; done
    rb_check "$name: the simulator (--bluez) registered (ready)" grep -q '^ready' "$log"
    rb_signal "meter-ready.$i" "$addr $name"
    rb_await "gateway-done.$i" 200 > /dev/null
    rb_check "$name: the simulator ran to the end" kill -0 $sim
    if [[ ${clock_kind:-none} != none ]]; then
        # The meter's side of meters set-clock: one write that set the clock, which now shows the true
        # local time of its zone.
        set_lines="$(grep -a -c 'clock set to ' "$log")"
        rb_expect_eq "$name: the meter logged one clock write" 1 "$set_lines"
        now_off="$(grep -a -o -E 'clock is now off by -?[0-9]+ s' "$log" | head -n 1 | grep -o -E -- '-?[0-9]+')"
        rb_check "$name: the meter's clock is right after the write (off by ${now_off:-?} s)" \
            test -n "$now_off" -a "${now_off#-}" -le 5
    fi
    kill $sim $aidpid 2> /dev/null
    wait $sim
    rb_note "$name: simulator exit $?"
    wait $aidpid
    echo "--- $name: simulator output"; cat "$log"
    echo "--- $name: meter aid output"; cat "$RB_OUT/meter_aid.$i.log"
done
rb_guest_wait_gateway_done 60
rb_done
