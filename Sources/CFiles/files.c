#define _GNU_SOURCE
#include "enlarger_files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifdef __linux__
#include <linux/openat2.h>
#endif

int enlarger_open_beneath(int dirfd, const char *path) {
#if defined(__linux__) && defined(SYS_openat2)
    struct open_how how;
    memset(&how, 0, sizeof how);
    how.flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    long fd;
    do {
        fd = syscall(SYS_openat2, dirfd, path, &how, sizeof how);
    } while (fd < 0 && errno == EINTR);
    return fd < 0 ? -errno : (int)fd;
#else
    (void)dirfd;
    (void)path;
    return -ENOSYS;
#endif
}

int enlarger_rename_noreplace(const char *from, const char *to) {
#if defined(__linux__) && defined(SYS_renameat2)
    long result;
    do {
        result = syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, RENAME_NOREPLACE);
    } while (result < 0 && errno == EINTR);
    if (result == 0) return 0;
    if (errno != EINVAL && errno != ENOSYS) return -errno;
#endif
    // No RENAME_NOREPLACE here: a hard link fails with EEXIST just the same.
    if (link(from, to) != 0) return -errno;
    unlink(from);
    return 0;
}
