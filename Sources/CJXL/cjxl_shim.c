#include "cjxl_shim.h"
#include "enlarger_loader.h"

#include <jxl/decode.h>
#include <jxl/version.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The library's functions this shim calls, resolved when first needed (see enlarger_loader.h).
#define EX_FUNCTIONS(X) \
    X(JxlDecoderCreate) \
    X(JxlDecoderDestroy) \
    X(JxlDecoderFlushImage) \
    X(JxlDecoderGetBasicInfo) \
    X(JxlDecoderGetColorAsEncodedProfile) \
    X(JxlDecoderGetColorAsICCProfile) \
    X(JxlDecoderGetFrameHeader) \
    X(JxlDecoderGetICCProfileSize) \
    X(JxlDecoderImageOutBufferSize) \
    X(JxlDecoderProcessInput) \
    X(JxlDecoderSetCoalescing) \
    X(JxlDecoderSetImageOutBuffer) \
    X(JxlDecoderSetInput) \
    X(JxlDecoderSetKeepOrientation) \
    X(JxlDecoderSetParallelRunner) \
    X(JxlDecoderSetPreferredColorProfile) \
    X(JxlDecoderSetUnpremultiplyAlpha) \
    X(JxlDecoderSubscribeEvents) \
    X(JxlDecoderVersion)

#define EX_TEXT(x) #x
#define EX_NUMBER(x) EX_TEXT(x)
// Before 1.0 each minor version of libjxl is an ABI of its own, and its soname says which.
#if JPEGXL_MAJOR_VERSION == 0
#define EX_SONAME "libjxl.so.0." EX_NUMBER(JPEGXL_MINOR_VERSION)
#else
#define EX_SONAME "libjxl.so." EX_NUMBER(JPEGXL_MAJOR_VERSION)
#endif

EL_LIBRARY(EX_FUNCTIONS, libjxl, ex_library, ex_compatible, EX_SONAME, "libjxl.so");

static int ex_compatible(char *message, size_t length) {
    uint32_t loaded = libjxl.JxlDecoderVersion();
    uint32_t major = loaded / 1000000u, minor = loaded / 1000u % 1000u;
    int same = major == JPEGXL_MAJOR_VERSION
               && (major == 0 ? minor == JPEGXL_MINOR_VERSION : minor >= JPEGXL_MINOR_VERSION);
    if (!same) {
        snprintf(message, length, "libjxl %u.%u was loaded; Enlarger was built for %d.%d", major, minor,
                 JPEGXL_MAJOR_VERSION, JPEGXL_MINOR_VERSION);
    }
    return same;
}

static void ex_say(char *message, size_t length, const char *text) {
    if (message != NULL && length > 0) snprintf(message, length, "%s", text);
}

static int ex_cancelled(const int32_t *flag) {
    return flag != NULL && __atomic_load_n(flag, __ATOMIC_ACQUIRE) != 0;
}

// The decoder's tasks, run one after another on the calling thread. Once the flag is set the
// rest are skipped, not failed: libjxl 0.7 traps (JXL_CHECK) when a runner reports an error
// in some of its stages, so a cancelled decode runs on, its tasks empty, to where the caller
// looks at the flag and throws the result away (with buffers the skipped tasks never
// filled: nothing of that decode is used).
static JxlParallelRetCode ex_run(void *runner_opaque, void *jpegxl_opaque, JxlParallelRunInit init,
                                 JxlParallelRunFunction run, uint32_t start, uint32_t end) {
    const int32_t *flag = runner_opaque;
    JxlParallelRetCode started = init(jpegxl_opaque, 1);
    if (started != 0) return started;
    for (uint32_t i = start; i < end && !ex_cancelled(flag); i++) run(jpegxl_opaque, i, 0);
    return 0;
}

// A bare codestream or the container's signature box: what JxlSignatureCheck accepts, read
// here without loading libjxl for input that is no JPEG XL.
static int ex_signature(const uint8_t *data, size_t length) {
    static const uint8_t container[12] = {0, 0, 0, 0x0C, 'J', 'X', 'L', ' ', 0x0D, 0x0A, 0x87, 0x0A};
    return (length >= 2 && data[0] == 0xFF && data[1] == 0x0A) || (length >= 12 && memcmp(data, container, 12) == 0);
}

// A decoder running its tasks on `ex_run` with `cancel_flag`, given the first `length` bytes
// of its input. The input is never marked closed: libjxl 0.7 then reports a cut file as
// needing more input (closed, it would call it an error like any damage).
static JxlDecoder *ex_open(const uint8_t *data, size_t length, int events, const int32_t *cancel_flag,
                           char *message, size_t message_length) {
    JxlDecoder *decoder = libjxl.JxlDecoderCreate(NULL);
    if (decoder == NULL) {
        ex_say(message, message_length, "out of memory starting a JPEG XL decoder");
        return NULL;
    }
    if (libjxl.JxlDecoderSubscribeEvents(decoder, events) != JXL_DEC_SUCCESS
        || libjxl.JxlDecoderSetKeepOrientation(decoder, JXL_TRUE) != JXL_DEC_SUCCESS
        || libjxl.JxlDecoderSetUnpremultiplyAlpha(decoder, JXL_TRUE) != JXL_DEC_SUCCESS
        || libjxl.JxlDecoderSetParallelRunner(decoder, ex_run, (void *)cancel_flag) != JXL_DEC_SUCCESS
        || libjxl.JxlDecoderSetInput(decoder, data, length) != JXL_DEC_SUCCESS) {
        ex_say(message, message_length, "the JPEG XL decoder refused its settings");
        libjxl.JxlDecoderDestroy(decoder);
        return NULL;
    }
    return decoder;
}

// What a decoder status other than the awaited events means.
static ex_status ex_failure(JxlDecoderStatus status, const int32_t *cancel_flag, char *message, size_t length) {
    if (ex_cancelled(cancel_flag)) {
        ex_say(message, length, "cancelled");
        return EX_ERR_CANCELLED;
    }
    if (status == JXL_DEC_NEED_MORE_INPUT) {
        ex_say(message, length, "the JPEG XL data ends early");
        return EX_ERR_TRUNCATED;
    }
    ex_say(message, length, status == JXL_DEC_ERROR ? "damaged JPEG XL data (libjxl could not decode it)"
                                                    : "unexpected JPEG XL decoder event");
    return EX_ERR_CORRUPT;
}

static int ex_is_srgb(const JxlColorEncoding *encoding) {
    if (encoding->transfer_function != JXL_TRANSFER_FUNCTION_SRGB || encoding->white_point != JXL_WHITE_POINT_D65) {
        return 0;
    }
    return encoding->color_space == JXL_COLOR_SPACE_GRAY
           || (encoding->color_space == JXL_COLOR_SPACE_RGB && encoding->primaries == JXL_PRIMARIES_SRGB);
}

// Reads the colour encoding at JXL_DEC_COLOR_ENCODING: whether the decoded pixels will be
// sRGB, or else a copy of their profile.
static ex_status ex_read_colour(JxlDecoder *decoder, ex_info *info, char *message, size_t message_length) {
    // An XYB (lossy) image is decoded to sRGB (see ex_decode): no profile to apply.
    if (!info->lossless) {
        info->srgb = 1;
        return EX_OK;
    }
    JxlColorEncoding encoding;
    if (libjxl.JxlDecoderGetColorAsEncodedProfile(decoder, NULL, JXL_COLOR_PROFILE_TARGET_DATA, &encoding) == JXL_DEC_SUCCESS
        && ex_is_srgb(&encoding)) {
        info->srgb = 1;
        return EX_OK;
    }
    size_t size = 0;
    // A profile is a few KiB; one of megabytes (libjxl allows 256 MiB) is not copied.
    if (libjxl.JxlDecoderGetICCProfileSize(decoder, NULL, JXL_COLOR_PROFILE_TARGET_DATA, &size) != JXL_DEC_SUCCESS
        || size == 0 || size > (4u << 20)) {
        // No profile to be had: the pixels are taken as sRGB.
        info->srgb = 1;
        return EX_OK;
    }
    info->icc = malloc(size);
    if (info->icc == NULL) {
        ex_say(message, message_length, "out of memory reading the JPEG XL colour profile");
        return EX_ERR_NO_MEMORY;
    }
    if (libjxl.JxlDecoderGetColorAsICCProfile(decoder, NULL, JXL_COLOR_PROFILE_TARGET_DATA, info->icc, size)
        != JXL_DEC_SUCCESS) {
        free(info->icc);
        info->icc = NULL;
        info->srgb = 1;
        return EX_OK;
    }
    info->icc_length = size;
    return EX_OK;
}

ex_status ex_read_header(const uint8_t *data, size_t length, ex_info *info, char *message, size_t message_length) {
    memset(info, 0, sizeof *info);
    if (!ex_signature(data, length)) {
        ex_say(message, message_length, "not a JPEG XL image: no codestream or container signature");
        return EX_ERR_NOT_JXL;
    }
    if (!el_ready(&ex_library, message, message_length)) return EX_ERR_UNSUPPORTED;
    JxlDecoder *decoder = ex_open(data, length, JXL_DEC_BASIC_INFO | JXL_DEC_COLOR_ENCODING | JXL_DEC_FRAME, NULL,
                                  message, message_length);
    if (decoder == NULL) return EX_ERR_CORRUPT;
    // Layers one by one, as stored: with coalescing (the decode's way) libjxl reports only
    // the blended, image-sized frame, and would hide a layer of any size behind a tiny image.
    if (libjxl.JxlDecoderSetCoalescing(decoder, JXL_FALSE) != JXL_DEC_SUCCESS) {
        libjxl.JxlDecoderDestroy(decoder);
        ex_say(message, message_length, "the JPEG XL decoder refused its settings");
        return EX_ERR_CORRUPT;
    }
    ex_status result = EX_OK;
    int colour_read = 0;
    for (;;) {
        JxlDecoderStatus status = libjxl.JxlDecoderProcessInput(decoder);
        if (status == JXL_DEC_BASIC_INFO) {
            JxlBasicInfo basic;
            if (libjxl.JxlDecoderGetBasicInfo(decoder, &basic) != JXL_DEC_SUCCESS) {
                result = ex_failure(JXL_DEC_ERROR, NULL, message, message_length);
                break;
            }
            if (basic.xsize > 0x7FFFFFFF || basic.ysize > 0x7FFFFFFF) {
                ex_say(message, message_length, "the JPEG XL image's size does not fit a 32-bit integer");
                result = EX_ERR_CORRUPT;
                break;
            }
            info->width = (int)basic.xsize;
            info->height = (int)basic.ysize;
            info->orientation = basic.orientation >= 1 && basic.orientation <= 8 ? (int)basic.orientation : 1;
            info->colour_channels = basic.num_color_channels == 1 ? 1 : 3;
            info->has_alpha = basic.alpha_bits > 0;
            info->bits_per_sample = (int)basic.bits_per_sample;
            info->animated = basic.have_animation ? 1 : 0;
            info->lossless = basic.uses_original_profile ? 1 : 0;
            uint32_t extra = basic.num_extra_channels;
            if (basic.alpha_bits > 0 && extra > 0) extra -= 1;
            info->extra_channels = extra > 0x7FFFFFFF ? 0x7FFFFFFF : (int)extra;
        } else if (status == JXL_DEC_COLOR_ENCODING) {
            result = ex_read_colour(decoder, info, message, message_length);
            if (result != EX_OK) break;
            colour_read = 1;
        } else if (status == JXL_DEC_FRAME) {
            JxlFrameHeader frame;
            if (libjxl.JxlDecoderGetFrameHeader(decoder, &frame) != JXL_DEC_SUCCESS) {
                result = ex_failure(JXL_DEC_ERROR, NULL, message, message_length);
                break;
            }
            uint64_t area = (uint64_t)frame.layer_info.xsize * frame.layer_info.ysize;
            if (area > (uint64_t)info->largest_layer_width * info->largest_layer_height) {
                info->largest_layer_width = frame.layer_info.xsize;
                info->largest_layer_height = frame.layer_info.ysize;
            }
            info->layers += 1;
            // The first displayed frame ends with the last layer, or in an animation with the
            // first that is shown for a while.
            if (frame.is_last || (info->animated && frame.duration > 0)) break;
            if (info->layers >= EX_MAX_LAYERS) {
                info->layers_beyond_scan = 1;
                break;
            }
        } else if (colour_read && (status == JXL_DEC_NEED_MORE_INPUT || status == JXL_DEC_SUCCESS)) {
            // A cut file: its headers are read as far as they go (the decode goes no further).
            break;
        } else {
            result = ex_failure(status, NULL, message, message_length);
            break;
        }
    }
    libjxl.JxlDecoderDestroy(decoder);
    if (result != EX_OK) ex_free(info);
    return result;
}

void ex_free(ex_info *info) {
    free(info->icc);
    info->icc = NULL;
    info->icc_length = 0;
}

ex_status ex_decode(const uint8_t *data, size_t length, int width, int height, int channels, uint8_t *output,
                    size_t output_length, int keep_partial, int *partial, const int32_t *cancel_flag, char *message,
                    size_t message_length) {
    *partial = 0;
    if (ex_cancelled(cancel_flag)) {
        ex_say(message, message_length, "cancelled");
        return EX_ERR_CANCELLED;
    }
    if (channels != 1 && channels != 3 && channels != 4) {
        ex_say(message, message_length, "a JPEG XL decode needs 1, 3 or 4 channels");
        return EX_ERR_CORRUPT;
    }
    if (!el_ready(&ex_library, message, message_length)) return EX_ERR_UNSUPPORTED;
    // The whole input at once: handed over in slices, libjxl copies what it has not consumed
    // into a buffer of its own each time it asks for more. Cancellation is looked at by the
    // task runner.
    JxlDecoder *decoder = ex_open(data, length, JXL_DEC_BASIC_INFO | JXL_DEC_COLOR_ENCODING | JXL_DEC_FULL_IMAGE,
                                  cancel_flag, message, message_length);
    if (decoder == NULL) return EX_ERR_CORRUPT;
    int xyb = 0, grey = 0;
    JxlPixelFormat format = {(uint32_t)channels, JXL_TYPE_UINT8, JXL_NATIVE_ENDIAN, 0};
    if (keep_partial) memset(output, 0, output_length);
    int buffer_set = 0;
    ex_status result = EX_OK;
    for (;;) {
        JxlDecoderStatus status = libjxl.JxlDecoderProcessInput(decoder);
        if (status == JXL_DEC_BASIC_INFO) {
            JxlBasicInfo basic;
            if (libjxl.JxlDecoderGetBasicInfo(decoder, &basic) != JXL_DEC_SUCCESS || (int)basic.xsize != width
                || (int)basic.ysize != height) {
                ex_say(message, message_length, "the JPEG XL decode was asked for another size than its header gives");
                result = EX_ERR_CORRUPT;
                break;
            }
            xyb = !basic.uses_original_profile;
            grey = basic.num_color_channels == 1;
        } else if (status == JXL_DEC_COLOR_ENCODING) {
            // XYB is converted to sRGB here, not to libjxl's default for an original that
            // only an ICC profile describes (linear sRGB: banded in 8 bits).
            if (xyb) {
                JxlColorEncoding srgb;
                memset(&srgb, 0, sizeof srgb);
                srgb.color_space = grey ? JXL_COLOR_SPACE_GRAY : JXL_COLOR_SPACE_RGB;
                srgb.white_point = JXL_WHITE_POINT_D65;
                srgb.primaries = JXL_PRIMARIES_SRGB;
                srgb.transfer_function = JXL_TRANSFER_FUNCTION_SRGB;
                srgb.rendering_intent = JXL_RENDERING_INTENT_RELATIVE;
                if (libjxl.JxlDecoderSetPreferredColorProfile(decoder, &srgb) != JXL_DEC_SUCCESS) {
                    ex_say(message, message_length, "libjxl refused to decode the XYB image to sRGB");
                    result = EX_ERR_CORRUPT;
                    break;
                }
            }
        } else if (status == JXL_DEC_NEED_IMAGE_OUT_BUFFER) {
            size_t needed = 0;
            if (libjxl.JxlDecoderImageOutBufferSize(decoder, &format, &needed) != JXL_DEC_SUCCESS || needed > output_length
                || libjxl.JxlDecoderSetImageOutBuffer(decoder, &format, output, needed) != JXL_DEC_SUCCESS) {
                ex_say(message, message_length, "the JPEG XL image does not fit the buffer its header sized");
                result = EX_ERR_CORRUPT;
                break;
            }
            buffer_set = 1;
        } else if (status == JXL_DEC_FULL_IMAGE) {
            // The first frame (the rest of an animation is not read), unless its tasks were
            // skipped.
            if (ex_cancelled(cancel_flag)) result = ex_failure(status, cancel_flag, message, message_length);
            break;
        } else {
            result = ex_failure(status, cancel_flag, message, message_length);
            if (result == EX_ERR_TRUNCATED && keep_partial && buffer_set) {
                *partial = libjxl.JxlDecoderFlushImage(decoder) == JXL_DEC_SUCCESS;
                // The flush runs tasks too: cancelled during it, its image is not whole.
                if (ex_cancelled(cancel_flag)) result = ex_failure(status, cancel_flag, message, message_length);
            }
            break;
        }
    }
    libjxl.JxlDecoderDestroy(decoder);
    return result;
}
