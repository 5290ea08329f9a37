#include "cgif_shim.h"

#include <gif_lib.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void eg_say(char *message, size_t length, const char *text) {
    if (message != NULL && length > 0) snprintf(message, length, "%s", text);
}

static int eg_cancelled(const int32_t *flag) {
    return flag != NULL && __atomic_load_n(flag, __ATOMIC_ACQUIRE) != 0;
}

// The caller's bytes, read by giflib through `eg_read`. Past their end it reads zeros (and
// the cursor notes that the file is cut): a zero is the end of a run of data blocks, so an
// image whose data is whole but whose last block terminator is missing still decodes to
// its last row, and anything else stops at giflib's next check.
typedef struct {
    const uint8_t *data;
    size_t length;
    size_t offset;
    int exhausted;  // a read came up short: whatever giflib then reports, the file is cut
} eg_cursor;

static int eg_read(GifFileType *gif, GifByteType *into, int wanted) {
    eg_cursor *cursor = gif->UserData;
    if (wanted <= 0) return 0;
    size_t left = cursor->length - cursor->offset;
    size_t count = (size_t)wanted < left ? (size_t)wanted : left;
    memcpy(into, cursor->data + cursor->offset, count);
    cursor->offset += count;
    if (count < (size_t)wanted) {
        memset(into + count, 0, (size_t)wanted - count);
        cursor->exhausted = 1;
    }
    return wanted;
}

// giflib's error code as a status and a message. Once the bytes have run out the file is
// cut, whichever code giflib then gives (opening a file too short for its screen descriptor
// says D_GIF_ERR_NO_SCRN_DSCR, say); before that, every code is damage (giflib also says
// D_GIF_ERR_READ_FAILED of a bad LZW code size, and D_GIF_ERR_EOF_TOO_SOON of an end code
// before the image's last pixel).
static eg_status eg_status_of(int error, const eg_cursor *cursor, char *message, size_t length) {
    if (cursor->exhausted) {
        eg_say(message, length, "the GIF data ends early");
        return EG_ERR_TRUNCATED;
    }
    char text[160];
    const char *what = GifErrorString(error);
    snprintf(text, sizeof text, "damaged GIF: %s", what != NULL ? what : "unknown error");
    switch (error) {
    case D_GIF_ERR_NOT_GIF_FILE:
        eg_say(message, length, "not a GIF: no GIF87a/GIF89a signature");
        return EG_ERR_NOT_GIF;
    case D_GIF_ERR_NOT_ENOUGH_MEM:
        eg_say(message, length, "out of memory reading the GIF");
        return EG_ERR_NO_MEMORY;
    default:
        eg_say(message, length, text);
        return EG_ERR_CORRUPT;
    }
}

static void eg_close(GifFileType *gif) {
    int ignored;
    if (gif != NULL) DGifCloseFile(gif, &ignored);
}

// Opens the bytes and reads up to (and including) the first image's descriptor, noting the
// graphic control and looping extensions on the way. On EG_OK `*opened` is positioned at the
// first image's pixel data and `info` is filled; the caller closes it.
static eg_status eg_open_first_image(eg_cursor *cursor, eg_info *info, GifFileType **opened, char *message,
                                     size_t message_length) {
    memset(info, 0, sizeof *info);
    info->transparent_index = -1;
    *opened = NULL;
    if (cursor->length < 6 || (memcmp(cursor->data, "GIF87a", 6) != 0 && memcmp(cursor->data, "GIF89a", 6) != 0)) {
        eg_say(message, message_length, "not a GIF: no GIF87a/GIF89a signature");
        return EG_ERR_NOT_GIF;
    }
    int error = 0;
    GifFileType *gif = DGifOpen(cursor, eg_read, &error);
    if (gif == NULL) return eg_status_of(error, cursor, message, message_length);
    for (;;) {
        GifRecordType record;
        if (DGifGetRecordType(gif, &record) == GIF_ERROR) {
            eg_status status = eg_status_of(gif->Error, cursor, message, message_length);
            eg_close(gif);
            return status;
        }
        if (record == TERMINATE_RECORD_TYPE) {
            eg_say(message, message_length, "the GIF holds no image");
            eg_close(gif);
            return EG_ERR_CORRUPT;
        }
        if (record == IMAGE_DESC_RECORD_TYPE) break;
        // An extension: its sub-blocks are read (the bytes stay giflib's, valid until the
        // next call) and only two kinds are looked at.
        int code = 0;
        GifByteType *block = NULL;
        if (DGifGetExtension(gif, &code, &block) == GIF_ERROR) {
            eg_status status = eg_status_of(gif->Error, cursor, message, message_length);
            eg_close(gif);
            return status;
        }
        int first = 1;
        while (block != NULL) {
            if (code == GRAPHICS_EXT_FUNC_CODE && first && block[0] >= 4) {
                // Packed fields, delay (2 bytes), transparent index: read here, as browsers
                // read a block longer than its 4 bytes (giflib's DGifExtensionToGCB refuses it).
                info->transparent_index = (block[1] & 0x01) ? block[4] : -1;
            } else if (code == APPLICATION_EXT_FUNC_CODE && first && block[0] == 11
                       && (memcmp(block + 1, "NETSCAPE2.0", 11) == 0 || memcmp(block + 1, "ANIMEXTS1.0", 11) == 0)) {
                info->animated = 1;
            }
            first = 0;
            if (DGifGetExtensionNext(gif, &block) == GIF_ERROR) {
                eg_status status = eg_status_of(gif->Error, cursor, message, message_length);
                eg_close(gif);
                return status;
            }
        }
    }
    if (DGifGetImageDesc(gif) == GIF_ERROR) {
        eg_status status = eg_status_of(gif->Error, cursor, message, message_length);
        eg_close(gif);
        return status;
    }
    const GifImageDesc *image = &gif->Image;
    const ColorMapObject *palette = image->ColorMap != NULL ? image->ColorMap : gif->SColorMap;
    if (image->Width <= 0 || image->Height <= 0) {
        eg_say(message, message_length, "the GIF's first image is empty (0 pixels wide or high)");
        eg_close(gif);
        return EG_ERR_CORRUPT;
    }
    if (palette == NULL || palette->ColorCount <= 0 || palette->Colors == NULL) {
        eg_say(message, message_length, "the GIF's first image has no colour table (neither its own nor a global one)");
        eg_close(gif);
        return EG_ERR_CORRUPT;
    }
    // Both are 16-bit in the file: the sums cannot overflow an int.
    info->frame_left = image->Left;
    info->frame_top = image->Top;
    info->frame_width = image->Width;
    info->frame_height = image->Height;
    info->width = gif->SWidth > image->Left + image->Width ? gif->SWidth : image->Left + image->Width;
    info->height = gif->SHeight > image->Top + image->Height ? gif->SHeight : image->Top + image->Height;
    info->interlaced = image->Interlace ? 1 : 0;
    info->colours = palette->ColorCount;
    if (info->transparent_index >= palette->ColorCount) info->transparent_index = -1;  // names no colour
    int covers = info->frame_left == 0 && info->frame_top == 0 && info->frame_width == info->width
                 && info->frame_height == info->height;
    info->has_alpha = info->transparent_index >= 0 || !covers;
    *opened = gif;
    return EG_OK;
}

eg_status eg_read_header(const uint8_t *data, size_t length, eg_info *info, char *message, size_t message_length) {
    eg_cursor cursor = {data, length, 0};
    GifFileType *gif = NULL;
    eg_status status = eg_open_first_image(&cursor, info, &gif, message, message_length);
    eg_close(gif);
    return status;
}

// The canvas row of the `index`th stored row of an interlaced image `height` rows high: GIF
// stores rows 0, 8, 16, … first, then 4, 12, …, then 2, 6, …, then the odd ones.
static int eg_interlaced_row(int index, int height) {
    const int starts[4] = {0, 4, 2, 1}, steps[4] = {8, 8, 4, 2};
    for (int pass = 0; pass < 4; pass++) {
        int in_pass = starts[pass] < height ? (height - starts[pass] + steps[pass] - 1) / steps[pass] : 0;
        if (index < in_pass) return starts[pass] + index * steps[pass];
        index -= in_pass;
    }
    return -1;
}

eg_status eg_decode(const uint8_t *data, size_t length, const eg_info *expected, int channels, uint8_t *output,
                    size_t stride, size_t output_length, const int32_t *cancel_flag, int *rows, char *message,
                    size_t message_length) {
    *rows = 0;
    if (eg_cancelled(cancel_flag)) {
        eg_say(message, message_length, "cancelled");
        return EG_ERR_CANCELLED;
    }
    eg_cursor cursor = {data, length, 0};
    eg_info info;
    GifFileType *gif = NULL;
    eg_status status = eg_open_first_image(&cursor, &info, &gif, message, message_length);
    if (status != EG_OK) return status;
    if (info.width != expected->width || info.height != expected->height || (channels != 3 && channels != 4)
        || (channels == 3 && info.has_alpha) || (size_t)info.width * (size_t)channels > stride
        || stride * (size_t)(info.height - 1) + (size_t)info.width * (size_t)channels > output_length) {
        eg_say(message, message_length, "the GIF decode was asked for another canvas than its header gives");
        eg_close(gif);
        return EG_ERR_CORRUPT;
    }
    GifPixelType *line = malloc((size_t)info.frame_width);
    if (line == NULL) {
        eg_say(message, message_length, "out of memory decoding the GIF");
        eg_close(gif);
        return EG_ERR_NO_MEMORY;
    }
    for (int y = 0; y < info.height; y++) memset(output + (size_t)y * stride, 0, (size_t)info.width * (size_t)channels);
    const ColorMapObject *palette = gif->Image.ColorMap != NULL ? gif->Image.ColorMap : gif->SColorMap;
    // The palette as straight RGBA, all 256 entries: those past its end opaque black, the
    // transparent one transparent black.
    uint8_t colours[256][4];
    for (int i = 0; i < 256; i++) {
        const GifColorType *colour = i < palette->ColorCount ? &palette->Colors[i] : NULL;
        colours[i][0] = colour != NULL ? colour->Red : 0;
        colours[i][1] = colour != NULL ? colour->Green : 0;
        colours[i][2] = colour != NULL ? colour->Blue : 0;
        colours[i][3] = i == info.transparent_index ? 0 : 255;
        if (i == info.transparent_index) colours[i][0] = colours[i][1] = colours[i][2] = 0;
    }
    status = EG_OK;
    size_t since_check = 0;
    for (int index = 0; index < info.frame_height; index++) {
        since_check += (size_t)info.frame_width;
        if (since_check >= (64u << 10)) {
            since_check = 0;
            if (eg_cancelled(cancel_flag)) {
                eg_say(message, message_length, "cancelled");
                status = EG_ERR_CANCELLED;
                break;
            }
        }
        if (DGifGetLine(gif, line, info.frame_width) == GIF_ERROR) {
            status = eg_status_of(gif->Error, &cursor, message, message_length);
            break;
        }
        int y = info.interlaced ? eg_interlaced_row(index, info.frame_height) : index;
        uint8_t *to = output + (size_t)(info.frame_top + y) * stride + (size_t)info.frame_left * (size_t)channels;
        if (channels == 4) {
            for (int x = 0; x < info.frame_width; x++) memcpy(to + 4 * (size_t)x, colours[line[x]], 4);
        } else {
            for (int x = 0; x < info.frame_width; x++) memcpy(to + 3 * (size_t)x, colours[line[x]], 3);
        }
        *rows = index + 1;
    }
    free(line);
    eg_close(gif);
    // Every row decoded, but only with zeros read past the end (a missing block terminator):
    // the file is cut after its last row.
    if (status == EG_OK && cursor.exhausted) {
        eg_say(message, message_length, "the GIF data ends early, after the image's last row");
        status = EG_ERR_TRUNCATED;
    }
    return status;
}
