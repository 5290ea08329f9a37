// A small wrapper around libheif for what Enlarger needs: the primary image's facts (size
// after the file's own rotation and mirroring, alpha, ICC profile, thumbnails), a decode of
// the primary image or of its first thumbnail to 8-bit RGB(A) in the caller's buffer, and an
// AVIF encoder writing to memory. libheif reports failures as values; this wrapper turns
// them into the few codes the pipeline distinguishes. libheif cannot be interrupted inside
// one image's decode: the cancellation flag is checked before and after it.
//
// Errors, as in every shim here: a status code, and a message copied into a fixed buffer where
// the failure happens (the decoder's, read with `eh_message`; the caller's `message` on create
// and for the encoder), never a pointer into the library's memory.
// Cancellation: parsing the container is not cancellable (headers only); decoding is checked
// before and after libheif's decode; AV1 encoding before libheif's encode (not inside it).
#ifndef ENLARGER_CHEIF_SHIM_H
#define ENLARGER_CHEIF_SHIM_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    EH_OK = 0,
    EH_ERR_NOT_HEIF,
    EH_ERR_TRUNCATED,
    EH_ERR_CORRUPT,
    EH_ERR_UNSUPPORTED,
    EH_ERR_TOO_LARGE,
    EH_ERR_NO_MEMORY,
    EH_ERR_CANCELLED,
} eh_status;

typedef struct {
    int width;             // displayed, after the file's transformations
    int height;
    int has_alpha;
    int bit_depth;         // of the luma
    int avif;              // AV1-coded (AVIF) rather than HEVC (HEIC)
    int thumbnail_width;   // of the first thumbnail, 0 when there is none
    int thumbnail_height;
    uint32_t thumbnail_id; // its item id
    const uint8_t *icc;    // the ICC profile (owned by the decoder), or NULL
    size_t icc_length;
    int nclx;              // colour given as code points (nclx) rather than a profile:
    int nclx_primaries;    //   the H.273 code points
    int nclx_transfer;
    double nclx_xy[8];     //   and the chromaticities (red, green, blue, white; x then y)
} eh_info;

typedef struct eh_decoder eh_decoder;

/// Parses the container of `data` (which must outlive the decoder) and finds the primary
/// image; neither side may exceed `max_side` px. On failure returns NULL with `*status` and
/// `message` set.
eh_decoder *eh_decoder_create(const uint8_t *data, size_t length, int max_side, eh_status *status,
                              char *message, size_t message_length);
void eh_read_info(const eh_decoder *decoder, eh_info *info);

/// Forgets the thumbnail (one that must not be decoded).
void eh_drop_thumbnail(eh_decoder *decoder);

/// Decodes the primary image (`thumbnail` 0) or its first thumbnail (1) to `channels` (3 RGB
/// or 4 RGBA, not premultiplied), expecting `width` × `height`, into `output` rows `stride`
/// bytes apart. `strict`: the codec's warnings fail the decode (0 for a cut file read at
/// fail_on none). Not cancellable inside libheif's decode: `cancel_flag` is checked before
/// it and before the copy out.
eh_status eh_decode(eh_decoder *decoder, int thumbnail, int channels, int width, int height,
                    uint8_t *output, size_t stride, int strict, const int32_t *cancel_flag);
const char *eh_message(const eh_decoder *decoder);
void eh_decoder_destroy(eh_decoder *decoder);

/// Encodes `width` × `height` pixels of `channels` (1 grey, 3 RGB, 4 RGBA) as AVIF at
/// `quality` (1-100) and encoder `speed` (0 slowest … 9 fastest), embedding `icc` (may be
/// NULL). On EH_OK `*output` is a malloc'd buffer of `*output_length` bytes for the caller
/// to free.
eh_status eh_encode_avif(const uint8_t *pixels, int width, int height, int channels, int quality, int speed,
                         const uint8_t *icc, size_t icc_length, const int32_t *cancel_flag,
                         uint8_t **output, size_t *output_length, char *message, size_t message_length);

#endif
