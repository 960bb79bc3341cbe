# rb-about: scan sees the meter; pair with a wrong PIN (exit 1), the right one (passkey entry), unpair, pair again, sync
# rb-topology: two VMs: own kernel + bluetoothd each, so each side has its own default agent (meter: KeyboardOnly answering the PIN)
# rb-ci: no
# rb-releases: bookworm trixie arm64
# Not in the CI subset: every step of it runs in the unprivileged scenario, as the service user.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
rb_two_vms "$RB_LIBDIR/guest/meter.sh" "$RB_LIBDIR/guest/gw-pair.sh"
