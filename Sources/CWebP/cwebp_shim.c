#include "cwebp_shim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <webp/decode.h>
#include <webp/demux.h>
#include <webp/encode.h>
#include <webp/mux.h>

static void ew_say(char *message, size_t length, const char *text) {
    if (message != NULL && length > 0) snprintf(message, length, "%s", text);
}

static ew_status ew_status_of(VP8StatusCode code, char *message, size_t length) {
    switch (code) {
    case VP8_STATUS_OK: return EW_OK;
    case VP8_STATUS_OUT_OF_MEMORY: ew_say(message, length, "out of memory decoding the WebP"); return EW_ERR_NO_MEMORY;
    case VP8_STATUS_NOT_ENOUGH_DATA: ew_say(message, length, "the WebP data ends early"); return EW_ERR_TRUNCATED;
    case VP8_STATUS_UNSUPPORTED_FEATURE: ew_say(message, length, "a WebP feature libwebp does not support"); return EW_ERR_UNSUPPORTED;
    case VP8_STATUS_SUSPENDED: ew_say(message, length, "the WebP data ends early"); return EW_ERR_TRUNCATED;
    case VP8_STATUS_USER_ABORT: ew_say(message, length, "cancelled"); return EW_ERR_CANCELLED;
    default: ew_say(message, length, "damaged WebP bitstream"); return EW_ERR_CORRUPT;
    }
}

static int ew_cancelled(const int32_t *flag) {
    return flag != NULL && __atomic_load_n(flag, __ATOMIC_ACQUIRE) != 0;
}

ew_status ew_read_header(const uint8_t *data, size_t length, ew_info *info, char *message, size_t message_length) {
    memset(info, 0, sizeof *info);
    if (length < 12 || memcmp(data, "RIFF", 4) != 0 || memcmp(data + 8, "WEBP", 4) != 0) {
        ew_say(message, message_length, "not a WebP: no RIFF/WEBP header");
        return EW_ERR_NOT_WEBP;
    }
    // The container says how long it is: a file shorter than that was cut, even when the
    // image data happens to be whole.
    size_t riff = (size_t)data[4] | (size_t)data[5] << 8 | (size_t)data[6] << 16 | (size_t)data[7] << 24;
    if (riff + 8 > length) {
        info->cut = 1;
        if (message != NULL && message_length > 0) {
            snprintf(message, message_length, "the RIFF header gives %zu bytes, the data has %zu", riff + 8, length);
        }
    }
    WebPBitstreamFeatures features;
    VP8StatusCode code = WebPGetFeatures(data, length, &features);
    if (code != VP8_STATUS_OK) return ew_status_of(code, message, message_length);
    info->width = features.width;
    info->height = features.height;
    info->has_alpha = features.has_alpha;
    info->has_animation = features.has_animation;
    info->lossless = features.format == 2;
    // The chunks: the demuxer points into the input, which outlives the info.
    WebPData whole = {data, length};
    WebPDemuxState state;
    WebPDemuxer *demux = WebPDemuxPartial(&whole, &state);
    if (demux == NULL) {
        ew_say(message, message_length, "damaged WebP container");
        return state == WEBP_DEMUX_PARSE_ERROR || !info->cut ? EW_ERR_CORRUPT : EW_ERR_TRUNCATED;
    }
    uint32_t flags = WebPDemuxGetI(demux, WEBP_FF_FORMAT_FLAGS);
    WebPChunkIterator chunk;
    if ((flags & ICCP_FLAG) && WebPDemuxGetChunk(demux, "ICCP", 1, &chunk)) {
        info->icc = chunk.chunk.bytes;
        info->icc_length = chunk.chunk.size;
        WebPDemuxReleaseChunkIterator(&chunk);
    }
    if ((flags & EXIF_FLAG) && WebPDemuxGetChunk(demux, "EXIF", 1, &chunk)) {
        info->exif = chunk.chunk.bytes;
        info->exif_length = chunk.chunk.size;
        WebPDemuxReleaseChunkIterator(&chunk);
    }
    WebPDemuxDelete(demux);
    return EW_OK;
}

// Decodes one bitstream (VP8, VP8L, or ALPH then VP8) into `output` at `width` × `height`
// (scaled when that is not the bitstream's size), handing the input over in growing prefixes
// so that the flag is looked at between slices (each about a millisecond of decoding or
// less). `*rows` is how many rows from the top are whole when it returns, also on failure.
static ew_status ew_decode_sliced(const uint8_t *data, size_t length, int width, int height, int channels,
                                  uint8_t *output, size_t stride, size_t output_length, const int32_t *cancel_flag,
                                  int *rows, char *message, size_t message_length) {
    *rows = 0;
    WebPDecoderConfig config;
    if (!WebPInitDecoderConfig(&config)) return ew_status_of(VP8_STATUS_INVALID_PARAM, message, message_length);
    VP8StatusCode code = WebPGetFeatures(data, length, &config.input);
    if (code != VP8_STATUS_OK) return ew_status_of(code, message, message_length);
    if (width != config.input.width || height != config.input.height) {
        config.options.use_scaling = 1;
        config.options.scaled_width = width;
        config.options.scaled_height = height;
    }
    config.options.use_threads = 0;
    config.output.colorspace = channels == 4 ? MODE_RGBA : MODE_RGB;
    config.output.is_external_memory = 1;
    config.output.u.RGBA.rgba = output;
    config.output.u.RGBA.stride = (int)stride;
    config.output.u.RGBA.size = output_length;
    WebPIDecoder *decoder = WebPIDecode(NULL, 0, &config);
    if (decoder == NULL) {
        ew_say(message, message_length, "out of memory starting a WebP decoder");
        return EW_ERR_NO_MEMORY;
    }
    const size_t slice = 64 << 10;
    size_t offered = 0;
    ew_status status = EW_ERR_TRUNCATED;
    ew_say(message, message_length, "the WebP data ends early");
    while (offered < length) {
        if (ew_cancelled(cancel_flag)) {
            status = EW_ERR_CANCELLED;
            ew_say(message, message_length, "cancelled");
            break;
        }
        offered = length - offered > slice ? offered + slice : length;
        code = WebPIUpdate(decoder, data, offered);
        if (code == VP8_STATUS_OK) {
            status = EW_OK;
            break;
        }
        if (code != VP8_STATUS_SUSPENDED) {
            status = ew_status_of(code, message, message_length);
            break;
        }
    }
    int last_y = 0;
    if (status == EW_OK) {
        *rows = height;
    } else if (WebPIDecGetRGB(decoder, &last_y, NULL, NULL, NULL) != NULL && last_y > 0) {
        *rows = last_y <= height ? last_y : height;
    }
    WebPIDelete(decoder);
    WebPFreeDecBuffer(&config.output);
    return status;
}

// The first frame of an animation, drawn on a transparent canvas (as WebPAnimDecoder starts
// one): decoded straight into the output, with no canvas of libwebp's own, in slices.
static ew_status ew_decode_first_frame(const uint8_t *data, size_t length, int width, int height, int channels,
                                       uint8_t *output, size_t stride, size_t output_length,
                                       const int32_t *cancel_flag, int *rows, char *message, size_t message_length) {
    WebPData whole = {data, length};
    WebPDemuxState state;
    WebPDemuxer *demux = WebPDemuxPartial(&whole, &state);
    if (demux == NULL) {
        ew_say(message, message_length, "damaged animated WebP");
        return state == WEBP_DEMUX_PARSE_ERROR ? EW_ERR_CORRUPT : EW_ERR_TRUNCATED;
    }
    ew_status status;
    WebPIterator frame;
    if ((int)WebPDemuxGetI(demux, WEBP_FF_CANVAS_WIDTH) != width || (int)WebPDemuxGetI(demux, WEBP_FF_CANVAS_HEIGHT) != height) {
        ew_say(message, message_length, "an animated WebP decodes at its canvas size only");
        status = EW_ERR_UNSUPPORTED;
    } else if (!WebPDemuxGetFrame(demux, 1, &frame)) {
        ew_say(message, message_length, "the animated WebP's first frame is missing or cut");
        status = state == WEBP_DEMUX_DONE ? EW_ERR_CORRUPT : EW_ERR_TRUNCATED;
    } else {
        if (frame.x_offset < 0 || frame.y_offset < 0 || frame.width <= 0 || frame.height <= 0
            || frame.x_offset > width - frame.width || frame.y_offset > height - frame.height) {
            ew_say(message, message_length, "the animated WebP's first frame lies outside its canvas");
            status = EW_ERR_CORRUPT;
        } else {
            // Outside the frame the canvas stays transparent (black without alpha).
            for (int y = 0; y < height; y++) memset(output + (size_t)y * stride, 0, (size_t)width * (size_t)channels);
            size_t at = (size_t)frame.y_offset * stride + (size_t)frame.x_offset * (size_t)channels;
            int frame_rows = 0;
            status = ew_decode_sliced(frame.fragment.bytes, frame.fragment.size, frame.width, frame.height, channels,
                                      output + at, stride, output_length - at, cancel_flag, &frame_rows,
                                      message, message_length);
            *rows = status == EW_OK ? height : frame.y_offset + frame_rows;
        }
        WebPDemuxReleaseIterator(&frame);
    }
    WebPDemuxDelete(demux);
    return status;
}

ew_status ew_decode(const uint8_t *data, size_t length, int width, int height, int channels,
                    uint8_t *output, size_t stride, size_t output_length, const int32_t *cancel_flag,
                    int *rows, char *message, size_t message_length) {
    *rows = 0;
    if (ew_cancelled(cancel_flag)) {
        ew_say(message, message_length, "cancelled");
        return EW_ERR_CANCELLED;
    }
    WebPBitstreamFeatures features;
    VP8StatusCode code = WebPGetFeatures(data, length, &features);
    if (code != VP8_STATUS_OK) return ew_status_of(code, message, message_length);
    if (features.has_animation) {
        return ew_decode_first_frame(data, length, width, height, channels, output, stride, output_length, cancel_flag,
                                     rows, message, message_length);
    }
    return ew_decode_sliced(data, length, width, height, channels, output, stride, output_length, cancel_flag, rows,
                            message, message_length);
}

static int ew_progress(int percent, const WebPPicture *picture) {
    (void)percent;
    return !ew_cancelled((const int32_t *)picture->user_data);
}

ew_status ew_encode(const uint8_t *pixels, int width, int height, int channels, int quality, int lossless,
                    const uint8_t *icc, size_t icc_length, const int32_t *cancel_flag,
                    uint8_t **output, size_t *output_length, char *message, size_t message_length) {
    *output = NULL;
    *output_length = 0;
    WebPConfig config;
    if (!WebPConfigInit(&config)) {
        ew_say(message, message_length, "libwebp version mismatch");
        return EW_ERR_UNSUPPORTED;
    }
    config.quality = (float)quality;
    config.lossless = lossless != 0;
    config.method = 4;
    config.thread_level = 0;
    WebPPicture picture;
    if (!WebPPictureInit(&picture)) {
        ew_say(message, message_length, "libwebp version mismatch");
        return EW_ERR_UNSUPPORTED;
    }
    picture.width = width;
    picture.height = height;
    picture.use_argb = lossless != 0;
    picture.progress_hook = ew_progress;
    picture.user_data = (void *)cancel_flag;
    int imported;
    if (channels == 4) {
        imported = WebPPictureImportRGBA(&picture, pixels, width * 4);
    } else if (channels == 3) {
        imported = WebPPictureImportRGB(&picture, pixels, width * 3);
    } else {
        // Grey: WebP has no grey mode; its three channels carry the same value.
        uint8_t *rgb = malloc((size_t)width * (size_t)height * 3);
        if (rgb == NULL) {
            ew_say(message, message_length, "out of memory encoding a WebP");
            return EW_ERR_NO_MEMORY;
        }
        size_t count = (size_t)width * (size_t)height;
        for (size_t i = 0; i < count; i++) rgb[3 * i] = rgb[3 * i + 1] = rgb[3 * i + 2] = pixels[i];
        imported = WebPPictureImportRGB(&picture, rgb, width * 3);
        free(rgb);
    }
    if (!imported) {
        WebPPictureFree(&picture);
        ew_say(message, message_length, "out of memory encoding a WebP");
        return EW_ERR_NO_MEMORY;
    }
    WebPMemoryWriter writer;
    WebPMemoryWriterInit(&writer);
    picture.writer = WebPMemoryWrite;
    picture.custom_ptr = &writer;
    int encoded = WebPEncode(&config, &picture);
    WebPEncodingError error = picture.error_code;
    WebPPictureFree(&picture);
    if (!encoded) {
        WebPMemoryWriterClear(&writer);
        if (error == VP8_ENC_ERROR_USER_ABORT) {
            ew_say(message, message_length, "cancelled");
            return EW_ERR_CANCELLED;
        }
        ew_say(message, message_length, error == VP8_ENC_ERROR_OUT_OF_MEMORY || error == VP8_ENC_ERROR_BITSTREAM_OUT_OF_MEMORY
                                            ? "out of memory encoding a WebP" : "WebP encoding failed");
        return error == VP8_ENC_ERROR_OUT_OF_MEMORY || error == VP8_ENC_ERROR_BITSTREAM_OUT_OF_MEMORY
                   ? EW_ERR_NO_MEMORY : EW_ERR_CORRUPT;
    }
    const uint8_t *bytes = writer.mem;
    size_t size = writer.size;
    WebPData assembled = {NULL, 0};
    WebPMux *mux = NULL;
    if (icc != NULL && icc_length > 0) {
        // The profile goes in an ICCP chunk, which needs the extended (VP8X) layout.
        WebPData bitstream = {writer.mem, writer.size};
        WebPData profile = {icc, icc_length};
        mux = WebPMuxCreate(&bitstream, 0);
        if (mux == NULL || WebPMuxSetChunk(mux, "ICCP", &profile, 0) != WEBP_MUX_OK
            || WebPMuxAssemble(mux, &assembled) != WEBP_MUX_OK) {
            if (mux != NULL) WebPMuxDelete(mux);
            WebPDataClear(&assembled);
            WebPMemoryWriterClear(&writer);
            ew_say(message, message_length, "the ICC profile cannot be added to the WebP");
            return EW_ERR_CORRUPT;
        }
        bytes = assembled.bytes;
        size = assembled.size;
    }
    // Copied into memory of the C allocator's own, which the caller frees with free().
    uint8_t *copy = malloc(size);
    if (copy != NULL) memcpy(copy, bytes, size);
    if (mux != NULL) WebPMuxDelete(mux);
    WebPDataClear(&assembled);
    WebPMemoryWriterClear(&writer);
    if (copy == NULL) {
        ew_say(message, message_length, "out of memory encoding a WebP");
        return EW_ERR_NO_MEMORY;
    }
    *output = copy;
    *output_length = size;
    return EW_OK;
}
