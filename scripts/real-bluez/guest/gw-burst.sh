# Gateway VM of the burst scenario: one report of 300 records, each with its measurement context, through
# bluetoothd's AcquireNotify sockets (one for the measurements, one for the contexts): every record once,
# with its value and its own context, and no record the meter counted went missing.
source "$RB_LIBDIR/guest/gw-lib.sh"
gw_wait_meter
gw_pair "pair" 123456 0
rb_step "sync (--verbose)" 0 gw --verbose sync "$METER" --wait 20
rb_expect_eq "sync reports every record as new" "$METER: 300 new readings" "$(grep -a "^$METER:" <<< "$RB_OUTPUT")"
rb_check "the measurements came through an AcquireNotify socket" grep -q "0x2a18 of $METER notifies through an acquired socket" <<< "$RB_OUTPUT"
rb_check "the contexts came through an AcquireNotify socket" grep -q "0x2a34 of $METER notifies through an acquired socket" <<< "$RB_OUTPUT"
rb_check "no announced record went missing" bash -c '! grep -q "did not arrive" <<< "$1"' _ "$RB_OUTPUT"
rb_check "no context was left without its record" bash -c '! grep -q "without a matching measurement" <<< "$1"' _ "$RB_OUTPUT"
gw_readings_json
# The simulator's generated series: values cycle through ten, meals through five (MeterSeries.records).
rb_check "records 1-300 once each, each with its value and its own context" /usr/bin/python3 - "$GW_DIR/readings.json" <<'PY'
import json, sys
values = [96, 142, 118, 187, 104, 131, 88, 163, 112, 149]
readings = json.load(open(sys.argv[1]))
bad = []
if sorted(r["sequence"] for r in readings) != list(range(1, 301)):
    bad.append("sequences are not 1-300 once each")
for r in readings:
    i = r["sequence"] - 1
    if r.get("mgdl") is None or abs(float(r["mgdl"]) - values[i % 10]) > 1e-9:
        bad.append("record %d: %s mg/dL, want %d" % (r["sequence"], r.get("mgdl"), values[i % 10]))
    if (r.get("context") or {}).get("meal") != 1 + i % 5:
        bad.append("record %d: context %s, want meal %d" % (r["sequence"], r.get("context"), 1 + i % 5))
print("\n".join(bad[:20]))
sys.exit(1 if bad else 0)
PY
rb_done
