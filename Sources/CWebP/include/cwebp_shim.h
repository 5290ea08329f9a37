// A small wrapper around libwebp for what Enlarger needs: the header facts and chunks
// (ICC, EXIF), a decode straight to a given size (libwebp's scaled decode: the shrink-on-load
// of WebP) into the caller's buffer, fed in slices so that cancellation is checked between
// them, and an encoder (lossy or lossless) writing to memory. Failures come back as codes
// with a message; libwebp never exits or jumps.
//
// Errors, as in every shim here: a status code, and a message copied into a fixed buffer where
// the failure happens (always the caller's `message`), never a pointer into the library's
// memory.
// Cancellation: each function below says whether it can be cancelled.
#ifndef ENLARGER_CWEBP_SHIM_H
#define ENLARGER_CWEBP_SHIM_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    EW_OK = 0,
    EW_ERR_NOT_WEBP,
    EW_ERR_TRUNCATED,
    EW_ERR_CORRUPT,
    EW_ERR_UNSUPPORTED,
    EW_ERR_NO_MEMORY,
    EW_ERR_CANCELLED,
} ew_status;

typedef struct {
    int width;           // the canvas
    int height;
    int has_alpha;
    int has_animation;
    int lossless;        // 1 lossless (VP8L), 0 lossy (VP8) or mixed
    int cut;             // the RIFF header claims more bytes than there are (the message says so)
    const uint8_t *icc;  // the ICCP chunk's payload, inside the input, or NULL
    size_t icc_length;
    const uint8_t *exif; // the EXIF chunk's payload, inside the input, or NULL
    size_t exif_length;
} ew_info;

/// Reads the RIFF header and chunks of `data` without decoding pixels. A cut file whose
/// header still reads is not a failure here: `info->cut` is set and `message` says so.
/// Not cancellable: it reads a few chunk headers.
ew_status ew_read_header(const uint8_t *data, size_t length, ew_info *info, char *message, size_t message_length);

/// Decodes a still image to `width` × `height` (libwebp scales when this is not the canvas
/// size) with `channels` (3 RGB, 4 RGBA, not premultiplied) into `output` (`stride` bytes
/// per row, `output_length` in all). An animated file decodes its first frame, at the canvas
/// size only, straight into `output`. `*rows` is how many rows from the top were decoded,
/// also when it fails (a cut file: EW_ERR_TRUNCATED). Cancellable: `cancel_flag` (may be
/// NULL) is polled before starting and between slices of 64 KiB of input.
ew_status ew_decode(const uint8_t *data, size_t length, int width, int height, int channels,
                    uint8_t *output, size_t stride, size_t output_length, const int32_t *cancel_flag,
                    int *rows, char *message, size_t message_length);

/// Encodes `width` × `height` pixels of `channels` (1 grey, 3 RGB, 4 RGBA) 8-bit samples:
/// lossy at `quality` (1-100), or lossless (`quality` then trades size for time), embedding
/// `icc` (may be NULL). `cancel_flag` is polled through libwebp's progress hook. On EW_OK
/// `*output` is a malloc'd buffer of `*output_length` bytes for the caller to free.
ew_status ew_encode(const uint8_t *pixels, int width, int height, int channels, int quality, int lossless,
                    const uint8_t *icc, size_t icc_length, const int32_t *cancel_flag,
                    uint8_t **output, size_t *output_length, char *message, size_t message_length);

#endif
