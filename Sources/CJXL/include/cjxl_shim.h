// A small wrapper around libjxl's decoder for what Enlarger needs of a JPEG XL image (a bare
// codestream or the ISOBMFF container): the header's facts and the colour profile of the
// decoded pixels, then the first frame (an animation's composited first frame) as 8-bit
// grey, RGB or straight RGBA in the caller's buffer, in the file's stored orientation (the
// caller applies the orientation, as for EXIF).
//
// Errors, as in every shim here: a status code, and a message copied into the caller's
// fixed buffer, never a pointer into the library's memory.
// Cancellation: each function below says whether it can be cancelled.
#ifndef ENLARGER_CJXL_SHIM_H
#define ENLARGER_CJXL_SHIM_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    EX_OK = 0,
    EX_ERR_NOT_JXL,
    EX_ERR_TRUNCATED,
    EX_ERR_CORRUPT,
    EX_ERR_NO_MEMORY,
    EX_ERR_CANCELLED,
    EX_ERR_UNSUPPORTED,  // libjxl could not be loaded (or is another version than the one built for)
} ex_status;

typedef struct {
    int width;              // as stored, before `orientation`
    int height;
    int orientation;        // 1 (upright) to 8, as in EXIF
    int colour_channels;    // 1 grey, 3 colour
    int has_alpha;
    int bits_per_sample;
    int animated;           // the first frame is the one decoded
    int lossless;           // the original colour space is kept (no XYB): modular or a JPEG transcode
    int srgb;               // the decoded pixels are sRGB (or sRGB's grey: always so for XYB): no profile
    uint8_t *icc;           // otherwise the decoded pixels' ICC profile (at most 4 MiB, else none is
                            // kept), malloc'd: free with ex_free
    size_t icc_length;
    int extra_channels;     // extra channels besides alpha (depth, spot colours, ...): libjxl decodes
                            // each as a plane of its own, which the pixels asked for do not show
    // The layers (frames) that make up the first displayed frame, as their headers say: a
    // layer may be larger than the image (it is cropped when blended), and libjxl decodes it
    // whole. Their count, the largest one's size (by area), and whether the scan stopped at
    // EX_MAX_LAYERS with more to come.
    int layers;
    uint32_t largest_layer_width;
    uint32_t largest_layer_height;
    int layers_beyond_scan;
} ex_info;

/// How many layers ex_read_header reads the headers of before it stops looking.
#define EX_MAX_LAYERS 256

/// Reads the header up to the colour encoding, then the headers of the layers of the first
/// displayed frame (libjxl skips their pixel data), without decoding pixels; `info->icc` is
/// set unless the pixels will be sRGB. Not cancellable: it reads headers only.
ex_status ex_read_header(const uint8_t *data, size_t length, ex_info *info, char *message, size_t message_length);

/// Frees what ex_read_header allocated (the ICC copy); the info stays readable otherwise.
void ex_free(ex_info *info);

/// Decodes the first frame, `width` × `height` as ex_read_header gave them, with `channels`
/// (1 grey, 3 RGB, 4 straight RGBA; a grey image's channels are repeated for 3 or 4) into
/// `output` (`width * channels` bytes per row, `output_length` in all). A cut file fails with
/// EX_ERR_TRUNCATED; with `keep_partial` the output is first cleared and what libjxl can
/// render of the data there is is left in it (`*partial` set to 1 when it could). An XYB
/// (lossy) image is decoded to sRGB. Cancellable: `cancel_flag` (may be NULL) is polled
/// before starting and by the decoder's task runner before each of its tasks (groups of
/// 256×256 pixels and the like), which skips the rest once it is set.
ex_status ex_decode(const uint8_t *data, size_t length, int width, int height, int channels, uint8_t *output,
                    size_t output_length, int keep_partial, int *partial, const int32_t *cancel_flag, char *message,
                    size_t message_length);

#endif
