// SPDX-License-Identifier: Apache-2.0
/*
 * Chromium's zygote pattern with memory protection keys, small enough for a TCG guest.
 *
 * At start the "zygote" allocates a protection key the way Chromium >= 156 does (pkey_alloc(0, 0)) and tags
 * one page with it. On every SIGUSR1 it forks a "renderer" that, like a new Chromium renderer, applies the
 * zygote's key to a fresh page with pkey_mprotect, and writes the outcome to /tmp/pkey-zygote.<n>:
 *   "ok key K"        the key was applied (the source, or a CRIU that restores keys)
 *   "ok no-pkeys E"   pkey_alloc failed at start with errno E, so keys are never used (a CPU without PKU,
 *                     or a workspace that hides them)
 *   "fail key K errno E"  the key is not allocated in this mm: what a renderer of a restored Chromium zygote
 *                     meets (it dies on a CHECK; here it reports)
 * /tmp/pkey-zygote.ready holds "key K" or "no-pkeys E" once started.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static volatile sig_atomic_t requests;

static void on_usr1(int sig)
{
	(void)sig;
	requests++;
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	if (f) {
		fputs(text, f);
		fclose(f);
	}
}

static void renderer(int n, long key, int alloc_errno)
{
	char path[64], text[96];
	void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (key < 0)
		snprintf(text, sizeof(text), "ok no-pkeys %d\n", alloc_errno);
	else if (syscall(SYS_pkey_mprotect, page, 4096, PROT_READ | PROT_WRITE, key) == 0)
		snprintf(text, sizeof(text), "ok key %ld\n", key);
	else
		snprintf(text, sizeof(text), "fail key %ld errno %d\n", key, errno);
	snprintf(path, sizeof(path), "/tmp/pkey-zygote.%d", n);
	write_file(path, text);
	_exit(0);
}

int main(void)
{
	char text[64];
	int served = 0, alloc_errno = 0;
	long key = syscall(SYS_pkey_alloc, 0, 0);
	void *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (key < 0)
		alloc_errno = errno;
	else
		syscall(SYS_pkey_mprotect, page, 4096, PROT_READ | PROT_WRITE, key);
	signal(SIGUSR1, on_usr1);
	signal(SIGCHLD, SIG_IGN);
	if (key < 0)
		snprintf(text, sizeof(text), "no-pkeys %d\n", alloc_errno);
	else
		snprintf(text, sizeof(text), "key %ld\n", key);
	write_file("/tmp/pkey-zygote.ready", text);
	for (;;) {
		pause();
		while (served < requests) {
			served++;
			if (fork() == 0)
				renderer(served, key, alloc_errno);
		}
	}
}
