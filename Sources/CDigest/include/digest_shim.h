// SHA-256 from the system's libcrypto (OpenSSL 3, Debian's libssl-dev), which uses the CPU's
// SHA instructions where it has them. One call over one buffer: no state crosses into Swift.
//
// Errors, as in every shim here: a status code, never a pointer into the library's memory.
// Not cancellable: hashing runs at gigabytes a second, and its input is bounded by the
// caller's input limit (64 MiB takes a few tens of milliseconds).
#ifndef ENLARGER_CDIGEST_SHIM_H
#define ENLARGER_CDIGEST_SHIM_H

#include <stddef.h>
#include <stdint.h>

enum { ED_SHA256_LENGTH = 32 };

typedef enum {
    ED_OK = 0,
    ED_ERR_FAILED,  // libcrypto refused (in practice: it could not allocate its context)
} ed_status;

// Writes the SHA-256 of `length` bytes at `data` (NULL allowed when `length` is 0) to `out`.
ed_status ed_sha256(const void *data, size_t length, uint8_t out[ED_SHA256_LENGTH]);

#endif
