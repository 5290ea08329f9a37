#ifndef ENLARGER_ALLOCATOR_H
#define ENLARGER_ALLOCATOR_H

/// Asks glibc's allocator to serve blocks below `mapped_from` bytes from its heaps (not one
/// mapping each) and to keep up to `kept` bytes of free heap top per arena instead of
/// returning it to the system (mallopt(3) M_MMAP_THRESHOLD and M_TRIM_THRESHOLD; either
/// setting also ends glibc's dynamic adjustment of both).
///
/// Returns 1 when both were taken, 0 when one was refused or the C library is not glibc.
int enlarger_keep_freed_memory(int mapped_from, int kept);

#endif
