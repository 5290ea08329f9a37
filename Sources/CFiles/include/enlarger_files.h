#ifndef ENLARGER_FILES_H
#define ENLARGER_FILES_H

/// What `enlarger_open_beneath` returns for a path that is not a regular file; no errno
/// has this value.
#define ENLARGER_NOT_REGULAR (-100000)

/// Opens the regular file `path` for reading, resolved beneath the directory `dirfd` with
/// openat2(2) and RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS: `..` above the directory,
/// absolute paths and symbolic links that lead outside it fail with EXDEV, and /proc-style
/// magic links with ELOOP. The path is located with O_PATH and checked to be a regular file
/// before it is opened for reading (through /proc/self/fd, so the same file), so a device
/// node or FIFO is never opened. The file is opened non-blocking, close-on-exec, and never
/// as a controlling terminal.
///
/// Returns the new descriptor, ENLARGER_NOT_REGULAR, or -errno (-ENOSYS on kernels before
/// Linux 5.6).
int enlarger_open_beneath(int dirfd, const char *path);

/// Opens the directory `path` beneath `dirfd` as `enlarger_open_beneath` resolves a file
/// (O_PATH: good as the `dirfd` of a later `enlarger_open_beneath`). Returns the descriptor
/// or -errno.
int enlarger_open_directory_beneath(int dirfd, const char *path);

/// Renames `from` to `to` only if `to` does not exist: renameat2(2) with RENAME_NOREPLACE,
/// or link(2) then unlink(2) on file systems without it. Never replaces a file.
///
/// Returns 0, or -errno (-EEXIST when `to` exists).
int enlarger_rename_noreplace(const char *from, const char *to);

/// `enlarger_rename_noreplace` within the directory `dirfd` (both names relative to it).
int enlarger_renameat_noreplace(int dirfd, const char *from, const char *to);

/// Writes everything cached for the file system that holds `fd` to its disk: syncfs(2).
///
/// Returns 0, or -errno.
int enlarger_sync_file_system(int fd);

#endif
