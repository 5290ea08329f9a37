#ifndef ENLARGER_FILES_H
#define ENLARGER_FILES_H

/// Opens `path` for reading, resolved beneath the directory `dirfd` with openat2(2) and
/// RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS: `..` above the directory, absolute paths and
/// symbolic links that lead outside it fail with EXDEV, and /proc-style magic links with
/// ELOOP. The file is opened non-blocking (a FIFO cannot hang the caller), close-on-exec,
/// and never as a controlling terminal.
///
/// Returns the new descriptor, or -errno (-ENOSYS on kernels before Linux 5.6).
int enlarger_open_beneath(int dirfd, const char *path);

/// Renames `from` to `to` only if `to` does not exist: renameat2(2) with RENAME_NOREPLACE,
/// or link(2) then unlink(2) on file systems without it. Never replaces a file.
///
/// Returns 0, or -errno (-EEXIST when `to` exists).
int enlarger_rename_noreplace(const char *from, const char *to);

#endif
