#include "digest_shim.h"

#include <openssl/evp.h>

ed_status ed_sha256(const void *data, size_t length, uint8_t out[ED_SHA256_LENGTH]) {
    static const uint8_t nothing = 0;
    unsigned int written = 0;
    if (data == NULL) {
        if (length != 0) return ED_ERR_FAILED;
        data = &nothing;
    }
    if (EVP_Digest(data, length, out, &written, EVP_sha256(), NULL) != 1) return ED_ERR_FAILED;
    return written == ED_SHA256_LENGTH ? ED_OK : ED_ERR_FAILED;
}
