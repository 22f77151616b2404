/* Preloaded (through /etc/ld.so.preload in a private mount namespace) into LinuxCNC 2.9's
 * session by tests/common/lcnc_machine.rs for Launcher::StockRealtime.
 *
 * 2.9's rtapi_app, before it runs its threads SCHED_FIFO, raises RLIMIT_RTPRIO to unlimited and
 * falls back to SCHED_OTHER when that fails. Raising a hard limit takes CAP_SYS_RESOURCE, which
 * root lacks on a machine whose capability bounding set drops it (this VM's does), although root
 * keeps CAP_SYS_NICE, all that SCHED_FIFO needs. This makes that one call, by a process running
 * as root, succeed; every other call is the C library's. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <sys/resource.h>
#include <unistd.h>

int setrlimit(__rlimit_resource_t resource, const struct rlimit *limit)
{
    int (*real)(__rlimit_resource_t, const struct rlimit *) = dlsym(RTLD_NEXT, "setrlimit");
    if (!real) {
        errno = ENOSYS;
        return -1;
    }
    int rc = real(resource, limit);
    if (rc < 0 && errno == EPERM && resource == RLIMIT_RTPRIO && geteuid() == 0)
        return 0;
    return rc;
}
