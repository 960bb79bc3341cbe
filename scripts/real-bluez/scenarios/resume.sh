# rb-about: the meter drops the link mid-download (after 2 measurements); the next sync resumes, all records exactly once
# rb-topology: two VMs: own kernel + bluetoothd each; the drop is the meter's bluetoothd disconnecting the real link
# rb-ci: yes
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
rb_two_vms "$RB_LIBDIR/guest/meter.sh" "$RB_LIBDIR/guest/gw-resume.sh" \
    --env 'RB_METER_EXTRA={"faults": {"dropLinkAfter": 2, "dropLinkTimes": 1}}'
