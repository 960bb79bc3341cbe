# Meter VM, with RB_METER_FORGET=1 (sourced by meter.sh, in the background): when the gateway VM raises
# flag forget-bond (its adapter address), the meter's bluetoothd removes that device with its keys, as a
# meter reset or paired elsewhere does; then flag bond-forgotten.
gateway="$(rb_await forget-bond 240)" || exit 0
rb_note "forgetting the bond with $gateway"
bluetoothctl info "$gateway" | sed 's/^/    /'
bluetoothctl remove "$gateway"
rb_note "bluetoothctl remove exit $?"
rb_signal bond-forgotten "$gateway"
