// A small wrapper around giflib for what Enlarger needs of a GIF: the first image, drawn on
// its logical screen, as RGB or RGBA. giflib reads from the caller's bytes through a cursor
// (no file, no copy), one row at a time (DGifGetLine, never DGifSlurp, which would load every
// frame of an animation), so that the only pixel memory is the caller's output and one row
// of palette indices, and cancellation is looked at between bands of rows.
//
// Errors, as in every shim here: a status code, and a message copied into the caller's
// fixed buffer, never a pointer into the library's memory. giflib never exits or jumps.
// Cancellation: each function below says whether it can be cancelled.
#ifndef ENLARGER_CGIF_SHIM_H
#define ENLARGER_CGIF_SHIM_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    EG_OK = 0,
    EG_ERR_NOT_GIF,
    EG_ERR_TRUNCATED,
    EG_ERR_CORRUPT,
    EG_ERR_NO_MEMORY,
    EG_ERR_CANCELLED,
} eg_status;

typedef struct {
    int width;              // the canvas: the logical screen, grown to hold the first image
    int height;             // when that image reaches past it (as browsers draw it)
    int frame_left;         // the first image on the canvas
    int frame_top;
    int frame_width;
    int frame_height;
    int interlaced;         // the first image's rows are stored in GIF's four passes
    int transparent_index;  // the first image's transparent palette index, or -1
    int has_alpha;          // a transparent index, or canvas the first image does not cover
    int animated;           // a looping (NETSCAPE2.0 or ANIMEXTS1.0) extension came first
    int colours;            // entries in the palette the first image uses
} eg_info;

/// Reads the screen descriptor and every block up to the first image's descriptor, without
/// decoding pixels. Not cancellable: it reads block headers (bounded by the input's length).
eg_status eg_read_header(const uint8_t *data, size_t length, eg_info *info, char *message, size_t message_length);

/// Decodes the first image onto the canvas `info` describes: `channels` 4 gives straight
/// (not premultiplied) RGBA, transparent where the image is transparent or absent; 3 gives
/// RGB (for an image with no transparency that covers the canvas). `output` holds the
/// canvas, `stride` bytes per row, `output_length` in all; it is cleared first. A palette
/// index past the palette's end is drawn opaque black. `*rows` is how many of the image's
/// rows were decoded, also when it fails (a cut file: EG_ERR_TRUNCATED): for an interlaced
/// image they are spread over the canvas, the others being left transparent black.
/// Cancellable: `cancel_flag` (may be NULL) is polled before starting and every 64 Ki
/// pixels.
eg_status eg_decode(const uint8_t *data, size_t length, const eg_info *info, int channels, uint8_t *output,
                    size_t stride, size_t output_length, const int32_t *cancel_flag, int *rows, char *message,
                    size_t message_length);

#endif
