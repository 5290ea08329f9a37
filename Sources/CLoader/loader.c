#include "enlarger_loader.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

// One lock for every library: each is loaded once per process, so contention is moot.
static pthread_mutex_t el_lock = PTHREAD_MUTEX_INITIALIZER;

static void el_say(el_library *library, const char *what, const char *detail) {
    snprintf(library->error, sizeof library->error, "%s%s%s", what, detail ? ": " : "", detail ? detail : "");
}

// Opens the first name that loads and resolves every symbol; on any failure nothing stays
// loaded and `library->error` says why.
static int el_load(el_library *library) {
    void *handle = NULL;
    const char *first = library->names[0];
    for (const char *const *name = library->names; *name != NULL && handle == NULL; name++) {
        // RTLD_NOW: a missing symbol shows here, not as a crash in the middle of a decode.
        // RTLD_LOCAL: its symbols stay out of the global namespace.
        handle = dlopen(*name, RTLD_NOW | RTLD_LOCAL);
    }
    if (handle == NULL) {
        char what[96];
        snprintf(what, sizeof what, "%s could not be loaded", first);
        el_say(library, what, dlerror());
        return 0;
    }
    for (size_t i = 0; i < library->count; i++) {
        dlerror();
        void *address = dlsym(handle, library->symbols[i]);
        if (address == NULL) {
            char what[128];
            snprintf(what, sizeof what, "%s lacks %s", first, library->symbols[i]);
            el_say(library, what, NULL);
            dlclose(handle);
            return 0;
        }
        library->slots[i] = address;
    }
    if (library->compatible != NULL && !library->compatible(library->error, sizeof library->error)) {
        dlclose(handle);
        return 0;
    }
    // Never closed: the process keeps using it.
    return 1;
}

int el_ready(el_library *library, char *message, size_t length) {
    int state = __atomic_load_n(&library->state, __ATOMIC_ACQUIRE);
    if (state == 0) {
        pthread_mutex_lock(&el_lock);
        state = library->state;
        if (state == 0) {
            state = el_load(library) ? 1 : 2;
            __atomic_store_n(&library->state, state, __ATOMIC_RELEASE);
        }
        pthread_mutex_unlock(&el_lock);
    }
    if (state != 1 && message != NULL && length > 0) snprintf(message, length, "%s", library->error);
    return state == 1;
}
