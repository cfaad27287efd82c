#!/bin/sh
# Guest stage 2 of the forkcore kmod end-to-end test (kmod.harness.run_forkcore_guest_test).
# Runs as PID 1 after switch_root into the host's / (read-only over 9p); bunshin_cow and overlay are
# already loaded. Makes the writable dirs forkcore needs (tmpfs), runs kmod.guest_forkcore, prints the
# guest's dmesg and powers off.  Args: REPO HOLD_MB CLONES PRIVATE_REFERENCE(0|1)
REPO="$1"; HOLD_MB="${2:-200}"; CLONES="${3:-4}"; PRIVREF="${4:-0}"
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8 PYTHONDONTWRITEBYTECODE=1
BB=/bin/busybox
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs -o mode=1777 tmpfs /dev/shm
# The checkout may live under a dir about to get a tmpfs (CI clones into /tmp): bind it somewhere safe first.
mount -t tmpfs -o mode=755 tmpfs /mnt && mkdir -p /mnt/repo && mount --bind "$REPO" /mnt/repo && REPO=/mnt/repo
for d in /tmp /var/tmp; do mount -t tmpfs -o mode=1777 tmpfs $d; done
for d in /run /var/lib/bunshin /root /var/log; do mount -t tmpfs -o mode=755 tmpfs $d; done
mount -t cgroup2 cgroup2 /sys/fs/cgroup || echo "INFO cgroup2 mount failed"
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
echo "+freezer" > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
hostname guest
$BB ifconfig lo 127.0.0.1 up || echo "INFO loopback up failed"  # CRIU probes TCP repair on lo
echo "INFO stage2: root=$(awk '$2=="/"{print $3}' /proc/mounts | tail -1) overlay=$(grep -c overlay /proc/filesystems) dev=$(ls -l /dev/bunshin_cow)"
echo "INFO criu: $(/opt/bunshin/criu/bin/criu --version 2>&1 | head -1)"
cd "$REPO" || echo "FAIL cd_repo"
EXTRA=""
[ "$PRIVREF" = 1 ] && EXTRA="--private-reference"
/opt/bunshin/venv/bin/python -u -m kmod.guest_forkcore --hold-mb "$HOLD_MB" --clones "$CLONES" $EXTRA 2>&1
echo "INFO guest_forkcore exit $?"
echo BCOW-DMESG-BEGIN
dmesg | tail -n 80
echo BCOW-DMESG-END
echo BCOW-GUEST done
sync
$BB poweroff -f
