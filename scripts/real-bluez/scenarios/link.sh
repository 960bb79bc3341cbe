# rb-about: the two-VM air itself: the gateway VM's controller finds the meter VM's advertising controller
# rb-topology: two VMs (meter: btvirt server + its controller; gateway: one controller over virtio-serial)
# rb-ci: no
# rb-needs-gateway: no
# rb-releases: bookworm trixie arm64
# shellcheck source=../lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
rb_two_vms "$RB_LIBDIR/guest/link-meter.sh" "$RB_LIBDIR/guest/link-gateway.sh"
