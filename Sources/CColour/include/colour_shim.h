// A small wrapper around Little CMS 2 for what Enlarger needs: a transform from an image's
// embedded ICC profile to sRGB, applied to rows of 8-bit pixels. Errors come back as codes
// with a message (lcms itself is kept quiet: its log handler is replaced per context).
// A transform holds no per-call state (no pixel cache), so one may be shared by threads.
//
// Errors, as in every shim here: a status code, and a message copied into a fixed buffer where
// the failure happens (the caller's `message`), never a pointer into the library's memory.
// Cancellation: none here; `ec_transform_apply` converts the rows it is given, and the
// caller checks its flag between calls.
#ifndef ENLARGER_COLOUR_SHIM_H
#define ENLARGER_COLOUR_SHIM_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    EC_OK = 0,
    EC_ERR_BAD_PROFILE,   // not a readable ICC profile
    EC_ERR_MISMATCH,      // the profile's colour space is not the pixels' (e.g. a CMYK profile on RGB)
    EC_ERR_NO_TRANSFORM,  // lcms could not build the transform (a profile it cannot use)
} ec_status;

typedef enum {
    EC_PIXELS_GRAY = 1,  // one 8-bit channel; the result is grey with sRGB's tone curve
    EC_PIXELS_RGB = 3,   // three interleaved 8-bit channels; the result is sRGB
    EC_PIXELS_CMYK = 4,  // four: ink amounts (0 = none); the result is three-channel sRGB
    EC_PIXELS_RGBA = 5,  // RGB and a straight alpha; the result is sRGB, the alpha copied
} ec_pixels;

typedef struct ec_transform ec_transform;

/// A transform from `icc` (the profile's bytes, copied as needed) to sRGB for `pixels`, with
/// the perceptual rendering intent. On failure returns NULL with `*status` set and a message.
ec_transform *ec_transform_create(const uint8_t *icc, size_t length, int pixels, ec_status *status,
                                  char *message, size_t message_length);

/// Converts `count` pixels from `src` to `dst` (the same buffer only when the pixel sizes
/// are equal).
void ec_transform_apply(const ec_transform *transform, const uint8_t *src, uint8_t *dst, size_t count);

void ec_transform_destroy(ec_transform *transform);

/// An RGB ICC profile for colour given as code points (ITU-T H.273, as in a HEIF `nclx` box):
/// the chromaticities `xy` (red, green, blue, white: x then y each) and the transfer
/// characteristic `transfer` (1, 6, 14, 15 BT.709-like; 13 sRGB; 4 gamma 2.2; 5 gamma 2.8;
/// 8 linear). Written to a malloc'd buffer of `*length` bytes for the caller to free, with
/// `description` as its description; NULL for a transfer it cannot describe (PQ, HLG, ...).
uint8_t *ec_profile_from_primaries(const double xy[8], int transfer, const char *description, size_t *length);

#endif
