#include "cheif_shim.h"
#include "enlarger_loader.h"

#include <libheif/heif.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// The library's functions this shim calls, resolved when first needed (see enlarger_loader.h).
#define EH_FUNCTIONS(X) \
    X(heif_context_alloc) \
    X(heif_context_encode_image) \
    X(heif_context_free) \
    X(heif_context_get_encoder_for_format) \
    X(heif_context_get_primary_image_handle) \
    X(heif_context_read_from_memory_without_copy) \
    X(heif_context_set_max_decoding_threads) \
    X(heif_context_set_maximum_image_size_limit) \
    X(heif_context_write) \
    X(heif_decode_image) \
    X(heif_decoding_options_alloc) \
    X(heif_decoding_options_free) \
    X(heif_encoder_release) \
    X(heif_encoder_set_lossy_quality) \
    X(heif_encoder_set_parameter_integer) \
    X(heif_fourcc_to_brand) \
    X(heif_free_list_of_compatible_brands) \
    X(heif_get_version_number_major) \
    X(heif_get_version_number_minor) \
    X(heif_image_add_plane) \
    X(heif_image_create) \
    X(heif_image_get_bits_per_pixel_range) \
    X(heif_image_get_height) \
    X(heif_image_get_plane) \
    X(heif_image_get_plane_readonly) \
    X(heif_image_get_width) \
    X(heif_image_handle_get_color_profile_type) \
    X(heif_image_handle_get_height) \
    X(heif_image_handle_get_list_of_thumbnail_IDs) \
    X(heif_image_handle_get_luma_bits_per_pixel) \
    X(heif_image_handle_get_nclx_color_profile) \
    X(heif_image_handle_get_number_of_thumbnails) \
    X(heif_image_handle_get_raw_color_profile) \
    X(heif_image_handle_get_raw_color_profile_size) \
    X(heif_image_handle_get_thumbnail) \
    X(heif_image_handle_get_width) \
    X(heif_image_handle_has_alpha_channel) \
    X(heif_image_handle_release) \
    X(heif_image_release) \
    X(heif_image_set_raw_color_profile) \
    X(heif_list_compatible_brands) \
    X(heif_nclx_color_profile_free) \
    X(heif_read_main_brand)

#define EH_BUILT_MINOR ((LIBHEIF_NUMERIC_VERSION >> 16) & 0xFF)

// libheif 1.x keeps its ABI within the major version: any minor version since the one built
// for will do.
EL_LIBRARY(EH_FUNCTIONS, libheif, eh_library, eh_compatible, "libheif.so.1", "libheif.so");

static int eh_compatible(char *message, size_t length) {
    int major = libheif.heif_get_version_number_major(), minor = libheif.heif_get_version_number_minor();
    if (major == 1 && minor >= EH_BUILT_MINOR) return 1;
    snprintf(message, length, "libheif %d.%d was loaded; Enlarger was built for 1.%d", major, minor, EH_BUILT_MINOR);
    return 0;
}

struct eh_decoder {
    struct heif_context *context;
    struct heif_image_handle *primary;
    struct heif_image_handle *thumbnail;
    heif_item_id thumbnail_id;
    uint8_t *icc;
    size_t icc_length;
    int nclx;
    int nclx_primaries;
    int nclx_transfer;
    double nclx_xy[8];
    int avif;
    char message[256];
};

static void eh_say(char *message, size_t length, const char *text) {
    if (message != NULL && length > 0) snprintf(message, length, "%s", text);
}

static int eh_cancelled(const int32_t *flag) {
    return flag != NULL && __atomic_load_n(flag, __ATOMIC_ACQUIRE) != 0;
}

static eh_status eh_classify(struct heif_error error) {
    switch (error.code) {
    case heif_error_Ok: return EH_OK;
    case heif_error_Memory_allocation_error: return EH_ERR_NO_MEMORY;
    case heif_error_Unsupported_filetype: case heif_error_Unsupported_feature: return EH_ERR_UNSUPPORTED;
    case heif_error_Invalid_input:
        if (error.subcode == heif_suberror_End_of_data) return EH_ERR_TRUNCATED;
        if (error.subcode == heif_suberror_Security_limit_exceeded) return EH_ERR_TOO_LARGE;
        return EH_ERR_CORRUPT;
    case heif_error_Decoder_plugin_error:
        if (error.subcode == heif_suberror_End_of_data) return EH_ERR_TRUNCATED;
        return EH_ERR_CORRUPT;
    default: return EH_ERR_CORRUPT;
    }
}

eh_decoder *eh_decoder_create(const uint8_t *data, size_t length, int max_side, eh_status *status,
                              char *message, size_t message_length) {
    if (!el_ready(&eh_library, message, message_length)) {
        *status = EH_ERR_UNSUPPORTED;
        return NULL;
    }
    eh_decoder *decoder = calloc(1, sizeof *decoder);
    if (decoder == NULL || (decoder->context = libheif.heif_context_alloc()) == NULL) {
        free(decoder);
        *status = EH_ERR_NO_MEMORY;
        eh_say(message, message_length, "out of memory creating a HEIF decoder");
        return NULL;
    }
    // Decoding runs on the caller's thread: the worker sizes its own thread pool.
    libheif.heif_context_set_max_decoding_threads(decoder->context, 0);
    libheif.heif_context_set_maximum_image_size_limit(decoder->context, max_side);
    struct heif_error error = libheif.heif_context_read_from_memory_without_copy(decoder->context, data, length, NULL);
    if (error.code == heif_error_Ok) {
        error = libheif.heif_context_get_primary_image_handle(decoder->context, &decoder->primary);
    }
    if (error.code != heif_error_Ok) {
        *status = eh_classify(error);
        eh_say(message, message_length, error.message);
        eh_decoder_destroy(decoder);
        return NULL;
    }
    // libheif checks a coded image's own size (from its hvcC or av1C) against this limit
    // before allocating its planes; the sizes the file declares (ispe) were checked when it
    // was read, but the coded size may say anything (a 1.6 KB file declaring 96x42 coded as
    // 34311x34816 made it allocate 3.6 GB and crash). No coded image is far larger than the
    // declared primary: the limit becomes twice its larger side (a coded size rounded up, or
    // a grid tile overhanging the canvas, may exceed it a little), at least 1024.
    int declared = libheif.heif_image_handle_get_width(decoder->primary);
    if (libheif.heif_image_handle_get_height(decoder->primary) > declared) declared = libheif.heif_image_handle_get_height(decoder->primary);
    int coded_limit = declared > 512 ? 2 * declared : 1024;
    if (coded_limit < max_side) libheif.heif_context_set_maximum_image_size_limit(decoder->context, coded_limit);
    if (libheif.heif_image_handle_get_number_of_thumbnails(decoder->primary) > 0) {
        heif_item_id id;
        if (libheif.heif_image_handle_get_list_of_thumbnail_IDs(decoder->primary, &id, 1) == 1) {
            struct heif_image_handle *thumbnail = NULL;
            if (libheif.heif_image_handle_get_thumbnail(decoder->primary, id, &thumbnail).code == heif_error_Ok) {
                decoder->thumbnail = thumbnail;
                decoder->thumbnail_id = id;
            }
        }
    }
    enum heif_color_profile_type type = libheif.heif_image_handle_get_color_profile_type(decoder->primary);
    if (type == heif_color_profile_type_prof || type == heif_color_profile_type_rICC) {
        size_t size = libheif.heif_image_handle_get_raw_color_profile_size(decoder->primary);
        if (size > 0 && (decoder->icc = malloc(size)) != NULL) {
            if (libheif.heif_image_handle_get_raw_color_profile(decoder->primary, decoder->icc).code == heif_error_Ok) {
                decoder->icc_length = size;
            } else {
                free(decoder->icc);
                decoder->icc = NULL;
            }
        }
    } else if (type == heif_color_profile_type_nclx) {
        struct heif_color_profile_nclx *nclx = NULL;
        struct heif_error got = libheif.heif_image_handle_get_nclx_color_profile(decoder->primary, &nclx);
        // libheif may hand back the struct with an error (an invalid code point): freed either way.
        if (got.code != heif_error_Ok && nclx != NULL) {
            libheif.heif_nclx_color_profile_free(nclx);
            nclx = NULL;
        }
        if (nclx != NULL) {
            decoder->nclx = 1;
            decoder->nclx_primaries = nclx->color_primaries;
            decoder->nclx_transfer = nclx->transfer_characteristics;
            const float xy[8] = {nclx->color_primary_red_x, nclx->color_primary_red_y, nclx->color_primary_green_x,
                                 nclx->color_primary_green_y, nclx->color_primary_blue_x, nclx->color_primary_blue_y,
                                 nclx->color_primary_white_x, nclx->color_primary_white_y};
            for (int i = 0; i < 8; i++) decoder->nclx_xy[i] = xy[i];
            libheif.heif_nclx_color_profile_free(nclx);
        }
    }
    heif_brand2 main = libheif.heif_read_main_brand(data, length < 64 ? (int)length : 64);
    decoder->avif = main == libheif.heif_fourcc_to_brand("avif") || main == libheif.heif_fourcc_to_brand("avis");
    if (!decoder->avif) {
        // A file may name "mif1" first and still hold AV1 images.
        heif_brand2 *brands = NULL;
        int count = 0;
        if (libheif.heif_list_compatible_brands(data, length < 1024 ? (int)length : 1024, &brands, &count).code == heif_error_Ok) {
            for (int i = 0; i < count; i++) {
                if (brands[i] == libheif.heif_fourcc_to_brand("avif") || brands[i] == libheif.heif_fourcc_to_brand("avis")) decoder->avif = 1;
            }
            libheif.heif_free_list_of_compatible_brands(brands);
        }
    }
    *status = EH_OK;
    return decoder;
}

void eh_read_info(const eh_decoder *decoder, eh_info *info) {
    memset(info, 0, sizeof *info);
    info->width = libheif.heif_image_handle_get_width(decoder->primary);
    info->height = libheif.heif_image_handle_get_height(decoder->primary);
    info->has_alpha = libheif.heif_image_handle_has_alpha_channel(decoder->primary);
    info->bit_depth = libheif.heif_image_handle_get_luma_bits_per_pixel(decoder->primary);
    info->avif = decoder->avif;
    if (decoder->thumbnail != NULL) {
        info->thumbnail_width = libheif.heif_image_handle_get_width(decoder->thumbnail);
        info->thumbnail_height = libheif.heif_image_handle_get_height(decoder->thumbnail);
        info->thumbnail_id = decoder->thumbnail_id;
    }
    info->icc = decoder->icc;
    info->icc_length = decoder->icc_length;
    info->nclx = decoder->nclx;
    info->nclx_primaries = decoder->nclx_primaries;
    info->nclx_transfer = decoder->nclx_transfer;
    for (int i = 0; i < 8; i++) info->nclx_xy[i] = decoder->nclx_xy[i];
}

eh_status eh_decode(eh_decoder *decoder, int thumbnail, int channels, int width, int height,
                    uint8_t *output, size_t stride, int strict, const int32_t *cancel_flag) {
    struct heif_image_handle *handle = thumbnail ? decoder->thumbnail : decoder->primary;
    if (handle == NULL) {
        eh_say(decoder->message, sizeof decoder->message, "the HEIF file has no thumbnail");
        return EH_ERR_CORRUPT;
    }
    if (eh_cancelled(cancel_flag)) {
        eh_say(decoder->message, sizeof decoder->message, "cancelled");
        return EH_ERR_CANCELLED;
    }
    struct heif_decoding_options *options = libheif.heif_decoding_options_alloc();
    if (options == NULL) {
        eh_say(decoder->message, sizeof decoder->message, "out of memory decoding a HEIF image");
        return EH_ERR_NO_MEMORY;
    }
    options->convert_hdr_to_8bit = 1;
    options->strict_decoding = strict ? 1 : 0;
    struct heif_image *image = NULL;
    struct heif_error error = libheif.heif_decode_image(handle, &image, heif_colorspace_RGB,
                                                channels == 4 ? heif_chroma_interleaved_RGBA : heif_chroma_interleaved_RGB,
                                                options);
    libheif.heif_decoding_options_free(options);
    if (error.code != heif_error_Ok) {
        eh_say(decoder->message, sizeof decoder->message, error.message);
        return eh_classify(error);
    }
    eh_status status = EH_OK;
    int plane_stride = 0;
    const uint8_t *plane = libheif.heif_image_get_plane_readonly(image, heif_channel_interleaved, &plane_stride);
    if (plane == NULL || libheif.heif_image_get_width(image, heif_channel_interleaved) != width
        || libheif.heif_image_get_height(image, heif_channel_interleaved) != height
        || libheif.heif_image_get_bits_per_pixel_range(image, heif_channel_interleaved) != 8) {
        eh_say(decoder->message, sizeof decoder->message, "the decoded HEIF image is not the size its header gives");
        status = EH_ERR_CORRUPT;
    } else if (eh_cancelled(cancel_flag)) {
        eh_say(decoder->message, sizeof decoder->message, "cancelled");
        status = EH_ERR_CANCELLED;
    } else {
        for (int y = 0; y < height; y++) {
            memcpy(output + (size_t)y * stride, plane + (size_t)y * (size_t)plane_stride, (size_t)width * (size_t)channels);
        }
    }
    libheif.heif_image_release(image);
    return status;
}

const char *eh_message(const eh_decoder *decoder) { return decoder->message; }

void eh_drop_thumbnail(eh_decoder *decoder) {
    if (decoder->thumbnail != NULL) libheif.heif_image_handle_release(decoder->thumbnail);
    decoder->thumbnail = NULL;
    decoder->thumbnail_id = 0;
}

void eh_decoder_destroy(eh_decoder *decoder) {
    if (decoder == NULL) return;
    if (decoder->thumbnail != NULL) libheif.heif_image_handle_release(decoder->thumbnail);
    if (decoder->primary != NULL) libheif.heif_image_handle_release(decoder->primary);
    if (decoder->context != NULL) libheif.heif_context_free(decoder->context);
    free(decoder->icc);
    free(decoder);
}

// Collects what libheif writes into one growing malloc'd buffer.
struct eh_sink {
    uint8_t *bytes;
    size_t length;
    size_t capacity;
};

static struct heif_error eh_write(struct heif_context *context, const void *data, size_t size, void *user) {
    (void)context;
    struct eh_sink *sink = user;
    struct heif_error ok = {heif_error_Ok, heif_suberror_Unspecified, "ok"};
    struct heif_error failed = {heif_error_Memory_allocation_error, heif_suberror_Unspecified, "out of memory"};
    if (sink->length + size > sink->capacity) {
        size_t capacity = sink->capacity * 2 > sink->length + size ? sink->capacity * 2 : sink->length + size;
        uint8_t *grown = realloc(sink->bytes, capacity);
        if (grown == NULL) return failed;
        sink->bytes = grown;
        sink->capacity = capacity;
    }
    memcpy(sink->bytes + sink->length, data, size);
    sink->length += size;
    return ok;
}

eh_status eh_encode_avif(const uint8_t *pixels, int width, int height, int channels, int quality, int speed,
                         const uint8_t *icc, size_t icc_length, const int32_t *cancel_flag,
                         uint8_t **output, size_t *output_length, char *message, size_t message_length) {
    *output = NULL;
    *output_length = 0;
    if (eh_cancelled(cancel_flag)) {
        eh_say(message, message_length, "cancelled");
        return EH_ERR_CANCELLED;
    }
    if (!el_ready(&eh_library, message, message_length)) return EH_ERR_UNSUPPORTED;
    struct heif_context *context = libheif.heif_context_alloc();
    if (context == NULL) {
        eh_say(message, message_length, "out of memory encoding an AVIF");
        return EH_ERR_NO_MEMORY;
    }
    struct heif_encoder *encoder = NULL;
    struct heif_image *image = NULL;
    struct eh_sink sink = {NULL, 0, 0};
    struct heif_error error = libheif.heif_context_get_encoder_for_format(context, heif_compression_AV1, &encoder);
    if (error.code == heif_error_Ok) error = libheif.heif_encoder_set_lossy_quality(encoder, quality);
    if (error.code == heif_error_Ok) error = libheif.heif_encoder_set_parameter_integer(encoder, "speed", speed);
    if (error.code == heif_error_Ok) error = libheif.heif_encoder_set_parameter_integer(encoder, "threads", 1);
    int colour = channels != 1;
    if (error.code == heif_error_Ok) {
        error = libheif.heif_image_create(width, height, colour ? heif_colorspace_RGB : heif_colorspace_monochrome,
                                  channels == 4 ? heif_chroma_interleaved_RGBA
                                  : channels == 3 ? heif_chroma_interleaved_RGB : heif_chroma_monochrome, &image);
    }
    enum heif_channel plane_channel = colour ? heif_channel_interleaved : heif_channel_Y;
    if (error.code == heif_error_Ok) error = libheif.heif_image_add_plane(image, plane_channel, width, height, 8);
    if (error.code == heif_error_Ok) {
        int stride = 0;
        uint8_t *plane = libheif.heif_image_get_plane(image, plane_channel, &stride);
        for (int y = 0; y < height; y++) {
            memcpy(plane + (size_t)y * (size_t)stride, pixels + (size_t)y * (size_t)width * (size_t)channels,
                   (size_t)width * (size_t)channels);
        }
        if (icc != NULL && icc_length > 0) error = libheif.heif_image_set_raw_color_profile(image, "prof", icc, icc_length);
    }
    if (error.code == heif_error_Ok && eh_cancelled(cancel_flag)) {
        libheif.heif_image_release(image);
        libheif.heif_encoder_release(encoder);
        libheif.heif_context_free(context);
        eh_say(message, message_length, "cancelled");
        return EH_ERR_CANCELLED;
    }
    if (error.code == heif_error_Ok) error = libheif.heif_context_encode_image(context, image, encoder, NULL, NULL);
    if (error.code == heif_error_Ok) {
        struct heif_writer writer = {.writer_api_version = 1, .write = eh_write};
        error = libheif.heif_context_write(context, &writer, &sink);
    }
    // libheif's error text may live in the context or the encoder: copied before they go.
    if (error.code != heif_error_Ok) eh_say(message, message_length, error.message);
    if (image != NULL) libheif.heif_image_release(image);
    if (encoder != NULL) libheif.heif_encoder_release(encoder);
    libheif.heif_context_free(context);
    if (error.code != heif_error_Ok) {
        free(sink.bytes);
        return error.code == heif_error_Memory_allocation_error ? EH_ERR_NO_MEMORY : EH_ERR_UNSUPPORTED;
    }
    *output = sink.bytes;
    *output_length = sink.length;
    return EH_OK;
}
