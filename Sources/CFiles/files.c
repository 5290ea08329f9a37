#define _GNU_SOURCE
#include "enlarger_files.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifdef __linux__
#include <linux/openat2.h>
#endif

int enlarger_open_beneath(int dirfd, const char *path) {
#if defined(__linux__) && defined(SYS_openat2)
    // O_PATH first: it opens nothing (no device driver's open, no FIFO rendezvous), so the
    // type is checked before any side effect of opening for reading.
    struct open_how how;
    memset(&how, 0, sizeof how);
    how.flags = O_PATH | O_CLOEXEC;
    how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
    long located;
    do {
        located = syscall(SYS_openat2, dirfd, path, &how, sizeof how);
    } while (located < 0 && errno == EINTR);
    if (located < 0) return -errno;
    struct stat status;
    if (fstat((int)located, &status) != 0) {
        int error = errno;
        close((int)located);
        return -error;
    }
    if (!S_ISREG(status.st_mode)) {
        close((int)located);
        return ENLARGER_NOT_REGULAR;
    }
    // Reopened through its descriptor, the very file that was checked (no second lookup
    // of `path`, which could now name something else).
    char name[64];
    snprintf(name, sizeof name, "/proc/self/fd/%ld", located);
    int fd;
    do {
        fd = open(name, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    } while (fd < 0 && errno == EINTR);
    int error = errno;
    close((int)located);
    return fd < 0 ? -error : fd;
#else
    (void)dirfd;
    (void)path;
    return -ENOSYS;
#endif
}

int enlarger_open_directory_beneath(int dirfd, const char *path) {
#if defined(__linux__) && defined(SYS_openat2)
    struct open_how how;
    memset(&how, 0, sizeof how);
    how.flags = O_PATH | O_DIRECTORY | O_CLOEXEC;
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
    return enlarger_renameat_noreplace(AT_FDCWD, from, to);
}

int enlarger_renameat_noreplace(int dirfd, const char *from, const char *to) {
#if defined(__linux__) && defined(SYS_renameat2)
    long result;
    do {
        result = syscall(SYS_renameat2, dirfd, from, dirfd, to, RENAME_NOREPLACE);
    } while (result < 0 && errno == EINTR);
    if (result == 0) return 0;
    if (errno != EINVAL && errno != ENOSYS) return -errno;
#endif
    // No RENAME_NOREPLACE here: a hard link fails with EEXIST just the same.
    if (linkat(dirfd, from, dirfd, to, 0) != 0) return -errno;
    unlinkat(dirfd, from, 0);
    return 0;
}

int enlarger_sync_file_system(int fd) {
#ifdef __linux__
    return syncfs(fd) == 0 ? 0 : -errno;
#else
    sync();
    return 0;
#endif
}
