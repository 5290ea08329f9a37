// A setjmp-guarded wrapper around libjpeg-turbo. libjpeg reports errors by longjmp from its
// error handler, which Swift cannot survive, so every libjpeg call happens inside this file
// behind a setjmp and comes back as an `ej_status`. Warnings (truncated or corrupt data that
// libjpeg would fill with grey) are turned into errors here too, as far as the decoder's
// `ej_fail_on` says.
//
// Errors, as in every shim here: a status code, and a message copied into a fixed buffer where
// the failure happens (the decoder's, read with `ej_message`; the caller's `message` for the
// encoder), never a pointer into the library's memory.
//
// Cancellation: decoding is cancellable between iMCU rows (libjpeg's progress hook polls the
// flag) and encoding every 16 rows; reading the header is not (bounded by the input).
#ifndef ENLARGER_CJPEG_SHIM_H
#define ENLARGER_CJPEG_SHIM_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    EJ_OK = 0,
    EJ_ERR_NOT_JPEG,
    EJ_ERR_TRUNCATED,
    EJ_ERR_CORRUPT,
    EJ_ERR_UNSUPPORTED,
    EJ_ERR_TOO_LARGE,
    EJ_ERR_TOO_MANY_SCANS,
    EJ_ERR_CANCELLED,
    EJ_ERR_NO_MEMORY,
    EJ_ERR_USAGE,
} ej_status;

/// An ICC profile is split over at most 255 APP2 markers of 65,519 bytes each.
#define EJ_ICC_BYTES_PER_MARKER 65519u
#define EJ_MAX_ICC_BYTES ((size_t)EJ_ICC_BYTES_PER_MARKER * 255u)

typedef enum {
    EJ_COLOR_UNKNOWN = 0,
    EJ_COLOR_GRAY,
    EJ_COLOR_YCBCR,
    EJ_COLOR_RGB,
    EJ_COLOR_CMYK,
    EJ_COLOR_YCCK,
} ej_color;

typedef struct {
    int width;               // as stored in the SOF marker (before EXIF orientation)
    int height;
    int components;          // in the file: 1, 3 or 4
    int color;               // an ej_color
    int progressive;         // 1 for multi-scan (SOF2/SOF10)
    int arithmetic;          // 1 for arithmetic coding (SOF9/SOF10)
    int adobe_marker;        // 1 if an Adobe APP14 marker was seen (CMYK is then stored inverted)
    int multi_scan;          // 1 if the components span several scans (libjpeg then buffers all coefficients)
    int max_h_samp;          // largest sampling factors: an MCU is 8*max_h_samp x 8*max_v_samp pixels
    int max_v_samp;
    size_t coefficient_bytes; // size of libjpeg's whole-image coefficient buffer, when it needs one
    const uint8_t *exif;     // the first APP1 "Exif\0\0" payload after its 6-byte header, or NULL
    size_t exif_length;      // points into the input
    const uint8_t *icc;      // the embedded ICC profile (APP2 chunks reassembled), or NULL
    size_t icc_length;       // valid while the decoder lives
    int precision;           // bits per sample (8; 12-bit files fail as unsupported before this)
} ej_info;

/// Which libjpeg warnings fail a decode, least sensitive first; each level fails on what the
/// ones before it fail on and more. NONE: no warning. TRUNCATED: data that ends early.
/// ERROR: also damaged entropy-coded data and the like. WARNING: every warning about the
/// image, also those that lose nothing (stray bytes before a marker between segments, an
/// unknown JFIF revision). A damaged ICC profile fails at no level: it is ignored. Errors
/// fail at every level.
typedef enum {
    EJ_FAIL_ON_NONE = 0,
    EJ_FAIL_ON_TRUNCATED = 1,
    EJ_FAIL_ON_ERROR = 2,
    EJ_FAIL_ON_WARNING = 3,
} ej_fail_on;

/// The least sensitive ej_fail_on that fails on libjpeg warning `msg_code` (above
/// EJ_FAIL_ON_WARNING: none does, as for a damaged ICC profile, which is ignored); `marker`
/// is its second parameter (the marker that followed, for JWRN_EXTRANEOUS_DATA).
int ej_warning_threshold(int msg_code, int marker);

/// Opaque decoder state (a jpeg_decompress_struct plus its jmp_buf and scratch rows).
typedef struct ej_decoder ej_decoder;

/// `cancel_flag` is polled (atomically) between iMCU rows and scanlines; it may be NULL.
/// `max_scans` bounds the number of scans of a multi-scan file (0 = no bound).
/// `max_memory` bounds libjpeg's whole-image buffers (a progressive file's coefficients);
/// beyond it decoding fails with EJ_ERR_NO_MEMORY (0 = no bound).
/// `fail_on` (an ej_fail_on) says which warnings fail; the others are counted.
ej_decoder *ej_decoder_create(const int32_t *cancel_flag, int max_scans, long max_memory, int fail_on);
/// Warnings accepted so far under the decoder's fail_on, and the first one's text (NULL if
/// none), valid while the decoder lives.
int ej_decoder_warnings(const ej_decoder *dec, const char **first);
void ej_decoder_destroy(ej_decoder *dec);

/// Before ej_read_header: read neither EXIF nor an ICC profile (for an embedded image, such as
/// a gain map, whose own metadata is not used).
void ej_decoder_skip_metadata(ej_decoder *dec);

/// Parses the markers up to the first scan. `data` must outlive the decoder. Of the APP1 and
/// APP2 markers only the EXIF payload and the ICC profile are used, read in place: the
/// profile's reassembly (at most EJ_MAX_ICC_BYTES) is the only copy made of them.
ej_status ej_read_header(ej_decoder *dec, const uint8_t *data, size_t length, ej_info *info);

/// For a CMYK or YCCK file: deliver 4-channel CMYK rows (ink amounts, 0 = none, Adobe's
/// inverted storage undone) instead of converting them to RGB, for a colour-managed
/// conversion by the caller. Call before starting.
void ej_set_keep_cmyk(ej_decoder *dec, int keep);

/// Starts decompression at a DCT scale of `scale_num`/8 (1…8) and reports the output size.
/// Output is 1 channel for grayscale files and 3 (RGB) for everything else: CMYK and YCCK
/// are converted to RGB here.
ej_status ej_start(ej_decoder *dec, int scale_num, int *out_width, int *out_height, int *out_channels);

/// Decodes up to `max_rows` rows into `dst` (rows `stride` bytes apart).
ej_status ej_read_rows(ej_decoder *dec, uint8_t *dst, size_t stride, int max_rows, int *rows_read);

/// Reads to the end of the image, turning any trailing damage into an error.
ej_status ej_finish(ej_decoder *dec);

/// Buffered-image mode for progressive files: starts decompression without decoding every
/// scan first, so that an early output pass can be taken as a preview.
ej_status ej_start_buffered(ej_decoder *dec, int scale_num, int *out_width, int *out_height, int *out_channels);
/// Consumes input until `scans` scans are complete (or the end of input); reports how many were.
ej_status ej_consume_scans(ej_decoder *dec, int scans, int *scans_completed, int *reached_eoi);
/// Begins an output pass showing the scans consumed so far; then `ej_read_rows` as usual.
/// `fast` selects libjpeg's fast integer IDCT (for previews).
ej_status ej_start_output_pass(ej_decoder *dec, int fast);
/// Ends the current output pass.
ej_status ej_finish_output_pass(ej_decoder *dec);

/// The message of the last failure (libjpeg's own text where it came from libjpeg).
const char *ej_message(const ej_decoder *dec);

/// Encodes interleaved 8-bit pixels (1 channel = grayscale, 3 = RGB) to a JPEG in memory.
/// On success `*out` holds `*out_length` bytes from malloc, to be released with `ej_free`
/// (or `free`). `cancel_flag` (may be NULL) is polled every 16 rows. `max_memory` (0 = no
/// bound) bounds the output buffer and libjpeg's whole-image buffers (progressive output):
/// beyond it encoding fails with EJ_ERR_NO_MEMORY, as it does when malloc fails. `icc` (may
/// be NULL) is an ICC profile to embed, `icc_length` bytes, at most EJ_MAX_ICC_BYTES (a
/// larger one fails with EJ_ERR_USAGE rather than wrap the one-byte APP2 marker count).
ej_status ej_encode(const uint8_t *pixels, int width, int height, int channels, int quality,
                    int progressive, int chroma_444, const int32_t *cancel_flag, size_t max_memory,
                    const uint8_t *icc, size_t icc_length,
                    uint8_t **out, unsigned long *out_length, char *message, size_t message_capacity);
void ej_free(void *pointer);

int32_t ej_atomic_load(const int32_t *p);
void ej_atomic_store(int32_t *p, int32_t value);

#endif
