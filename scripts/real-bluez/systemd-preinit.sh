#!/bin/bash
# PID 1 of the systemd scenario's VM before systemd (rb_boot --init, see lib.sh): prepares the overlay root
# (a boot target holding only what the scenario needs, the scenario script as a oneshot unit), then execs
# systemd, which stays PID 1.
#
#   systemd-preinit.sh SCRIPT [ARGS...]      (rb_boot --init-arg SCRIPT --init-arg ARG ...)
#
# SCRIPT runs as root under systemd once the boot target is reached, with RB_OUT, RB_JOB, RB_NAME and the
# variables of the job's VMNAME.env; its output goes to the console and the journal, its exit status to
# $RB_JOB/VMNAME.rc; then the machine powers off through systemd (every unit stopped first).
set -u
mount -t proc proc /proc 2>/dev/null
name="$(tr ' ' '\n' < /proc/cmdline | sed -n 's/^rb\.name=//p' | tail -n 1)"
job=/run/rbjob
script="${1:?systemd-preinit.sh SCRIPT [ARGS...]}"
shift
command="bash $(printf '%q' "$script")"
for a in "$@"; do command+=" $(printf '%q' "$a")"; done

{
    echo '#!/bin/bash'
    echo "source $job/$name.env"
    echo "export RB_NAME=$name RB_JOB=$job RB_OUT=$job/$name"
    echo 'mkdir -p "$RB_OUT"'
    echo "$command 2>&1 | tee -a /dev/console"
    echo 'rc=${PIPESTATUS[0]}'
    echo 'echo "RB-EXIT-CODE=$rc" > /dev/console'
    echo "echo \"\$rc\" > $job/$name.rc"
    echo 'sync'
} > /etc/rb-scenario.sh
chmod 755 /etc/rb-scenario.sh

# The host image may be a container image: its marker file would make systemd act as a container
# manager (no udev, no device units). The VM is a machine.
rm -f /.dockerenv /run/.containerenv

units=/etc/systemd/system
# Only what the scenario needs: no getty, timers, the host image's other services, nor the boot-time
# walks over the 9p root (systemd-tmpfiles-setup alone takes a minute of CPU under emulation).
for u in getty@tty1.service serial-getty@ttyS0.service console-getty.service systemd-timesyncd.service \
         systemd-pstore.service postgresql.service e2scrub_reap.service apt-daily.timer apt-daily-upgrade.timer \
         dpkg-db-backup.timer e2scrub_all.timer fstrim.timer man-db.timer systemd-networkd.service \
         systemd-resolved.service ssh.service cron.service rsyslog.service systemd-random-seed.service \
         systemd-tmpfiles-setup.service systemd-tmpfiles-clean.timer systemd-binfmt.service \
         proc-sys-fs-binfmt_misc.automount systemd-logind.service systemd-update-utmp.service \
         systemd-sysusers.service systemd-firstboot.service systemd-machine-id-commit.service \
         modprobe@drm.service modprobe@fuse.service modprobe@configfs.service modprobe@dm_mod.service \
         modprobe@loop.service sys-kernel-config.mount sys-kernel-debug.mount sys-kernel-tracing.mount \
         sys-fs-fuse-connections.mount dev-hugepages.mount keyboard-setup.service console-setup.service \
         systemd-journal-flush.service systemd-hwdb-update.service ldconfig.service \
         systemd-journal-catalog-update.service systemd-update-done.service tmp.mount; do
    ln -sf /dev/null "$units/$u"
done
mkdir -p /etc/systemd/system-generators
for g in /usr/lib/systemd/system-generators/* /lib/systemd/system-generators/*; do
    [[ -e $g ]] && ln -sf /dev/null "/etc/systemd/system-generators/${g##*/}"
done
cat > "$units/rb-scenario.target" <<UNIT
[Unit]
Description=Real-stack test scenario
Requires=basic.target rb-scenario.service
After=basic.target rb-scenario.service
AllowIsolate=yes
UNIT
cat > "$units/rb-scenario.service" <<UNIT
[Unit]
Description=Real-stack test scenario script
After=basic.target dbus.service systemd-udevd.service systemd-journald.service
Wants=dbus.service systemd-udevd.service
[Service]
Type=oneshot
ExecStart=/etc/rb-scenario.sh
StandardOutput=journal
StandardError=journal
TimeoutStartSec=infinity
ExecStopPost=/bin/systemctl --no-block poweroff
UNIT
ln -sf "$units/rb-scenario.target" "$units/default.target"
mkdir -p /etc/systemd/system.conf.d
printf '[Manager]\nShowStatus=no\n' > /etc/systemd/system.conf.d/rb-scenario.conf
# The console shows the scenario, not systemd's status lines; systemd's own messages (a watchdog timeout,
# a unit's exit) go to the journal, where the checks look for them.
exec /lib/systemd/systemd --show-status=false --log-level="${RB_SYSTEMD_LOG_LEVEL:-notice}" --log-target=journal-or-kmsg
