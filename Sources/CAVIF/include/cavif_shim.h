// A small wrapper around libavif (with dav1d) for decoding AVIF: the header facts (size,
// alpha, depth, ICC profile or colour code points, the rotation and mirroring to apply) from
// the container alone, and a decode of the first image to 8-bit RGB(A) in the caller's
// buffer, cut to the clean aperture (clap) as libheif does for HEIC.
//
// Errors, as in every shim here: a status code, and a message copied into a fixed buffer where
// the failure happens (the decoder's, read with `ea_message`; the caller's `message` on
// create), never a pointer into the library's memory.
// Cancellation: libavif decodes a frame whole, not cancellable inside; the flag is
// checked before it and before the colour conversion. Parsing the container is not
// cancellable (headers only).
#ifndef ENLARGER_CAVIF_SHIM_H
#define ENLARGER_CAVIF_SHIM_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    EA_OK = 0,
    EA_ERR_TRUNCATED,
    EA_ERR_CORRUPT,
    EA_ERR_UNSUPPORTED,
    EA_ERR_TOO_LARGE,
    EA_ERR_NO_MEMORY,
    EA_ERR_CANCELLED,
} ea_status;

typedef struct {
    uint32_t width;        // as stored (the clean aperture when it is applied), before the
    uint32_t height;       //   rotation and mirroring
    int depth;             // bits per sample
    int has_alpha;
    int rotation;          // irot: quarter turns anticlockwise, 0-3
    int mirror;            // imir: -1 none, 0 top and bottom exchanged, 1 left and right exchanged
    int clean_aperture;    // a clap crop: 0 none, 1 applied (width and height are its), 2 invalid (not applied)
    const uint8_t *icc;    // the ICC profile (owned by the decoder), or NULL
    size_t icc_length;
    int primaries;         // the colour code points (H.273), when there is no ICC profile
    int transfer;
    double xy[8];          // the primaries' chromaticities: red, green, blue, white; x then y
} ea_info;

typedef struct ea_decoder ea_decoder;

/// Parses the container of `data` (which must outlive the decoder); no image may exceed
/// `max_pixels`. On failure returns NULL with `*status` and `message` set.
ea_decoder *ea_decoder_create(const uint8_t *data, size_t length, uint32_t max_pixels, ea_status *status,
                              char *message, size_t message_length);
void ea_read_info(const ea_decoder *decoder, ea_info *info);

/// Decodes the (first) image to `channels` (3 RGB or 4 straight RGBA) into `output`, rows
/// `stride` bytes apart; the size is the header's.
ea_status ea_decode(ea_decoder *decoder, int channels, uint8_t *output, size_t stride, const int32_t *cancel_flag);
/// Decodes a monochrome image (an alpha plane's tiles, read as an image of their own) and
/// writes its luma, full range, reduced to 8 bits, into `output`: row y at y × `stride`,
/// pixel x at x × `step` (every 4th byte from offset 3 for an RGBA buffer's alpha). The image
/// must be `width`×`height` after its clean aperture, or EA_ERR_CORRUPT.
ea_status ea_decode_luma(ea_decoder *decoder, uint8_t *output, size_t stride, size_t step, uint32_t width,
                         uint32_t height, const int32_t *cancel_flag);
const char *ea_message(const ea_decoder *decoder);
void ea_decoder_destroy(ea_decoder *decoder);

#endif
