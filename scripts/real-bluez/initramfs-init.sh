#!/bin/busybox sh
# /init of the test bed's initramfs (busybox): loads the virtio/9p/overlay modules, mounts the host's root
# read-only over 9p under a tmpfs overlay, binds the test kernel's module tree and the job directory into
# it, and switches to the PID 1 named by rb.init= on the kernel command line. With a release root (9p tag
# hostroot is then that root, tag hostfs the host's /), the host paths listed in the job's VMNAME.binds
# are bound in at their own paths.
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
say() { echo "rb-initramfs: $*" > /dev/console; }
arg() { tr ' ' '\n' < /proc/cmdline | sed -n "s/^$1=//p" | tail -n 1; }

while read -r m; do insmod "/mods/$m" 2> /dev/null; done < /mods/order

if grep -q 'rb.probe=1' /proc/cmdline; then
    say "RB-PROBE-OK"
    echo o > /proc/sysrq-trigger
    sleep 5
fi

name="$(arg rb.name)"; init="$(arg rb.init)"; kdir="$(arg rb.kdir)"
kver="$(uname -r)"
mkdir -p /ro /rw
mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 hostroot /ro || { say "cannot mount the host root"; sleep 2; echo o > /proc/sysrq-trigger; }
mount -t tmpfs -o size=512m,mode=0755 tmpfs /rw
mkdir -p /rw/upper /rw/work
mount -t overlay -o lowerdir=/ro,upperdir=/rw/upper,workdir=/rw/work overlay /newroot || { say "overlay failed"; echo o > /proc/sysrq-trigger; }
# The host's own root, when the VM's root is a release root: the kernel's modules and the binds come from it.
host=/newroot
mkdir -p /host
if mount -t 9p -o trans=virtio,version=9p2000.L,ro,cache=loose,msize=512000 hostfs /host 2> /dev/null; then host=/host; fi
mkdir -p "/newroot/lib/modules/$kver"
mount --bind "$host$kdir/lib/modules/$kver" "/newroot/lib/modules/$kver"
mount -t tmpfs -o mode=0755 tmpfs /newroot/run
mkdir -p /newroot/run/rbjob
mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000 rbjob /newroot/run/rbjob || say "cannot mount the job directory"
if [ "$host" = /host ] && [ -f "/newroot/run/rbjob/$name.binds" ]; then
    while IFS= read -r p; do
        [ -n "$p" ] && [ -e "/host$p" ] || continue
        if [ -d "/host$p" ]; then mkdir -p "/newroot$p"; else mkdir -p "/newroot${p%/*}"; : > "/newroot$p"; fi
        mount --bind "/host$p" "/newroot$p" || say "cannot bind $p"
    done < "/newroot/run/rbjob/$name.binds"
fi
say "up $(cut -d' ' -f1 /proc/uptime)s, PID 1 will be $init"
mount --move /dev /newroot/dev
umount /proc /sys 2> /dev/null
set --
if [ -f "/newroot/run/rbjob/$name.initargs" ]; then
    while IFS= read -r a; do set -- "$@" "$a"; done < "/newroot/run/rbjob/$name.initargs"
fi
exec switch_root /newroot "$init" "$@"
