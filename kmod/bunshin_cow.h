/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * bunshin_cow.h - ioctl API of /dev/bunshin_cow, shared by the kernel module
 * (kmod/bunshin_cow.c) and userspace (kmod/tests/, forkcore's kmod backend).
 *
 * Flow:
 *   fd = open("/dev/bunshin_cow", O_RDWR);               (root: CAP_SYS_PTRACE)
 *   struct bunshin_cow_capture c = { .pid = A, .start = addr, .len = len };
 *   ioctl(fd, BUNSHIN_COW_CAPTURE, &c);                  -> c.holder
 *   -- any process, e.g. a clone B that is not A's child --
 *   cfd = open("/dev/bunshin_cow", O_RDONLY);
 *   p = mmap(addr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_FIXED,
 *            cfd, BUNSHIN_COW_MMAP_OFFSET(c.holder));   (MAP_SHARED is refused)
 *   -- later, the capturing fd --
 *   ioctl(fd, BUNSHIN_COW_RELEASE, &c.holder);          (mappings stay valid)
 *
 * A holder is owned by the file descriptor that captured it: only that fd may
 * release it, and closing that fd releases every holder it still owns.  The
 * pages stay alive until the last mapping of the holder is gone.
 */
#ifndef _UAPI_BUNSHIN_COW_H
#define _UAPI_BUNSHIN_COW_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define BUNSHIN_COW_DEVICE		"/dev/bunshin_cow"

/* mmap offset of byte 0 of holder @id; add a page-aligned byte offset for a sub-range. */
#define BUNSHIN_COW_HOLDER_SHIFT	40
#define BUNSHIN_COW_MMAP_OFFSET(id)	((__u64)(id) << BUNSHIN_COW_HOLDER_SHIFT)

struct bunshin_cow_capture {
	__s32 pid;		/* in: source process (caller's pid namespace) */
	__u32 flags;		/* in: must be 0 */
	__u64 start;		/* in: page-aligned start address in the source */
	__u64 len;		/* in: page-aligned length in bytes */
	__u32 holder;		/* out: holder id (>= 1) */
	__u32 reserved;
	__u64 pages_shared;	/* out: pages now shared copy-on-write */
	__u64 pages_copied;	/* out: pages copied (possibly DMA-pinned) */
	__u64 pages_zero;	/* out: never-touched pages (read as zeroes) */
};

struct bunshin_cow_stats {
	__u64 holders;		/* holders alive (owned or still mapped) */
	__u64 pages_held;	/* page references held by all holders */
	__u64 mappings;		/* clone VMAs mapping a holder */
	__u64 captures;		/* successful captures since load */
};

#define BUNSHIN_COW_IOC_MAGIC	0xB5
#define BUNSHIN_COW_CAPTURE	_IOWR(BUNSHIN_COW_IOC_MAGIC, 1, struct bunshin_cow_capture)
#define BUNSHIN_COW_RELEASE	_IOW(BUNSHIN_COW_IOC_MAGIC, 2, __u32)
#define BUNSHIN_COW_STATS	_IOR(BUNSHIN_COW_IOC_MAGIC, 3, struct bunshin_cow_stats)

#endif /* _UAPI_BUNSHIN_COW_H */
