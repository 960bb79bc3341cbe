# rb-about: the controller powered off/on (btmgmt) and removed/re-added (hci0 unregistered, same address back) while run is up: the daemon recovers
# rb-topology: two VMs: the gateway VM's controller is the vhci end of the virtio-serial air, so it can be removed and added back with the same address
# rb-ci: yes
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
rb_two_vms "$RB_LIBDIR/guest/meter.sh" "$RB_LIBDIR/guest/gw-controller.sh" \
    --env 'RB_METER_EXTRA={"newRecords": {"everySeconds": 20, "limit": 2, "mgdl": 120}}'
