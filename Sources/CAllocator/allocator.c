#include "enlarger_allocator.h"

#include <stdlib.h>  // defines __GLIBC__ under glibc

#if defined(__GLIBC__)
#include <malloc.h>

int enlarger_keep_freed_memory(int mapped_from, int kept) {
    return mallopt(M_MMAP_THRESHOLD, mapped_from) == 1 && mallopt(M_TRIM_THRESHOLD, kept) == 1;
}
#else
int enlarger_keep_freed_memory(int mapped_from, int kept) {
    (void)mapped_from;
    (void)kept;
    return 0;
}
#endif
