# rb-about: the core flow (scan, pair wrong/right PIN, sync, incremental sync, unpair, pair again, sync) as the unprivileged service user under the project's D-Bus policy, BlueZ closed to everyone else
# rb-topology: two VMs: own kernel + bluetoothd each; the gateway VM's bus policy is Debian's bluetooth.conf reduced to root plus config/glucose-gateway-dbus.conf
# rb-ci: yes
# rb-ci-releases: bookworm trixie
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
rb_two_vms "$RB_LIBDIR/guest/meter.sh" "$RB_LIBDIR/guest/gw-unprivileged.sh"
