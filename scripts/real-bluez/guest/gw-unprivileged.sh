# Gateway VM of the unprivileged scenario: the gateway runs as the system user glucose-gateway (group
# bluetooth) on a system whose bluetooth.conf lets only root call org.bluez (as hardened images do);
# the project's D-Bus policy config/glucose-gateway-dbus.conf is what lets it in. The core flow then
# runs as that user: scan, wrong and right PIN, sync with exact values, incremental sync, unpair and
# pair again.
export RB_GW_USER=glucose-gateway RB_GW_DB=/var/lib/glucose-gateway/gateway.sqlite3
source "$RB_LIBDIR/guest/gw-lib.sh"
useradd --system --no-create-home --shell /usr/sbin/nologin --groups bluetooth glucose-gateway
install -d -m 0700 -o glucose-gateway -g glucose-gateway /var/lib/glucose-gateway
chmod 0755 "$GW_DIR"
# bluetooth.conf with only its root policy: neither the bluetooth group nor everyone may call BlueZ.
# BlueZ 5.66 (bookworm) installs it in /etc/dbus-1/system.d, 5.82 (trixie) in /usr/share/dbus-1/system.d
# (with a default policy that lets everyone call org.bluez): whichever is there is cut down.
policies=(/etc/dbus-1/system.d/bluetooth.conf /usr/share/dbus-1/system.d/bluetooth.conf)
/usr/bin/python3 - "${policies[@]}" <<'PY'
import os, re, sys
found = [p for p in sys.argv[1:] if os.path.exists(p)]
if not found:
    sys.exit("no bluetooth.conf")
for path in found:
    text = open(path).read()
    text = re.sub(r'<policy (group="bluetooth"|context="default")>.*?</policy>', '', text, flags=re.S)
    open(path, "w").write(text)
    print("root-only policy:", path)
PY
rb_check "BlueZ's D-Bus policy cut down to root" test $? = 0
reload() {
    dbus-send --system --print-reply --dest=org.freedesktop.DBus / org.freedesktop.DBus.ReloadConfig > /dev/null
}
rb_step "reload the bus policy (root-only bluetooth.conf)" 0 reload
gw_wait_meter
rb_step "scan as glucose-gateway without the gateway's policy" any gw scan --timeout 3
rb_check "BlueZ refuses the unprivileged user without the policy" test "$RB_RC" != 0
rb_check "the refusal is the bus policy's" grep -q "AccessDenied\|not allowed\|denied" <<< "$RB_OUTPUT"
rb_step "install the project's D-Bus policy" 0 install -D -m 0644 "$RB_REPO/config/glucose-gateway-dbus.conf" /etc/dbus-1/system.d/glucose-gateway.conf
rb_step "reload the bus policy" 0 reload
rb_step "scan as glucose-gateway" 0 gw scan --timeout 8 --json
rb_check "scan lists the meter" grep -q "\"address\": \"$METER\"" <<< "$RB_OUTPUT"
gw_pair_wrong_then_right
rb_step "sync" 0 gw sync "$METER" --wait 20
rb_expect_eq "sync reports every record as new" "$METER: 5 new readings" "$(grep -a "^$METER:" <<< "$RB_OUTPUT")"
gw_check_readings "all 5 records stored once, exact values and times"
rb_step "second sync" 0 gw sync --wait 20
gw_check_incremental "the second sync finds nothing new"
gw_check_readings "still exactly the 5 records"
rb_expect_eq "the database belongs to the service user, mode 0600" "glucose-gateway 600" "$(stat -c '%U %a' "$RB_GW_DB")"
# Unpair and pair again, as the service user: the bond goes, the readings stay, and a sync after the new
# pairing stores nothing twice.
gw_unpair_and_pair_again
rb_step "sync after pairing again" 0 gw sync "$METER" --wait 20
gw_check_readings "after the new pairing still exactly the 5 records, each once"
rb_done
