// A small wrapper around libspng for what Enlarger needs: the header facts, rows decoded one
// at a time (so the caller can check cancellation and reduce as it goes, never holding a
// full-size image it does not need) and an encoder writing to memory. libspng reports every
// failure as a return code (no setjmp); this wrapper turns them into the few codes the
// pipeline distinguishes, with libspng's own text.
//
// Errors, as in every shim here: a status code, and a message copied into a fixed buffer where
// the failure happens (the decoder's, read with `ep_message`; the caller's `message` for the
// encoder), never a pointer into the library's memory.
// Cancellation: the decoder is cancellable
// between rows (the caller checks its flag between `ep_read_row` calls); the encoder polls
// its flag every 16 rows; reading the header is not cancellable (a few chunks, bounded).
#ifndef ENLARGER_CPNG_SHIM_H
#define ENLARGER_CPNG_SHIM_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    EP_OK = 0,
    EP_ERR_NOT_PNG,      // no PNG signature
    EP_ERR_TRUNCATED,    // the data ends before the image does
    EP_ERR_CORRUPT,      // damaged chunks, checksums or compressed data
    EP_ERR_UNSUPPORTED,  // a valid PNG this build cannot use
    EP_ERR_TOO_LARGE,    // above the limits given, or libspng's own
    EP_ERR_NO_MEMORY,
    EP_ERR_CANCELLED,
    EP_DONE,             // ep_read_row: no rows left
} ep_status;

typedef struct {
    uint32_t width;
    uint32_t height;
    int bit_depth;
    int color_type;      // PNG colour type: 0 grey, 2 RGB, 3 palette, 4 grey+alpha, 6 RGBA
    int interlaced;      // Adam7
    int has_trns;        // a tRNS chunk gives transparency to a colour or palette entries
    const uint8_t *icc;  // the decompressed iCCP profile (owned by the decoder), or NULL
    size_t icc_length;
    const uint8_t *exif; // the eXIf chunk (owned by the decoder), or NULL
    size_t exif_length;
} ep_info;

typedef struct ep_decoder ep_decoder;

/// Reads the header chunks of `data` (which must outlive the decoder) up to the first IDAT.
/// `max_chunk` bounds any one chunk, and the total of the ancillary chunks kept, decompressed.
/// `fail_on` follows the JPEG decoder's levels (0 none … 3 warning): at 0 and 1 checksum
/// mismatches are accepted; at 3 a damaged ancillary chunk fails instead of being skipped,
/// and so does a bad checksum anywhere, the chunks after the image included. At 0 a cut
/// file reads as if zeros followed: the rows before the cut decode, then a row fails with
/// EP_ERR_TRUNCATED (see `ep_ran_out`).
/// With `release_read` (only for a file mapped privately and page-aligned), the pages of
/// `data` read so far are given back to the system as decoding goes (they read back from the
/// file if touched again). Returns NULL only when out of memory.
ep_decoder *ep_decoder_create(const uint8_t *data, size_t length, size_t max_chunk, int fail_on, int release_read);
ep_status ep_read_header(ep_decoder *decoder, ep_info *info);

/// Starts decoding to `channels` 8-bit samples per pixel: 1 (grey sources without
/// transparency, 16-bit ones reduced to 8 bits), 3 (RGB) or 4 (RGBA, transparency applied).
ep_status ep_start(ep_decoder *decoder, int channels);

/// Which image row the next `ep_read_row` decodes, or EP_DONE when every row has been. A
/// non-interlaced image comes row after row, top to bottom; an interlaced one in its seven
/// passes, each revisiting rows.
ep_status ep_next_row(ep_decoder *decoder, uint32_t *row_index);

/// Decodes the next row into `row` (width × channels bytes). For an interlaced image only
/// that pass's pixels are written: `row` must be the row's place in a full-size buffer.
ep_status ep_read_row(ep_decoder *decoder, uint8_t *row, size_t length);

/// Whether the data ended before libspng had what it asked for: the file is cut.
int ep_ran_out(const ep_decoder *decoder);

/// The message of the last failure, copied into the decoder where it failed (the first
/// failure when libspng could only say that it cannot go on).
const char *ep_message(const ep_decoder *decoder);
void ep_decoder_destroy(ep_decoder *decoder);

/// Encodes `height` rows of `width` × `channels` (1 grey, 3 RGB, 4 RGBA) 8-bit samples as a
/// PNG at zlib `level` (0-9), embedding `icc` (may be NULL) as iCCP. `cancel_flag` (may be
/// NULL) is polled every 16 rows. On EP_OK `*output` is a malloc'd buffer of `*output_length`
/// bytes for the caller to free; otherwise `message` says why.
ep_status ep_encode(const uint8_t *pixels, uint32_t width, uint32_t height, int channels, int level,
                    const uint8_t *icc, size_t icc_length, const int32_t *cancel_flag,
                    uint8_t **output, size_t *output_length, char *message, size_t message_length);

#endif
