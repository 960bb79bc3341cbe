# shellcheck shell=bash
# The Bumble meter's side of the real-stack bed (source it after lib.sh). Bumble (Google's Bluetooth host
# stack in Python) comes from the machine's Python package index through pip, pinned, into a virtual
# environment cached under $RB_WORK; the VMs of the bookworm release see the host's root, so they run it
# from there unchanged (the guests have no network). Nothing fetched enters the repository.
#
#   rb_bumble_prepare      the cached environment (once; ~25 s); prints its python
#   rb_bumble_vm SCRIPT [rb_boot options]
#       one VM without btvirt: the guest script starts scripts/real-bluez/bumble/meter.py (guest/bumble-lib.sh),
#       whose emulated controller becomes the kernel's hci0 through /dev/vhci. RB_BUMBLE_PYTHON is set.

# The pinned version: meter.py reaches into the emulator's internals (its link and controller).
RB_BUMBLE_VERSION=0.0.236

rb_bumble_prepare() {
    local venv="$RB_WORK/bumble-$RB_BUMBLE_VERSION"
    if [[ ! -f $venv/.ready ]]; then
        # Debian's python3 (not a python on the PATH that the guests lack): the environment's
        # interpreter is a link to it, which the guest has at the same path.
        local py=/usr/bin/python3
        "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2> /dev/null || {
            rb_log "Bumble needs Python 3.11 or newer at $py"; return 1; }
        local lockfd
        exec {lockfd}> "$RB_WORK/.bumble.lock"
        flock "$lockfd"
        if [[ ! -f $venv/.ready ]]; then
            rb_log "installing Bumble $RB_BUMBLE_VERSION into $venv (once)"
            rm -rf "$venv"
            if ! { "$py" -m venv "$venv" && "$venv/bin/pip" install -q "bumble==$RB_BUMBLE_VERSION"; } \
                    > "$RB_WORK/bumble-install.log" 2>&1; then
                rb_log "installing Bumble failed (see $RB_WORK/bumble-install.log): $(tail -n 1 "$RB_WORK/bumble-install.log")"
                exec {lockfd}>&-
                return 1
            fi
            touch "$venv/.ready"
        fi
        exec {lockfd}>&-
    fi
    echo "$venv/bin/python"
}

rb_bumble_vm() {
    local script="$1"; shift
    rb_prepare || return $?
    if [[ -n ${RB_ROOT:-} ]]; then
        rb_log "the Bumble meter runs on the host's root (bookworm) only"
        return "$RB_SKIP"
    fi
    local py
    py="$(rb_bumble_prepare)" || return 1
    # Bumble's start (Python, its imports) takes ~18 s of an unloaded TCG guest: more room than the
    # default 300 s VM life for a scenario that may also restart things.
    rb_one_vm "$script" --controllers 0 --timeout "${RB_VM_TIMEOUT:-400}" --env "RB_BUMBLE_PYTHON=$py" "$@"
}
