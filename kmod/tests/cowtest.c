// SPDX-License-Identifier: GPL-2.0
/*
 * cowtest - guest-side tests of /dev/bunshin_cow (run by kmod/harness.py in a
 * qemu guest, statically linked).  Prints one line per check to stdout:
 *   PASS <name> [details]     FAIL <name>: <why>     INFO <text>
 *   NEGCTL leak_detected ... / NEGCTL leak_not_detected   (mode "leak")
 *
 * Modes:
 *   cowtest basic   source A + clones B1, B2 (siblings of A, not its children):
 *                   capture-time data, isolation both ways, memory deltas,
 *                   swap (MADV_PAGEOUT + pressure on zram), THP split,
 *                   source exit + release, everything freed, API errors.
 *   cowtest multi   8 clones of a 256 MiB source: memory < 1.1x one copy,
 *                   capture time < 20 ms.
 *   cowtest leak    minimal leak check; run with skip_clear_exclusive=1 as the
 *                   negative control (must report leak_detected).
 *   cowtest bench MiB clones thp   one BENCH json line (benchmarks/kmod_bench.py).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../bunshin_cow.h"

#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif
#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif

#define PG 4096UL
#define MIB (1024UL * 1024UL)
#define WORDS (PG / 8)

static int failures;

static void pass(const char *name, const char *fmt, ...)
{
	va_list ap;

	printf("PASS %s", name);
	if (fmt) {
		printf(" ");
		va_start(ap, fmt);
		vprintf(fmt, ap);
		va_end(ap);
	}
	printf("\n");
	fflush(stdout);
}

static void fail(const char *name, const char *fmt, ...)
{
	va_list ap;

	failures++;
	printf("FAIL %s: ", name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

static void check(int ok, const char *name, const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (ok)
		pass(name, "%s", buf);
	else
		fail(name, "%s", buf);
}

static void info(const char *fmt, ...)
{
	va_list ap;

	printf("INFO ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

static double now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* value of /proc/meminfo field @key in KiB (-1 if absent) */
static long meminfo_kb(const char *key)
{
	char line[256];
	size_t n = strlen(key);
	long v = -1;
	FILE *f = fopen("/proc/meminfo", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, n) && line[n] == ':') {
			v = atol(line + n + 1);
			break;
		}
	fclose(f);
	return v;
}

/* where the kernel's own memory goes besides MemFree (memory_returned explains a MemFree drop by them) */
static const char *const KERNEL_USES[] = { "SwapCached", "Slab", "PageTables", "KernelStack", "Buffers",
					   "Cached", "Percpu", "per-CPU free lists" /* last: from zoneinfo */ };
#define N_KERNEL_USES ((int)(sizeof(KERNEL_USES) / sizeof(KERNEL_USES[0])))

/* KiB of free pages parked on the per-CPU lists (/proc/zoneinfo's pagesets): not in MemFree */
static long pcp_kb(void)
{
	char line[256];
	long pages = 0, n;
	FILE *f = fopen("/proc/zoneinfo", "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, " count: %ld", &n) == 1)
			pages += n;
	fclose(f);
	return pages * (PG / 1024);
}

static void kernel_uses(long *kb)
{
	for (int i = 0; i < N_KERNEL_USES; i++)
		kb[i] = i == N_KERNEL_USES - 1 ? pcp_kb() : meminfo_kb(KERNEL_USES[i]);
}

/* field of /proc/<pid>/status or smaps_rollup in KiB */
static long procfield_kb(pid_t pid, const char *file, const char *key)
{
	char path[64], line[256];
	size_t n = strlen(key);
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/%s", pid, file);
	f = fopen(path, "r");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, key, n) && line[n] == ':') {
			v = atol(line + n + 1);
			break;
		}
	fclose(f);
	return v;
}

static void drop_caches(void)
{
	int fd = open("/proc/sys/vm/drop_caches", O_WRONLY);

	sync();
	if (fd >= 0) {
		if (write(fd, "3", 1) < 0)
			perror("drop_caches");
		close(fd);
	}
}

/* memory zram (swap) holds now, in KiB, after compacting it; 0 without zram */
static long zram_used_kb(void)
{
	unsigned long long orig, compr, used = 0;
	FILE *f;
	int fd = open("/sys/block/zram0/compact", O_WRONLY);

	if (fd >= 0) {
		if (write(fd, "1", 1) < 0)
			perror("zram compact");
		close(fd);
	}
	f = fopen("/sys/block/zram0/mm_stat", "r");
	if (!f)
		return 0;
	if (fscanf(f, "%llu %llu %llu", &orig, &compr, &used) != 3)
		used = 0;
	fclose(f);
	return used / 1024;
}

/* ------------------------------------------------------------- page data */

/* seed 0 = zero page; otherwise every 8-byte word is distinct */
static inline uint64_t pat(unsigned int seed, unsigned long page, unsigned long word)
{
	if (!seed)
		return 0;
	return ((uint64_t)seed << 48) ^ ((uint64_t)page << 12) ^ word ^ 0x5a5a000000000000ULL;
}

static void fill_page(char *base, unsigned long page, unsigned int seed)
{
	uint64_t *w = (uint64_t *)(base + page * PG);
	unsigned long j;

	for (j = 0; j < WORDS; j++)
		w[j] = pat(seed, page, j);
}

/* which seed the page holds now: exact match against @expect or @alt, else -1 */
static int page_seed(const char *base, unsigned long page, unsigned int expect, unsigned int alt)
{
	const uint64_t *w = (const uint64_t *)(base + page * PG);
	unsigned int cand[2] = { expect, alt };
	int c;

	for (c = 0; c < 2; c++) {
		unsigned long j;

		for (j = 0; j < WORDS; j++)
			if (w[j] != pat(cand[c], page, j))
				break;
		if (j == WORDS)
			return cand[c];
	}
	return -1;
}

/* ------------------------------------------------ worker processes + pipes */

enum op {
	OP_EXIT = 1,
	OP_MAP,		/* clone: a=holder, b=addr, c=len */
	OP_FILL,	/* source: a=addr hint 0, fills the layout; reply a=addr */
	OP_WRITE,	/* a=seed, b=modulus, c=remainder: write seed to pages p%b==c */
	OP_VERIFY,	/* reply a=mismatching pages, b=pages holding the leak seed (c) */
	OP_PAGEOUT,	/* MADV_PAGEOUT on the whole region */
	OP_SPLIT,	/* mprotect sub-ranges to split huge PMDs */
	OP_FORKCHECK,	/* fork a child that verifies, reply its mismatches */
	OP_GUP,		/* process_vm_readv of own never-written page: reply errno */
	OP_TOUCH,	/* read one word per page; reply a = sum (ignored) */
	OP_STAT,	/* reply a=AnonHugePages kB, b=VmSwap kB, c=Rss kB */
	OP_REARM,	/* source: rewrite word 0 of every page (same value) */
	OP_FILLPLAIN,	/* source: a=thp, b=len: fill every page (bench) */
	OP_COPY,	/* source: memcpy the region into fresh memory; reply a=us, b=MemFree delta kB */
	OP_PTE,		/* reply a=VmPTE kB (page tables) */
};

struct msg {
	long op, a, b, c;
};

struct worker {
	pid_t pid;
	int to, from;
};

struct region {
	char *base;
	unsigned long len, npages;
	unsigned int *seed;	/* expected seed per page */
};

static struct region R;

static void send_msg(int fd, struct msg *m)
{
	if (write(fd, m, sizeof(*m)) != sizeof(*m)) {
		perror("write pipe");
		exit(3);
	}
}

static int recv_msg(int fd, struct msg *m)
{
	ssize_t n = read(fd, m, sizeof(*m));

	return n == sizeof(*m) ? 0 : -1;
}

static struct msg call(struct worker *w, long op, long a, long b, long c)
{
	struct msg m = { op, a, b, c };

	send_msg(w->to, &m);
	if (recv_msg(w->from, &m)) {
		int st = 0;

		waitpid(w->pid, &st, WNOHANG);
		fail("worker_died", "worker %d, op %ld, wait status 0x%x", w->pid, op, st);
		m.op = -1;
		m.a = m.b = m.c = -1;
	}
	return m;
}

static long do_verify(unsigned int leak_seed, long *leaks)
{
	unsigned long p;
	long bad = 0;

	*leaks = 0;
	for (p = 0; p < R.npages; p++) {
		int s = page_seed(R.base, p, R.seed[p], leak_seed);

		if (s == (int)R.seed[p])
			continue;
		bad++;
		if (leak_seed && s == (int)leak_seed)
			(*leaks)++;
	}
	return bad;
}

static void layout_fill(unsigned long len)
{
	unsigned long filled = len - 2 * MIB, p;
	char *raw;

	/*
	 * 2 MiB-aligned so the first half can be THP-backed; at a fixed hint far from
	 * the mmap base so the same range is free in clones (forked from the controller
	 * before or after this) and they can map the holder at the source's address.
	 */
	raw = mmap((void *)0x3f0000000000UL, len + 2 * MIB, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (raw == MAP_FAILED)
		raw = mmap(NULL, len + 2 * MIB, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (raw == MAP_FAILED) {
		perror("mmap source");
		exit(3);
	}
	R.base = (char *)(((unsigned long)raw + 2 * MIB - 1) & ~(2 * MIB - 1));
	R.len = len;
	R.npages = len / PG;
	R.seed = calloc(R.npages, sizeof(*R.seed));
	/* second half of the data: 4 KiB pages; last 2 MiB: untouched + read-only-touched */
	madvise(R.base + filled / 2, len - filled / 2, MADV_NOHUGEPAGE);
	for (p = 0; p < filled / PG; p++) {
		fill_page(R.base, p, 1);
		R.seed[p] = 1;
	}
	for (p = (filled + MIB) / PG; p < R.npages; p++)
		(void)*(volatile char *)(R.base + p * PG);	/* maps the zero page */
}

static void worker_loop(int in, int out)
{
	struct msg m;

	while (!recv_msg(in, &m)) {
		struct msg r = { m.op, 0, 0, 0 };

		switch (m.op) {
		case OP_EXIT:
			_exit(0);
		case OP_FILL:
			layout_fill(m.b);
			r.a = (long)R.base;
			break;
		case OP_MAP: {
			int fd = open(BUNSHIN_COW_DEVICE, O_RDONLY);
			void *p;

			if (fd < 0) {
				r.a = -errno;
				break;
			}
			p = mmap((void *)m.b, m.c, PROT_READ | PROT_WRITE,
				 MAP_PRIVATE | MAP_FIXED_NOREPLACE, fd,
				 BUNSHIN_COW_MMAP_OFFSET(m.a));
			r.a = p == MAP_FAILED ? -errno : 0;
			close(fd);	/* the mapping keeps the file */
			if (p != MAP_FAILED) {
				R.base = p;
				R.len = m.c;
				R.npages = m.c / PG;
			}
			break;
		}
		case OP_WRITE: {
			unsigned long p;

			for (p = 0; p < R.npages; p++)
				if (p % m.b == (unsigned long)m.c && R.seed[p]) {
					fill_page(R.base, p, m.a);
					R.seed[p] = m.a;
				}
			break;
		}
		case OP_VERIFY:
			r.a = do_verify(m.c, &r.b);
			break;
		case OP_PAGEOUT:
			r.a = madvise(R.base, R.len, MADV_PAGEOUT) ? -errno : 0;
			break;
		case OP_SPLIT: {
			unsigned long off;

			/* a 4 KiB mprotect inside each 2 MiB block splits a huge PMD */
			for (off = 0; off + 2 * MIB <= R.len; off += 2 * MIB) {
				mprotect(R.base + off + 5 * PG, PG, PROT_READ);
				mprotect(R.base + off + 5 * PG, PG, PROT_READ | PROT_WRITE);
			}
			break;
		}
		case OP_FORKCHECK: {
			pid_t c = fork();
			int st;

			if (!c) {
				long leaks;

				_exit(do_verify(0, &leaks) ? 1 : 0);
			}
			waitpid(c, &st, 0);
			r.a = WIFEXITED(st) ? WEXITSTATUS(st) : 99;
			break;
		}
		case OP_GUP: {
			char buf[64];
			struct iovec l = { buf, sizeof(buf) };
			struct iovec rv = { R.base + (R.npages - 1) * PG - 2 * MIB, sizeof(buf) };
			ssize_t n = process_vm_readv(getpid(), &l, 1, &rv, 1, 0);

			r.a = n < 0 ? errno : 0;
			break;
		}
		case OP_TOUCH: {
			unsigned long p;
			long bad = 0;

			for (p = 0; p < R.npages; p++)
				if (*(volatile uint64_t *)(R.base + p * PG) !=
				    (R.seed ? pat(R.seed[p], p, 0) : pat(1, p, 0)))
					bad++;
			r.a = bad;
			break;
		}
		case OP_FILLPLAIN: {
			unsigned long p;
			char *raw = mmap((void *)0x3f0000000000UL, m.b + 2 * MIB, PROT_READ | PROT_WRITE,
					 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

			if (raw == MAP_FAILED)
				_exit(3);
			R.base = (char *)(((unsigned long)raw + 2 * MIB - 1) & ~(2 * MIB - 1));
			R.len = m.b;
			R.npages = m.b / PG;
			R.seed = malloc(R.npages * sizeof(*R.seed));
			madvise(R.base, R.len, m.a ? MADV_HUGEPAGE : MADV_NOHUGEPAGE);
			for (p = 0; p < R.npages; p++) {
				fill_page(R.base, p, 1);
				R.seed[p] = 1;
			}
			r.a = (long)R.base;
			break;
		}
		case OP_COPY: {
			long f0 = meminfo_kb("MemFree");
			double t0 = now_ms();
			char *dst = mmap(NULL, R.len, PROT_READ | PROT_WRITE,
					 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

			if (dst == MAP_FAILED)
				_exit(3);
			memcpy(dst, R.base, R.len);
			r.a = (long)((now_ms() - t0) * 1000);
			r.b = f0 - meminfo_kb("MemFree");
			munmap(dst, R.len);
			break;
		}
		case OP_PTE:
			r.a = procfield_kb(getpid(), "status", "VmPTE");
			break;
		case OP_REARM: {
			unsigned long p;

			for (p = 0; p < R.npages; p++)
				if (R.seed[p])
					*(volatile uint64_t *)(R.base + p * PG) = pat(R.seed[p], p, 0);
			break;
		}
		case OP_STAT:
			r.a = procfield_kb(getpid(), "smaps_rollup", "AnonHugePages");
			r.b = procfield_kb(getpid(), "status", "VmSwap");
			r.c = procfield_kb(getpid(), "status", "VmRSS");
			break;
		}
		send_msg(out, &r);
	}
	_exit(0);
}

/* fork a worker; a clone worker inherits the expected-seed table @seed */
static struct worker spawn(unsigned int *seed, unsigned long npages)
{
	int a[2], b[2];
	struct worker w;

	if (pipe(a) || pipe(b)) {
		perror("pipe");
		exit(3);
	}
	fflush(stdout);
	w.pid = fork();
	if (w.pid < 0) {
		perror("fork");
		exit(3);
	}
	if (!w.pid) {
		close(a[1]);
		close(b[0]);
		if (seed) {
			R.npages = npages;
			R.seed = malloc(npages * sizeof(*seed));
			memcpy(R.seed, seed, npages * sizeof(*seed));
		}
		worker_loop(a[0], b[1]);
	}
	close(a[0]);
	close(b[1]);
	w.to = a[1];
	w.from = b[0];
	return w;
}

static void reap(struct worker *w)
{
	int st;

	struct msg m = { OP_EXIT, 0, 0, 0 };

	send_msg(w->to, &m);	/* no reply: the worker exits */
	waitpid(w->pid, &st, 0);
	if (!WIFEXITED(st) || WEXITSTATUS(st))
		fail("worker_exit", "worker %d ended with status 0x%x", w->pid, st);
	close(w->to);
	close(w->from);
}

static int bcow_stats(int fd, struct bunshin_cow_stats *st)
{
	return ioctl(fd, BUNSHIN_COW_STATS, st);
}

/* pressure: allocate and touch @mb MiB (compressible), then free it */
static void pressure(unsigned long mb)
{
	pid_t c = fork();
	int st;

	if (!c) {
		unsigned long i, n = mb * MIB;
		char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		int adj = open("/proc/self/oom_score_adj", O_WRONLY);

		if (adj >= 0) {	/* the OOM killer takes this one, never a test process */
			if (write(adj, "1000", 4) < 0)
				_exit(1);
			close(adj);
		}
		if (p == MAP_FAILED)
			_exit(1);
		for (i = 0; i < n; i += PG)
			p[i] = (char)(i >> 12) | 1;
		_exit(0);
	}
	waitpid(c, &st, 0);
}

/* ------------------------------------------------------------------ basic */

static int mode_basic(void)
{
	const unsigned long len = 66 * MIB, data_pages = 64 * MIB / PG;
	struct bunshin_cow_capture cap = { 0 };
	struct bunshin_cow_stats st;
	struct worker A, B1, B2;
	long free0, anon0, free1, anon1, free2, free3, anon3, zram0, zram3;
	long kern0[N_KERNEL_USES], kern3[N_KERNEL_USES];
	unsigned long p;
	unsigned int *seedA;
	unsigned int *seed1;
	struct msg r;
	double t;
	int fd, fd2;
	char *addr;
	long e;

	drop_caches();
	zram0 = zram_used_kb();
	kernel_uses(kern0);
	free0 = meminfo_kb("MemFree");
	anon0 = meminfo_kb("AnonPages");

	/* source A fills 64 MiB (half THP, half 4 KiB) + 2 MiB of zero pages */
	A = spawn(NULL, 0);
	r = call(&A, OP_FILL, 0, len, 0);
	addr = (char *)r.a;
	r = call(&A, OP_STAT, 0, 0, 0);
	check(r.a >= 16 * 1024, "thp_in_source", "AnonHugePages=%ld kB (want >= 16384)", r.a);

	fd = open(BUNSHIN_COW_DEVICE, O_RDWR);
	if (fd < 0) {
		fail("open_device", "%s: %s", BUNSHIN_COW_DEVICE, strerror(errno));
		return 1;
	}
	free1 = meminfo_kb("MemFree");
	anon1 = meminfo_kb("AnonPages");
	cap.pid = A.pid;
	cap.start = (unsigned long)addr;
	cap.len = len;
	t = now_ms();
	e = ioctl(fd, BUNSHIN_COW_CAPTURE, &cap);
	t = now_ms() - t;
	if (e) {
		fail("capture", "ioctl: %s", strerror(errno));
		return 1;
	}
	check(cap.pages_shared == data_pages && cap.pages_copied == 0 &&
	      cap.pages_zero == 512, "capture",
	      "holder=%u shared=%llu copied=%llu zero=%llu in %.2f ms", cap.holder,
	      (unsigned long long)cap.pages_shared, (unsigned long long)cap.pages_copied,
	      (unsigned long long)cap.pages_zero, t);
	free2 = meminfo_kb("MemFree");
	check(free1 - free2 < 4096, "capture_copies_nothing", "MemFree delta %ld kB", free1 - free2);

	/* A writes seed 2 to even pages after the capture */
	seedA = calloc(len / PG, sizeof(*seedA));
	for (p = 0; p < data_pages; p++)
		seedA[p] = 1;
	seed1 = malloc(len / PG * sizeof(*seed1));
	memcpy(seed1, seedA, len / PG * sizeof(*seed1));	/* capture-time view */
	call(&A, OP_WRITE, 2, 2, 0);
	r = call(&A, OP_VERIFY, 0, 0, 0);
	check(r.a == 0, "source_sees_own_writes", "%ld bad pages", r.a);

	/* clones B1, B2: siblings of A (children of this controller), not A's children */
	free2 = meminfo_kb("MemFree");
	B1 = spawn(seed1, len / PG);
	B2 = spawn(seed1, len / PG);
	r = call(&B1, OP_MAP, cap.holder, (long)addr, len);
	check(r.a == 0, "clone1_maps_holder_at_source_address", "mmap: %s", r.a ? strerror(-r.a) : "ok");
	if (r.a)
		return 1;
	r = call(&B2, OP_MAP, cap.holder, (long)addr, len);
	check(r.a == 0, "clone2_maps_holder_at_source_address", "mmap: %s", r.a ? strerror(-r.a) : "ok");
	if (r.a)
		return 1;
	r = call(&B1, OP_VERIFY, 0, 0, 2);
	check(r.a == 0, "clone1_reads_capture_time_data", "%ld bad pages", r.a);
	check(r.b == 0, "source_writes_invisible_to_clone1", "%ld leaked pages", r.b);
	r = call(&B2, OP_VERIFY, 0, 0, 2);
	check(r.a == 0, "clone2_reads_capture_time_data", "%ld bad pages", r.a);
	check(r.b == 0, "source_writes_invisible_to_clone2", "%ld leaked pages", r.b);
	free3 = meminfo_kb("MemFree");
	anon3 = meminfo_kb("AnonPages");
	check(free2 - free3 < 8192, "clones_share_memory",
	      "2 clones read 66 MiB: MemFree delta %ld kB, AnonPages delta since capture-1 %ld kB "
	      "(source copy-on-write of 32 MiB included)", free2 - free3, anon3 - anon1);
	r = call(&B1, OP_FORKCHECK, 0, 0, 0);
	check(r.a == 0, "clone_fork_child_reads_same_data", "child status %ld", r.a);
	r = call(&B1, OP_GUP, 0, 0, 0);
	info("process_vm_readv on a clone's never-written page: %s (design (b) limit: EFAULT expected)",
	     r.a ? strerror(r.a) : "ok");

	/* clone writes: private to each */
	call(&B1, OP_WRITE, 101, 3, 0);
	call(&B2, OP_WRITE, 102, 3, 1);
	r = call(&B1, OP_VERIFY, 0, 0, 102);
	check(r.a == 0 && r.b == 0, "clone1_writes_private", "%ld bad, %ld pages of clone2", r.a, r.b);
	r = call(&B2, OP_VERIFY, 0, 0, 101);
	check(r.a == 0 && r.b == 0, "clone2_writes_private", "%ld bad, %ld pages of clone1", r.a, r.b);
	r = call(&A, OP_VERIFY, 0, 0, 101);
	check(r.a == 0 && r.b == 0, "clone_writes_invisible_to_source", "%ld bad, %ld leaked", r.a, r.b);

	/* THP split: split the source's huge PMDs, then check every view */
	call(&A, OP_SPLIT, 0, 0, 0);
	call(&B1, OP_SPLIT, 0, 0, 0);
	{
		int sfd = open("/sys/kernel/debug/split_huge_pages", O_WRONLY);

		if (sfd >= 0) {
			if (write(sfd, "1", 1) < 0)
				info("split_huge_pages: %s", strerror(errno));
			close(sfd);
		}
	}
	r = call(&A, OP_STAT, 0, 0, 0);
	info("source after split: AnonHugePages=%ld kB", r.a);
	e = call(&A, OP_VERIFY, 0, 0, 0).a + call(&B1, OP_VERIFY, 0, 0, 0).a +
	    call(&B2, OP_VERIFY, 0, 0, 0).a;
	check(e == 0, "views_correct_after_thp_split", "%ld bad pages", e);

	/* swap: page out every view to zram, add pressure, check every view */
	if (meminfo_kb("SwapTotal") > 0) {
		long swA, swB;

		call(&A, OP_PAGEOUT, 0, 0, 0);
		call(&B1, OP_PAGEOUT, 0, 0, 0);
		call(&B2, OP_PAGEOUT, 0, 0, 0);
		swA = call(&A, OP_STAT, 0, 0, 0).b;
		swB = call(&B1, OP_STAT, 0, 0, 0).b;
		pressure(meminfo_kb("MemAvailable") / 1024 + 64);
		info("after MADV_PAGEOUT: VmSwap A=%ld kB B1=%ld kB; SwapFree=%ld of %ld kB after pressure",
		     swA, swB, meminfo_kb("SwapFree"), meminfo_kb("SwapTotal"));
		check(swA > 16 * 1024, "source_was_swapped", "VmSwap=%ld kB", swA);
		e = call(&A, OP_VERIFY, 0, 0, 0).a + call(&B1, OP_VERIFY, 0, 0, 0).a +
		    call(&B2, OP_VERIFY, 0, 0, 0).a;
		check(e == 0, "views_correct_after_swap", "%ld bad pages", e);
		/* write again after swap-in: still isolated */
		call(&A, OP_WRITE, 3, 4, 1);
		r = call(&B2, OP_VERIFY, 0, 0, 3);
		check(r.a == 0 && r.b == 0, "source_writes_after_swap_invisible", "%ld bad, %ld leaked",
		      r.a, r.b);
		e = call(&A, OP_VERIFY, 0, 0, 0).a + call(&B1, OP_VERIFY, 0, 0, 0).a;
		check(e == 0, "views_correct_after_swap_and_write", "%ld bad pages", e);
	} else {
		fail("swap_available", "no swap in the guest (zram setup failed?)");
	}

	/* API errors */
	{
		u_int32_t bogus = 4242;
		void *p;

		fd2 = open(BUNSHIN_COW_DEVICE, O_RDWR);
		p = mmap(NULL, PG, PROT_READ, MAP_SHARED, fd2, BUNSHIN_COW_MMAP_OFFSET(cap.holder));
		check(p == MAP_FAILED && errno == EINVAL, "map_shared_refused", "errno=%d", errno);
		p = mmap(NULL, PG, PROT_READ, MAP_PRIVATE, fd2, BUNSHIN_COW_MMAP_OFFSET(bogus));
		check(p == MAP_FAILED && errno == ENOENT, "unknown_holder_refused", "errno=%d", errno);
		p = mmap(NULL, len + PG, PROT_READ, MAP_PRIVATE, fd2, BUNSHIN_COW_MMAP_OFFSET(cap.holder));
		check(p == MAP_FAILED && errno == EINVAL, "map_past_end_refused", "errno=%d", errno);
		e = ioctl(fd2, BUNSHIN_COW_RELEASE, &cap.holder);
		check(e && errno == EPERM, "release_by_non_owner_refused", "errno=%d", errno);
		{
			struct bunshin_cow_capture bad = cap;

			bad.start += 1;
			e = ioctl(fd2, BUNSHIN_COW_CAPTURE, &bad);
			check(e && errno == EINVAL, "unaligned_capture_refused", "errno=%d", errno);
		}
		/* sub-range mapping at an offset */
		p = mmap(NULL, 4 * PG, PROT_READ, MAP_PRIVATE, fd2,
			 BUNSHIN_COW_MMAP_OFFSET(cap.holder) + 7 * PG);
		check(p != MAP_FAILED && ((uint64_t *)p)[3] == pat(1, 7, 3), "subrange_mapping",
		      "holder page 7 at mmap offset +7 pages");
		if (p != MAP_FAILED)
			munmap(p, 4 * PG);
	}

	/* A exits, holder released: clones keep their views */
	reap(&A);
	e = ioctl(fd, BUNSHIN_COW_RELEASE, &cap.holder);
	check(e == 0, "release_holder", "%s", e ? strerror(errno) : "ok");
	bcow_stats(fd, &st);
	check(st.holders == 1 && st.mappings >= 2, "mapped_holder_survives_release",
	      "holders=%llu mappings=%llu pages_held=%llu", (unsigned long long)st.holders,
	      (unsigned long long)st.mappings, (unsigned long long)st.pages_held);
	pressure(64);
	r = call(&B1, OP_VERIFY, 0, 0, 0);
	e = r.a + call(&B2, OP_VERIFY, 0, 0, 0).a;
	check(e == 0, "clones_correct_after_source_exit_and_release", "%ld bad pages", e);
	reap(&B1);
	reap(&B2);
	close(fd2);

	/* closing the capturing fd releases what it still owns */
	{
		struct worker C = spawn(NULL, 0);
		struct bunshin_cow_capture c2 = { 0 };
		int fd3 = open(BUNSHIN_COW_DEVICE, O_RDWR);

		r = call(&C, OP_FILL, 0, 4 * MIB, 0);
		c2.pid = C.pid;
		c2.start = r.a;
		c2.len = 4 * MIB;
		e = ioctl(fd3, BUNSHIN_COW_CAPTURE, &c2);
		close(fd3);
		reap(&C);
		bcow_stats(fd, &st);
		check(e == 0 && st.holders == 0, "close_releases_owned_holders", "holders=%llu",
		      (unsigned long long)st.holders);
	}

	bcow_stats(fd, &st);
	check(st.holders == 0 && st.pages_held == 0 && st.mappings == 0, "everything_freed",
	      "holders=%llu pages_held=%llu mappings=%llu", (unsigned long long)st.holders,
	      (unsigned long long)st.pages_held, (unsigned long long)st.mappings);
	close(fd);
	/*
	 * Not leaked but not free either: zsmalloc keeps fragmented zspages after swap is
	 * freed, orphaned swap-cache pages wait for reclaim, slabs and page tables grew,
	 * and freed pages park on the per-CPU lists (up to ~20 MB here, outside MemFree).
	 * Count them apart; what is left (within ~300 kB here) is pages nobody accounts
	 * for, which a lost page reference would be.  Frees can lag
	 * (reclaim, RCU-freed slabs): measure again for up to 5 s; a leak stays.
	 */
	for (int settle = 0; settle < 6; settle++) {
		if (settle)
			sleep(1);
		drop_caches();
		zram3 = zram_used_kb();
		kernel_uses(kern3);
		free3 = meminfo_kb("MemFree");
		anon3 = meminfo_kb("AnonPages");
		e = (free0 - free3) - (zram3 - zram0);
		for (int i = 0; i < N_KERNEL_USES; i++)
			e -= kern3[i] - kern0[i];
		if (e < 4096 && anon3 - anon0 < 4096)
			break;
	}
	{
		char why[512];
		int n = 0;

		for (int i = 0; i < N_KERNEL_USES; i++)
			n += snprintf(why + n, sizeof(why) - n, ", %s %+ld", KERNEL_USES[i], kern3[i] - kern0[i]);
		check(e < 4096 && anon3 - anon0 < 4096, "memory_returned",
		      "unexplained %ld kB: MemFree %ld -> %ld kB, zram %+ld, AnonPages %+ld%s", e, free0,
		      free3, zram3 - zram0, anon3 - anon0, why);
	}
	free(seedA);
	free(seed1);
	return failures ? 1 : 0;
}

/* ------------------------------------------------------------------ multi */

static int mode_multi(unsigned long mb, int nclones)
{
	const unsigned long len = mb * MIB + 2 * MIB;	/* layout: mb MiB data + 2 MiB zero */
	struct bunshin_cow_capture cap = { 0 };
	struct bunshin_cow_stats st;
	struct worker A, B[16];
	long free0, anon0, free1, anon1, free2, anon2, bad = 0;
	unsigned int *seed;
	unsigned long p;
	double t, tr[3];
	int fd, i;
	char *addr;

	drop_caches();
	free0 = meminfo_kb("MemFree");
	anon0 = meminfo_kb("AnonPages");
	A = spawn(NULL, 0);
	addr = (char *)call(&A, OP_FILL, 0, len, 0).a;
	free1 = meminfo_kb("MemFree");
	anon1 = meminfo_kb("AnonPages");
	fd = open(BUNSHIN_COW_DEVICE, O_RDWR);
	cap.pid = A.pid;
	cap.start = (unsigned long)addr;
	cap.len = len;
	/*
	 * Three full captures (between them: release, and the source rewrites one word
	 * per page so every PTE is writable + exclusive again).  A TCG vCPU shares host
	 * cores with other work, so single timings are noisy: the best of 3 is checked.
	 */
	for (i = 0; i < 3; i++) {
		t = now_ms();
		if (ioctl(fd, BUNSHIN_COW_CAPTURE, &cap)) {
			fail("multi_capture", "%s", strerror(errno));
			return 1;
		}
		tr[i] = now_ms() - t;
		if (i < 2) {
			ioctl(fd, BUNSHIN_COW_RELEASE, &cap.holder);
			call(&A, OP_REARM, 0, 0, 0);
		}
	}
	t = tr[0] < tr[1] ? tr[0] : tr[1];
	t = t < tr[2] ? t : tr[2];
	check(t < 20.0, "multi_capture_under_20ms", "%lu MiB: best of 3 %.2f ms (%.2f, %.2f, %.2f)",
	      mb, t, tr[0], tr[1], tr[2]);

	seed = calloc(len / PG, sizeof(*seed));
	for (p = 0; p < mb * MIB / PG; p++)
		seed[p] = 1;
	for (i = 0; i < nclones; i++) {
		long e;

		B[i] = spawn(seed, len / PG);
		e = call(&B[i], OP_MAP, cap.holder, (long)addr, len).a;
		if (e) {
			fail("multi_clone_maps_holder", "clone %d: mmap: %s", i, strerror(-e));
			return 1;
		}
		bad += call(&B[i], OP_TOUCH, 0, 0, 0).a;
	}
	check(bad == 0, "multi_clones_read_data", "%d clones, %ld bad pages", nclones, bad);
	free2 = meminfo_kb("MemFree");
	anon2 = meminfo_kb("AnonPages");
	{
		double one = mb * 1024.0;
		double total_free = free0 - free2, total_anon = anon2 - anon0;

		check(total_free < 1.1 * one && total_anon < 1.1 * one, "multi_clones_cost_one_copy",
		      "source+%d clones of %lu MiB: MemFree delta %.0f kB = %.3fx one copy, "
		      "AnonPages delta %.0f kB = %.3fx; per clone %.0f kB", nclones, mb,
		      total_free, total_free / one, total_anon, total_anon / one,
		      (double)(free1 - free2) / nclones);
		(void)anon1;
	}
	reap(&A);
	ioctl(fd, BUNSHIN_COW_RELEASE, &cap.holder);
	for (i = 0; i < nclones; i++)
		reap(&B[i]);
	bcow_stats(fd, &st);
	check(st.holders == 0 && st.pages_held == 0, "multi_everything_freed",
	      "holders=%llu pages_held=%llu", (unsigned long long)st.holders,
	      (unsigned long long)st.pages_held);
	close(fd);
	free(seed);
	return failures ? 1 : 0;
}

/* ------------------------------------------------------------------ bench */

/* one BENCH json line: capture vs memcpy copy, per-clone cost (kmod_bench.py) */
static int mode_bench(unsigned long mb, int nclones, int thp)
{
	const unsigned long len = mb * MIB;
	struct bunshin_cow_capture cap = { 0 };
	struct bunshin_cow_stats st;
	struct worker A, B[16];
	long free0, free1, free2, free3, bad = 0;
	double tr[3], t, touch_ms = 0;
	long pte_kb = 0, pte0_kb;
	struct msg r;
	int fd, i;

	drop_caches();
	free0 = meminfo_kb("MemFree");
	A = spawn(NULL, 0);
	cap.start = call(&A, OP_FILLPLAIN, thp, len, 0).a;
	free1 = meminfo_kb("MemFree");
	r = call(&A, OP_COPY, 0, 0, 0);
	fd = open(BUNSHIN_COW_DEVICE, O_RDWR);
	cap.pid = A.pid;
	cap.len = len;
	for (i = 0; i < 3; i++) {
		t = now_ms();
		if (ioctl(fd, BUNSHIN_COW_CAPTURE, &cap)) {
			fail("bench_capture", "%s", strerror(errno));
			return 1;
		}
		tr[i] = now_ms() - t;
		if (i < 2) {
			ioctl(fd, BUNSHIN_COW_RELEASE, &cap.holder);
			call(&A, OP_REARM, 0, 0, 0);
		}
	}
	drop_caches();
	free2 = meminfo_kb("MemFree");
	for (i = 0; i < nclones; i++) {
		B[i] = spawn(NULL, 0);
		pte0_kb = call(&B[i], OP_PTE, 0, 0, 0).a;
		if (call(&B[i], OP_MAP, cap.holder, cap.start, len).a) {
			fail("bench_map", "clone %d", i);
			return 1;
		}
		t = now_ms();
		bad += call(&B[i], OP_TOUCH, 0, 0, 0).a;
		touch_ms += now_ms() - t;
		pte_kb += call(&B[i], OP_PTE, 0, 0, 0).a - pte0_kb;
	}
	free3 = meminfo_kb("MemFree");
	printf("BENCH {\"size_mib\": %lu, \"thp\": %d, \"clones\": %d, "
	       "\"capture_ms\": [%.3f, %.3f, %.3f], \"copy_ms\": %.3f, \"copy_kb\": %ld, "
	       "\"source_kb\": %ld, \"per_clone_kb\": %.1f, \"per_clone_pte_kb\": %.1f, "
	       "\"clone_map_read_ms\": %.3f, \"bad_pages\": %ld}\n",
	       mb, thp, nclones, tr[0], tr[1], tr[2], r.a / 1000.0, r.b, free0 - free1,
	       (double)(free2 - free3) / nclones, (double)pte_kb / nclones, touch_ms / nclones, bad);
	reap(&A);
	ioctl(fd, BUNSHIN_COW_RELEASE, &cap.holder);
	for (i = 0; i < nclones; i++)
		reap(&B[i]);
	bcow_stats(fd, &st);
	check(st.holders == 0 && st.pages_held == 0 && bad == 0, "bench_run_clean",
	      "%lu MiB: holders=%llu pages_held=%llu bad=%ld", mb,
	      (unsigned long long)st.holders, (unsigned long long)st.pages_held, bad);
	close(fd);
	return failures ? 1 : 0;
}

/* ------------------------------------------------------------------- leak */

static int mode_leak(void)
{
	const unsigned long len = 18 * MIB;
	struct bunshin_cow_capture cap = { 0 };
	struct worker A, B;
	unsigned int *seed;
	unsigned long p;
	struct msg r;
	int fd;

	A = spawn(NULL, 0);
	cap.start = call(&A, OP_FILL, 0, len, 0).a;
	cap.pid = A.pid;
	cap.len = len;
	fd = open(BUNSHIN_COW_DEVICE, O_RDWR);
	if (fd < 0 || ioctl(fd, BUNSHIN_COW_CAPTURE, &cap)) {
		printf("NEGCTL error: capture failed: %s\n", strerror(errno));
		return 1;
	}
	call(&A, OP_WRITE, 2, 2, 0);
	seed = calloc(len / PG, sizeof(*seed));
	for (p = 0; p < 16 * MIB / PG; p++)
		seed[p] = 1;
	B = spawn(seed, len / PG);
	r = call(&B, OP_MAP, cap.holder, cap.start, len);
	if (r.a) {
		printf("NEGCTL error: clone mmap: %s\n", strerror(-r.a));
		return 1;
	}
	r = call(&B, OP_VERIFY, 0, 0, 2);
	if (r.b > 0)
		printf("NEGCTL leak_detected: %ld of %lu pages written by the source after capture "
		       "are visible in the clone\n", r.b, 16 * MIB / PG / 2);
	else
		printf("NEGCTL leak_not_detected: clone saw capture-time data (%ld bad pages)\n", r.a);
	reap(&A);
	reap(&B);
	ioctl(fd, BUNSHIN_COW_RELEASE, &cap.holder);
	close(fd);
	free(seed);
	return 0;
}

int main(int argc, char **argv)
{
	int rc;

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2) {
		fprintf(stderr, "usage: cowtest basic | multi [MiB [clones]] | leak | bench MiB clones thp\n");
		return 2;
	}
	if (!strcmp(argv[1], "basic"))
		rc = mode_basic();
	else if (!strcmp(argv[1], "multi"))
		rc = mode_multi(argc > 2 ? strtoul(argv[2], NULL, 0) : 256,
				argc > 3 ? atoi(argv[3]) : 8);
	else if (!strcmp(argv[1], "bench") && argc > 4)
		rc = mode_bench(strtoul(argv[2], NULL, 0), atoi(argv[3]), atoi(argv[4]));
	else if (!strcmp(argv[1], "leak"))
		rc = mode_leak();
	else {
		fprintf(stderr, "unknown mode %s\n", argv[1]);
		return 2;
	}
	printf("SUMMARY cowtest %s: %d failure(s)\n", argv[1], failures);
	return rc;
}
