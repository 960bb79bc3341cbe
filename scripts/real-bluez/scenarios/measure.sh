# rb-about: memory and instruction counts on the VM's architecture: peak RSS of --help, of a 1,000-record sync with an upload, of an idle daemon; callgrind's instruction count of the same sync (where valgrind is installed: the arm64 root)
# rb-topology: one VM, no Bluetooth (the stand-in on a private bus, a Nightscout double on the guest's loopback)
# rb-ci: no
# rb-releases: bookworm trixie arm64
# rb-needs-bluetooth: no
# rb-timeout: 1200
# RB_MEASURE_RECORDS (default 1000). TCG's wall times mean nothing; the counts and the memory do.
source "$(dirname "${BASH_SOURCE[0]}")/../lib.sh"
# callgrind of the 1,000-record sync alone takes minutes under TCG: the VM gets 1,100 s (times RB_SLOW).
rb_one_vm "$RB_LIBDIR/guest/measure.sh" --controllers 0 --mem 1536 --timeout "${RB_VM_TIMEOUT:-1100}" --env "RB_MEASURE_RECORDS=${RB_MEASURE_RECORDS:-1000}" --env "RB_SLOW=$RB_SLOW"
