#include "cpng_shim.h"

#include <spng.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct ep_decoder {
    spng_ctx *ctx;
    int fail_on;
    int started;
    // Read from memory through a stream: to give read pages back (see ep_decoder_create)
    // and to see where the data ends.
    const uint8_t *data;
    size_t length;
    size_t offset;
    size_t released;
    int release_read;
    // The data ended before libspng had what it asked for (a cut file). At fail_on 0 the
    // missing bytes read as zeros: the rows before the cut decode, then the stream fails.
    int ran_out;
    // libspng answers every call after a failure with SPNG_EBADSTATE: the first failure,
    // also one passed over as harmless, is kept to be reported instead.
    int first_error;
    // 16-bit grey without transparency: raw rows, reduced to 8 bits here (libspng's G8 is
    // for 8 bits and less). An interlaced image's rows come pass by pass, each writing only
    // its own columns: only those are reduced.
    int grey16;
    int interlaced;
    int pass;
    uint8_t *raw_row;
    size_t raw_length;
    char message[256];
};

// Every 4 MiB read, the whole pages behind the read position go back to the system.
static int ep_stream_read(spng_ctx *ctx, void *user, void *dest, size_t length) {
    (void)ctx;
    ep_decoder *decoder = user;
    if (length > decoder->length - decoder->offset) {
        size_t available = decoder->length - decoder->offset;
        if (decoder->ran_out || decoder->fail_on > 0) {
            decoder->ran_out = 1;
            return SPNG_IO_EOF;
        }
        decoder->ran_out = 1;
        memcpy(dest, decoder->data + decoder->offset, available);
        memset((uint8_t *)dest + available, 0, length - available);
        decoder->offset = decoder->length;
        return 0;
    }
    memcpy(dest, decoder->data + decoder->offset, length);
    decoder->offset += length;
    if (decoder->release_read && decoder->offset - decoder->released >= (4u << 20)) {
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        size_t end = decoder->offset / page * page;
        madvise((void *)(decoder->data + decoder->released), end - decoder->released, MADV_DONTNEED);
        decoder->released = end;
    }
    return 0;
}

static void ep_say(char *message, size_t length, const char *text) {
    if (message != NULL && length > 0) snprintf(message, length, "%s", text);
}

// libspng's codes, sorted into the pipeline's.
static ep_status ep_classify(int error) {
    switch (error) {
    case SPNG_OK: return EP_OK;
    case SPNG_EOI: return EP_DONE;
    case SPNG_ESIGNATURE: return EP_ERR_NOT_PNG;
    case SPNG_IO_EOF: case SPNG_EOF: return EP_ERR_TRUNCATED;
    case SPNG_EMEM: return EP_ERR_NO_MEMORY;
    case SPNG_EUSER_WIDTH: case SPNG_EUSER_HEIGHT: case SPNG_EOVERFLOW: case SPNG_ECHUNK_LIMITS:
        return EP_ERR_TOO_LARGE;
    case SPNG_EBIT_DEPTH: case SPNG_ECOLOR_TYPE: case SPNG_ECOMPRESSION_METHOD: case SPNG_EFILTER_METHOD:
    case SPNG_EINTERLACE_METHOD: case SPNG_ECHUNK_UNKNOWN_CRITICAL:
        return EP_ERR_UNSUPPORTED;
    default: return EP_ERR_CORRUPT;
    }
}

// Remembers a failure (the first one) without reporting it: one passed over, which may
// still leave libspng unable to go on.
static void ep_note(ep_decoder *decoder, int error) {
    if (error != SPNG_OK && error != SPNG_EOI && error != SPNG_ECHUNKAVAIL && decoder->first_error == 0) {
        decoder->first_error = error;
    }
}

// The status and message of a failure, copied into the decoder: the first failure when
// libspng only says it cannot go on; a cut file's when the data had ended.
static ep_status ep_fail(ep_decoder *decoder, int error) {
    if (error == SPNG_OK || error == SPNG_EOI) return ep_classify(error);
    if (error == SPNG_EBADSTATE && decoder->first_error != 0) error = decoder->first_error;
    ep_note(decoder, error);
    ep_status status = ep_classify(error);
    if (decoder->ran_out) {
        snprintf(decoder->message, sizeof decoder->message, "the data ends at byte %zu, inside the image (%s)",
                 decoder->length, spng_strerror(error));
        return EP_ERR_TRUNCATED;
    }
    snprintf(decoder->message, sizeof decoder->message, "%s", spng_strerror(error));
    return status;
}

ep_decoder *ep_decoder_create(const uint8_t *data, size_t length, size_t max_chunk, int fail_on, int release_read) {
    ep_decoder *decoder = calloc(1, sizeof *decoder);
    if (decoder == NULL) return NULL;
    decoder->ctx = spng_ctx_new(0);
    if (decoder->ctx == NULL) {
        free(decoder);
        return NULL;
    }
    decoder->fail_on = fail_on;
    // A chunk can be no larger than the input; decompressed ones (iCCP, zTXt) are bounded
    // by the same figure, and so is all that libspng keeps of them.
    spng_set_chunk_limits(decoder->ctx, max_chunk, max_chunk);
    if (fail_on <= 1) {
        spng_set_crc_action(decoder->ctx, SPNG_CRC_USE, SPNG_CRC_USE);
    } else if (fail_on >= 3) {
        // A damaged ancillary chunk is a damaged file too (libspng drops it by default).
        spng_set_crc_action(decoder->ctx, SPNG_CRC_ERROR, SPNG_CRC_ERROR);
    }
    decoder->data = data;
    decoder->length = length;
    decoder->release_read = release_read;
    spng_set_png_stream(decoder->ctx, ep_stream_read, decoder);
    return decoder;
}

ep_status ep_read_header(ep_decoder *decoder, ep_info *info) {
    memset(info, 0, sizeof *info);
    struct spng_ihdr ihdr;
    int error = spng_get_ihdr(decoder->ctx, &ihdr);
    if (error) return ep_fail(decoder, error);
    info->width = ihdr.width;
    info->height = ihdr.height;
    info->bit_depth = ihdr.bit_depth;
    info->color_type = ihdr.color_type;
    info->interlaced = ihdr.interlace_method != 0;
    struct spng_trns trns;
    error = spng_get_trns(decoder->ctx, &trns);
    ep_note(decoder, error);
    info->has_trns = error == SPNG_OK;
    if (error == SPNG_OK && ihdr.color_type == SPNG_COLOR_TYPE_GRAYSCALE && ihdr.bit_depth < 16) {
        // A grey key wider than the samples keeps only their bits, as libpng reads it
        // (libspng would match no pixel and leave the image opaque).
        uint16_t mask = (uint16_t)((1u << ihdr.bit_depth) - 1);
        if (trns.gray > mask) {
            trns.gray &= mask;
            ep_note(decoder, spng_set_trns(decoder->ctx, &trns));
        }
    }
    struct spng_iccp iccp;
    error = spng_get_iccp(decoder->ctx, &iccp);
    if (error == SPNG_OK && iccp.profile_len > 0) {
        info->icc = (const uint8_t *)iccp.profile;
        info->icc_length = iccp.profile_len;
    } else if (error != SPNG_OK && error != SPNG_ECHUNKAVAIL && decoder->fail_on >= 3) {
        return ep_fail(decoder, error);
    }
    ep_note(decoder, error);
    struct spng_exif exif;
    error = spng_get_exif(decoder->ctx, &exif);
    ep_note(decoder, error);
    if (error == SPNG_OK && exif.length > 0) {
        info->exif = (const uint8_t *)exif.data;
        info->exif_length = exif.length;
    }
    return EP_OK;
}

ep_status ep_start(ep_decoder *decoder, int channels) {
    struct spng_ihdr ihdr;
    int error = spng_get_ihdr(decoder->ctx, &ihdr);
    if (error) return ep_fail(decoder, error);
    decoder->grey16 = channels == 1 && ihdr.bit_depth == 16;
    decoder->interlaced = ihdr.interlace_method != 0;
    int format = decoder->grey16 ? SPNG_FMT_RAW : channels == 1 ? SPNG_FMT_G8 : channels == 3 ? SPNG_FMT_RGB8 : SPNG_FMT_RGBA8;
    if (decoder->grey16) {
        decoder->raw_length = (size_t)ihdr.width * 2;
        decoder->raw_row = malloc(decoder->raw_length);
        if (decoder->raw_row == NULL) {
            snprintf(decoder->message, sizeof decoder->message, "out of memory for a 16-bit row");
            return EP_ERR_NO_MEMORY;
        }
    }
    int flags = SPNG_DECODE_PROGRESSIVE | (channels == 4 ? SPNG_DECODE_TRNS : 0);
    error = spng_decode_image(decoder->ctx, NULL, 0, format, flags);
    if (error) return ep_fail(decoder, error);
    decoder->started = 1;
    return EP_OK;
}

ep_status ep_next_row(ep_decoder *decoder, uint32_t *row_index) {
    struct spng_row_info info;
    int error = spng_get_row_info(decoder->ctx, &info);
    if (error == SPNG_EOI && decoder->fail_on >= 3) {
        // Every row is out; what follows (the last IDAT's checksum, the chunks after the
        // image, IEND) is read too, so that damage there fails as the level asks.
        int after = spng_decode_chunks(decoder->ctx);
        if (after != SPNG_OK) return ep_fail(decoder, after);
    }
    if (error) return ep_fail(decoder, error);
    *row_index = info.row_num;
    decoder->pass = info.pass;
    return EP_OK;
}

ep_status ep_read_row(ep_decoder *decoder, uint8_t *row, size_t length) {
    int error;
    if (decoder->grey16) {
        if (length * 2 != decoder->raw_length) return ep_fail(decoder, SPNG_EBUFSIZ);
        error = spng_decode_row(decoder->ctx, decoder->raw_row, decoder->raw_length);
        if (error == SPNG_OK || error == SPNG_EOI) {
            // Big-endian samples to 8 bits, rounded: v * 255 / 65535. Adam7's passes start at
            // columns 0 4 0 2 0 1 0 and step 8 8 4 4 2 2 1.
            static const size_t first[7] = {0, 4, 0, 2, 0, 1, 0}, step[7] = {8, 8, 4, 4, 2, 2, 1};
            size_t start = 0, stride = 1;
            if (decoder->interlaced && decoder->pass >= 0 && decoder->pass < 7) {
                start = first[decoder->pass];
                stride = step[decoder->pass];
            }
            for (size_t x = start; x < length; x += stride) {
                uint32_t v = (uint32_t)decoder->raw_row[2 * x] << 8 | decoder->raw_row[2 * x + 1];
                row[x] = (uint8_t)((v * 255u + 32767u) / 65535u);
            }
        }
    } else {
        error = spng_decode_row(decoder->ctx, row, length);
    }
    // SPNG_EOI comes with the last row, which has been written.
    if (error == SPNG_EOI) return EP_OK;
    return ep_fail(decoder, error);
}

int ep_ran_out(const ep_decoder *decoder) { return decoder->ran_out; }

const char *ep_message(const ep_decoder *decoder) { return decoder->message; }

void ep_decoder_destroy(ep_decoder *decoder) {
    if (decoder == NULL) return;
    spng_ctx_free(decoder->ctx);
    free(decoder->raw_row);
    free(decoder);
}

ep_status ep_encode(const uint8_t *pixels, uint32_t width, uint32_t height, int channels, int level,
                    const uint8_t *icc, size_t icc_length, const int32_t *cancel_flag,
                    uint8_t **output, size_t *output_length, char *message, size_t message_length) {
    *output = NULL;
    *output_length = 0;
    spng_ctx *ctx = spng_ctx_new(SPNG_CTX_ENCODER);
    if (ctx == NULL) {
        ep_say(message, message_length, "no memory for a PNG encoder");
        return EP_ERR_NO_MEMORY;
    }
    struct spng_ihdr ihdr = {
        .width = width, .height = height, .bit_depth = 8,
        .color_type = channels == 1 ? SPNG_COLOR_TYPE_GRAYSCALE
                    : channels == 3 ? SPNG_COLOR_TYPE_TRUECOLOR : SPNG_COLOR_TYPE_TRUECOLOR_ALPHA,
    };
    int error = spng_set_option(ctx, SPNG_ENCODE_TO_BUFFER, 1);
    if (!error) error = spng_set_option(ctx, SPNG_IMG_COMPRESSION_LEVEL, level);
    if (!error) error = spng_set_ihdr(ctx, &ihdr);
    if (!error && icc != NULL && icc_length > 0) {
        struct spng_iccp iccp;
        memset(&iccp, 0, sizeof iccp);
        snprintf(iccp.profile_name, sizeof iccp.profile_name, "ICC profile");
        iccp.profile_len = icc_length;
        iccp.profile = (char *)icc;
        error = spng_set_iccp(ctx, &iccp);
    }
    if (!error) error = spng_encode_image(ctx, NULL, 0, SPNG_FMT_PNG, SPNG_ENCODE_PROGRESSIVE | SPNG_ENCODE_FINALIZE);
    size_t stride = (size_t)width * (size_t)channels;
    for (uint32_t y = 0; !error && y < height; y++) {
        if (cancel_flag != NULL && (y & 15) == 0 && __atomic_load_n(cancel_flag, __ATOMIC_ACQUIRE) != 0) {
            spng_ctx_free(ctx);
            ep_say(message, message_length, "cancelled");
            return EP_ERR_CANCELLED;
        }
        error = spng_encode_row(ctx, pixels + (size_t)y * stride, stride);
        if (error == SPNG_EOI) error = SPNG_OK;
    }
    if (error) {
        ep_say(message, message_length, spng_strerror(error));
        spng_ctx_free(ctx);
        return error == SPNG_EMEM ? EP_ERR_NO_MEMORY : EP_ERR_CORRUPT;
    }
    size_t length = 0;
    uint8_t *buffer = spng_get_png_buffer(ctx, &length, &error);
    spng_ctx_free(ctx);
    if (buffer == NULL || error) {
        free(buffer);
        ep_say(message, message_length, error ? spng_strerror(error) : "no PNG output");
        return EP_ERR_NO_MEMORY;
    }
    *output = buffer;
    *output_length = length;
    return EP_OK;
}
