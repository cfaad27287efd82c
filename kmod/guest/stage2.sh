#!/bin/sh
# Guest stage 2 of the host-root guests (kmod.harness.run_hostroot_guest): runs as PID 1 after switch_root
# into the host's / (read-only over 9p), with overlay (and bunshin_cow, when built) already loaded. Makes
# the writable dirs forkcore needs (tmpfs), runs COMMAND from the checkout, prints the guest's dmesg and
# powers off.  Args: REPO COMMAND [ARGS...]
REPO="$1"; shift
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
# Chromium watches the directory of /etc/localtime's target with inotify, and CRIU cannot encode a file
# handle of a 9p inode: give that one directory a tmpfs copy.
zone=$(dirname "$(readlink -f /etc/localtime)")
if [ -d "$zone" ]; then
  mkdir -p /mnt/zone && cp -a "$zone/." /mnt/zone/ && mount -t tmpfs -o mode=755 tmpfs "$zone" && cp -a /mnt/zone/. "$zone/"
fi
# CRIU restores private mappings writable before it protects them, so Chromium's multi-GiB address-space
# reservations count against the guest's few GiB under the default heuristic: let them overcommit.
echo 1 > /proc/sys/vm/overcommit_memory
for d in /tmp /var/tmp; do mount -t tmpfs -o mode=1777 tmpfs $d; done
for d in /run /var/lib/bunshin /root /var/log; do mount -t tmpfs -o mode=755 tmpfs $d; done
mount -t cgroup2 cgroup2 /sys/fs/cgroup || echo "INFO cgroup2 mount failed"
mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
echo "+freezer" > /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
hostname guest
$BB ifconfig lo 127.0.0.1 up || echo "INFO loopback up failed"  # CRIU probes TCP repair on lo
echo "INFO stage2: root=$(awk '$2=="/"{print $3}' /proc/mounts | tail -1) overlay=$(grep -c overlay /proc/filesystems) dev=$(ls -l /dev/bunshin_cow 2>&1)"
echo "INFO criu: $(/opt/bunshin/criu/bin/criu --version 2>&1 | head -1)"
echo "INFO cpu: $(grep -o -w -e pku -e ospke /proc/cpuinfo | sort -u | tr '\n' ' ')"
cd "$REPO" || echo "FAIL cd_repo"
PYTHONPATH="$REPO" "$@" 2>&1
echo "INFO guest command exit $?"
echo BCOW-DMESG-BEGIN
dmesg | tail -n 80
echo BCOW-DMESG-END
echo BCOW-GUEST done
sync
$BB poweroff -f
