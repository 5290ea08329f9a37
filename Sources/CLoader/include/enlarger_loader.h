// Loads a codec library on first use rather than at program start. libheif, libavif and
// libjxl pull in some thirty more libraries (the AV1 and HEVC codecs, highway, brotli, abseil)
// whose mapping, relocation and static constructors cost every process about half of its
// start, though most processes (a client, `status`, a JPEG-only worker) never decode any of
// the three formats. Each shim names its library's sonames and the functions it calls; the
// first call that needs them loads the library, and a library that cannot be loaded is an
// error code of the shim (its format is then unsupported), never a failure to start.
#ifndef ENLARGER_LOADER_H
#define ENLARGER_LOADER_H

#include <stddef.h>

typedef struct {
    // The names to try with dlopen, in order (the soname first); NULL-terminated.
    const char *const *names;
    // The functions to resolve, and where each address goes (slots[i] for symbols[i]).
    const char *const *symbols;
    void **slots;
    size_t count;
    // Called once the functions are resolved: returns 1 if the loaded library is a version
    // the shim was compiled for, else 0 with a message. May be NULL.
    int (*compatible)(char *message, size_t length);
    // Set by el_ready: 0 not tried yet, 1 loaded, 2 failed (then `error` says why).
    int state;
    char error[256];
} el_library;

/// Declares, for an X-macro FUNCTIONS listing a library's functions, `table` (a struct of
/// pointers, one per function, each of its declared type: called as `table.name(...)`) and
/// `library` (the el_library that fills it from the first of the sonames given that loads,
/// then asks `compatible`).
#define EL_POINTER(name) __typeof__(name) *name;
#define EL_NAME(name) #name,
#define EL_LIBRARY(FUNCTIONS, table, library, compatible_check, ...)                                  \
    static struct {                                                                                    \
        FUNCTIONS(EL_POINTER)                                                                          \
    } table;                                                                                           \
    static const char *const library##_symbols[] = {FUNCTIONS(EL_NAME)};                             \
    _Static_assert(sizeof table == sizeof library##_symbols / sizeof *library##_symbols * sizeof(void *), \
                   "one pointer per symbol");                                                          \
    static int compatible_check(char *message, size_t length);                                         \
    static el_library library = {                                                                      \
        .names = (const char *const[]){__VA_ARGS__, NULL},                                             \
        .symbols = library##_symbols,                                                                  \
        .slots = (void **)&table,                                                                      \
        .count = sizeof library##_symbols / sizeof *library##_symbols,                                 \
        .compatible = compatible_check,                                                                \
    }

/// Loads `library` on the first call (one thread does; the others wait for it) and returns 1
/// when its functions are ready; 0 with its message copied into `message` (when given) when
/// it could not be loaded. A failure is final for the process's life.
int el_ready(el_library *library, char *message, size_t length);

#endif
