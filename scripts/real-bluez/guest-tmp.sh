# Sourced by a VM's PID 1. The guest gets its own /tmp (a tmpfs), which hides the host's /tmp on the
# shared root; a tree under test or a gateway binary that lives under the host's /tmp (a clone in /tmp,
# as CI may make) stays reachable at its own path by a bind mount of the host's copy.
#
#   rb_private_tmp PATH...   mounts the tmpfs; every PATH under /tmp stays the host's
rb_private_tmp() {
    mkdir -p /run/host-tmp
    # Recursively: on a release root the tree under test may be bound below /tmp already.
    mount --rbind /tmp /run/host-tmp
    mount -t tmpfs -o mode=1777 tmpfs /tmp
    local keep
    for keep in "$@"; do
        case "$keep" in
            /tmp/?*)
                # Already reachable through an earlier PATH (the binary inside the tree), or nothing to keep.
                [[ -e $keep ]] && continue
                [[ -e "/run/host-tmp/${keep#/tmp/}" ]] || continue
                if [[ -d "/run/host-tmp/${keep#/tmp/}" ]]; then mkdir -p "$keep"; else mkdir -p "$(dirname "$keep")"; touch "$keep"; fi
                mount --bind "/run/host-tmp/${keep#/tmp/}" "$keep"
                ;;
        esac
    done
}
