// SPDX-License-Identifier: Apache-2.0
/*
 * LD_PRELOAD shim for CRIU 4.1.1 on Linux >= 6.16.
 *
 * Those kernels answer getsockopt(SOL_SOCKET, SO_PASSCRED or SO_PASSSEC) on inet sockets with
 * EOPNOTSUPP, and CRIU 4.1.1 then refuses to dump any TCP socket. The option can only be set on
 * unix/netlink sockets, so for every other socket its value is 0: report that. Fixed upstream
 * after 4.1.1; forkcore loads the shim only where `bunshin doctor` finds it needed.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>

typedef int (*getsockopt_fn)(int, int, int, void *, socklen_t *);

int getsockopt(int fd, int level, int name, void *value, socklen_t *len)
{
	static getsockopt_fn real_getsockopt;
	int ret;

	if (!real_getsockopt)
		real_getsockopt = (getsockopt_fn)dlsym(RTLD_NEXT, "getsockopt");
	ret = real_getsockopt(fd, level, name, value, len);
	if (ret < 0 && errno == EOPNOTSUPP && level == SOL_SOCKET &&
	    (name == SO_PASSCRED || name == SO_PASSSEC) && value && len && *len >= sizeof(int)) {
		memset(value, 0, sizeof(int));
		*len = sizeof(int);
		errno = 0;
		return 0;
	}
	return ret;
}
