#include "cavif_shim.h"
#include "enlarger_loader.h"

#include <avif/avif.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The library's functions this shim calls, resolved when first needed (see enlarger_loader.h).
#define EA_FUNCTIONS(X) \
    X(avifColorPrimariesGetValues) \
    X(avifCropRectConvertCleanApertureBox) \
    X(avifDecoderCreate) \
    X(avifDecoderDestroy) \
    X(avifDecoderNextImage) \
    X(avifDecoderParse) \
    X(avifDecoderSetIOMemory) \
    X(avifDiagnosticsClearError) \
    X(avifImageSetViewRect) \
    X(avifImageYUVToRGB) \
    X(avifRGBImageSetDefaults) \
    X(avifResultToString) \
    X(avifVersion)

// libavif's soname counts its ABI, not its version: 0.11 is 15, and 1.x is 16.
#if AVIF_VERSION_MAJOR == 0 && AVIF_VERSION_MINOR == 11
#define EA_SONAME "libavif.so.15"
#elif AVIF_VERSION_MAJOR == 1
#define EA_SONAME "libavif.so.16"
#else
#define EA_SONAME "libavif.so"
#endif

EL_LIBRARY(EA_FUNCTIONS, libavif, ea_library, ea_compatible, EA_SONAME, "libavif.so");

static int ea_compatible(char *message, size_t length) {
    const char *version = libavif.avifVersion();
    unsigned major = 0, minor = 0;
    // Before 1.0 each minor version is an ABI of its own.
    if (sscanf(version, "%u.%u", &major, &minor) == 2 && major == AVIF_VERSION_MAJOR
        && (major == 0 ? minor == AVIF_VERSION_MINOR : minor >= AVIF_VERSION_MINOR)) {
        return 1;
    }
    snprintf(message, length, "libavif %.32s was loaded; Enlarger was built for %d.%d", version, AVIF_VERSION_MAJOR,
             AVIF_VERSION_MINOR);
    return 0;
}

struct ea_decoder {
    avifDecoder *decoder;
    // The clean aperture (clap) to cut out of each decoded frame, when `cropped`.
    avifCropRect crop;
    int cropped;
    int clap_invalid;
    char message[256];
};

static ea_status ea_classify(avifResult result) {
    switch (result) {
    case AVIF_RESULT_OK: return EA_OK;
    case AVIF_RESULT_TRUNCATED_DATA: return EA_ERR_TRUNCATED;
    case AVIF_RESULT_OUT_OF_MEMORY: return EA_ERR_NO_MEMORY;
    case AVIF_RESULT_NOT_IMPLEMENTED: case AVIF_RESULT_NO_CODEC_AVAILABLE: return EA_ERR_UNSUPPORTED;
    default: return EA_ERR_CORRUPT;
    }
}

static int ea_cancelled(const int32_t *flag) {
    return flag != NULL && __atomic_load_n(flag, __ATOMIC_ACQUIRE) != 0;
}

static void ea_say(char *message, size_t length, const char *context, avifResult result, const avifDecoder *decoder) {
    if (message == NULL || length == 0) return;
    const char *detail = decoder != NULL && decoder->diag.error[0] != '\0' ? decoder->diag.error : "";
    snprintf(message, length, "%s: %s%s%s", context, libavif.avifResultToString(result), detail[0] ? " (" : "",
             detail[0] ? detail : "");
    if (detail[0]) {
        size_t used = strlen(message);
        if (used + 1 < length) snprintf(message + used, length - used, ")");
    }
}

// Whether the top-level boxes claim more bytes than there are: a cut file, whatever libavif
// makes of it.
static int ea_cut_short(const uint8_t *data, size_t length) {
    size_t offset = 0;
    while (length - offset >= 8) {
        uint64_t size = (uint64_t)data[offset] << 24 | (uint64_t)data[offset + 1] << 16
                        | (uint64_t)data[offset + 2] << 8 | data[offset + 3];
        if (size == 1) {
            if (length - offset < 16) return 1;
            size = 0;
            for (int i = 8; i < 16; i++) size = size << 8 | data[offset + i];
        } else if (size == 0) {
            return 0;  // to the end of the file
        }
        if (size < 8) return 0;  // damaged, not short
        if (size > length - offset) return 1;
        offset += size;
    }
    return offset != length;
}

ea_decoder *ea_decoder_create(const uint8_t *data, size_t length, uint32_t max_pixels, ea_status *status,
                              char *message, size_t message_length) {
    if (!el_ready(&ea_library, message, message_length)) {
        *status = EA_ERR_UNSUPPORTED;
        return NULL;
    }
    ea_decoder *decoder = calloc(1, sizeof *decoder);
    if (decoder == NULL || (decoder->decoder = libavif.avifDecoderCreate()) == NULL) {
        free(decoder);
        *status = EA_ERR_NO_MEMORY;
        if (message != NULL && message_length > 0) snprintf(message, message_length, "out of memory creating an AVIF decoder");
        return NULL;
    }
    avifDecoder *avif = decoder->decoder;
    // Decoding runs on the caller's thread: the worker sizes its own thread pool.
    avif->maxThreads = 1;
    avif->codecChoice = AVIF_CODEC_CHOICE_DAV1D;
    avif->imageSizeLimit = max_pixels;
    avif->ignoreExif = AVIF_TRUE;
    avif->ignoreXMP = AVIF_TRUE;
    // The strict checks concern properties Enlarger does not use (pixi, an alpha item's
    // ispe) or that it checks itself (clap, below): files that newer libavif and the other
    // readers decode are not refused over them.
    avif->strictFlags = AVIF_STRICT_DISABLED;
    avifResult result = libavif.avifDecoderSetIOMemory(avif, data, length);
    if (result == AVIF_RESULT_OK) result = libavif.avifDecoderParse(avif);
    if (result != AVIF_RESULT_OK) {
        *status = ea_cut_short(data, length) ? EA_ERR_TRUNCATED : ea_classify(result);
        ea_say(message, message_length, "the AVIF container", result, avif);
        ea_decoder_destroy(decoder);
        return NULL;
    }
    const avifImage *image = avif->image;
    if (image->transformFlags & AVIF_TRANSFORM_CLAP) {
        avifDiagnostics diag;
        libavif.avifDiagnosticsClearError(&diag);
        if (libavif.avifCropRectConvertCleanApertureBox(&decoder->crop, &image->clap, image->width, image->height,
                                                image->yuvFormat, &diag)
            && decoder->crop.width > 0 && decoder->crop.height > 0) {
            decoder->cropped = 1;
        } else {
            decoder->clap_invalid = 1;
        }
    }
    *status = EA_OK;
    return decoder;
}

void ea_read_info(const ea_decoder *decoder, ea_info *info) {
    memset(info, 0, sizeof *info);
    const avifImage *image = decoder->decoder->image;
    info->width = decoder->cropped ? decoder->crop.width : image->width;
    info->height = decoder->cropped ? decoder->crop.height : image->height;
    info->depth = (int)image->depth;
    info->has_alpha = decoder->decoder->alphaPresent;
    info->rotation = image->transformFlags & AVIF_TRANSFORM_IROT ? image->irot.angle & 3 : 0;
    info->mirror = image->transformFlags & AVIF_TRANSFORM_IMIR ? image->imir.mode & 1 : -1;
    info->clean_aperture = decoder->cropped ? 1 : decoder->clap_invalid ? 2 : 0;
    if (image->icc.size > 0) {
        info->icc = image->icc.data;
        info->icc_length = image->icc.size;
    }
    info->primaries = image->colorPrimaries;
    info->transfer = image->transferCharacteristics;
    float xy[8];
    libavif.avifColorPrimariesGetValues(image->colorPrimaries, xy);
    for (int i = 0; i < 8; i++) info->xy[i] = xy[i];
}

// Decodes the frame and points `*source` at it, or at its clean aperture (a view into the
// frame's planes, in `view`: nothing is copied).
static ea_status ea_next_frame(ea_decoder *decoder, avifImage *view, const avifImage **source,
                               const int32_t *cancel_flag) {
    if (ea_cancelled(cancel_flag)) {
        snprintf(decoder->message, sizeof decoder->message, "cancelled");
        return EA_ERR_CANCELLED;
    }
    avifDecoder *avif = decoder->decoder;
    uint32_t width = avif->image->width, height = avif->image->height;
    avifResult result = libavif.avifDecoderNextImage(avif);
    if (result != AVIF_RESULT_OK) {
        ea_say(decoder->message, sizeof decoder->message, "AV1 image", result, avif);
        return ea_classify(result);
    }
    if (avif->image->width != width || avif->image->height != height) {
        snprintf(decoder->message, sizeof decoder->message, "the decoded image is not the size its header gives");
        return EA_ERR_CORRUPT;
    }
    if (ea_cancelled(cancel_flag)) {
        snprintf(decoder->message, sizeof decoder->message, "cancelled");
        return EA_ERR_CANCELLED;
    }
    memset(view, 0, sizeof *view);
    *source = avif->image;
    if (decoder->cropped) {
        result = libavif.avifImageSetViewRect(view, avif->image, &decoder->crop);
        if (result != AVIF_RESULT_OK) {
            ea_say(decoder->message, sizeof decoder->message, "the AVIF clean aperture", result, avif);
            return EA_ERR_CORRUPT;
        }
        *source = view;
    }
    return EA_OK;
}

ea_status ea_decode(ea_decoder *decoder, int channels, uint8_t *output, size_t stride, const int32_t *cancel_flag) {
    avifImage view;
    const avifImage *source;
    ea_status status = ea_next_frame(decoder, &view, &source, cancel_flag);
    if (status != EA_OK) return status;
    avifDecoder *avif = decoder->decoder;
    avifResult result;
    avifRGBImage rgb;
    libavif.avifRGBImageSetDefaults(&rgb, source);
    rgb.depth = 8;
    rgb.format = channels == 4 ? AVIF_RGB_FORMAT_RGBA : AVIF_RGB_FORMAT_RGB;
    rgb.pixels = output;
    rgb.rowBytes = (uint32_t)stride;
    result = libavif.avifImageYUVToRGB(source, &rgb);
    if (result != AVIF_RESULT_OK) {
        // libavif converts the usual matrices; the others (BT.2020 constant luminance 10,
        // SMPTE 2085 11, chroma-derived constant luminance 13, ICtCp 14) it cannot: a valid
        // file this build does not read, not a damaged one.
        int unsupported = result == AVIF_RESULT_REFORMAT_FAILED || result == AVIF_RESULT_NOT_IMPLEMENTED;
        if (unsupported) {
            snprintf(decoder->message, sizeof decoder->message,
                     "YUV to RGB with matrix coefficients %d is not supported (%s)", (int)source->matrixCoefficients,
                     libavif.avifResultToString(result));
            return EA_ERR_UNSUPPORTED;
        }
        ea_say(decoder->message, sizeof decoder->message, "AVIF colour conversion", result, avif);
        return ea_classify(result);
    }
    return EA_OK;
}

ea_status ea_decode_luma(ea_decoder *decoder, uint8_t *output, size_t stride, size_t step, uint32_t width,
                         uint32_t height, const int32_t *cancel_flag) {
    avifImage view;
    const avifImage *source;
    ea_status status = ea_next_frame(decoder, &view, &source, cancel_flag);
    if (status != EA_OK) return status;
    if (source->width != width || source->height != height || source->yuvPlanes[AVIF_CHAN_Y] == NULL) {
        snprintf(decoder->message, sizeof decoder->message, "the alpha image is %ux%u, not the image's %ux%u",
                 source->width, source->height, width, height);
        return EA_ERR_CORRUPT;
    }
    const uint8_t *plane = source->yuvPlanes[AVIF_CHAN_Y];
    size_t plane_stride = source->yuvRowBytes[AVIF_CHAN_Y];
    uint32_t max = (1u << source->depth) - 1;
    for (uint32_t y = 0; y < height; y++) {
        const uint8_t *in = plane + y * plane_stride;
        uint8_t *out = output + y * stride;
        if (source->depth == 8) {
            for (uint32_t x = 0; x < width; x++) out[x * step] = in[x];
        } else {
            const uint16_t *wide = (const uint16_t *)in;
            for (uint32_t x = 0; x < width; x++) {
                uint32_t v = wide[x] > max ? max : wide[x];
                out[x * step] = (uint8_t)((v * 255u + max / 2) / max);
            }
        }
    }
    return EA_OK;
}

const char *ea_message(const ea_decoder *decoder) { return decoder->message; }

void ea_decoder_destroy(ea_decoder *decoder) {
    if (decoder == NULL) return;
    if (decoder->decoder != NULL) libavif.avifDecoderDestroy(decoder->decoder);
    free(decoder);
}
