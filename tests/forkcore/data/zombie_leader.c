// SPDX-License-Identifier: Apache-2.0
/*
 * A process caught in the middle of its exit, as CRIU's seize can meet one: the main thread has exited
 * (the thread-group leader is a zombie) while a second thread lives on for LINGER_MS, then exits.
 * CRIU refuses to dump it ("Zombies with threads are not supported") until it is gone.
 */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static void *linger(void *arg)
{
	long ms = (long)arg;
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	nanosleep(&ts, NULL);
	exit(0);
}

int main(int argc, char **argv)
{
	pthread_t t;
	long ms = argc > 1 ? atol(argv[1]) : 500;

	if (pthread_create(&t, NULL, linger, (void *)ms))
		return 1;
	pthread_exit(NULL);
}
