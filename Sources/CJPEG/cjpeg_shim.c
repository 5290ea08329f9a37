// See include/cjpeg_shim.h: this file exists because libjpeg's error recovery is longjmp.
#include <setjmp.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "cjpeg_shim.h"

int32_t ej_atomic_load(const int32_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
void ej_atomic_store(int32_t *p, int32_t value) { __atomic_store_n(p, value, __ATOMIC_RELEASE); }

void ej_free(void *pointer) { free(pointer); }

// --- shared error handling ---------------------------------------------------------------

// Every libjpeg object used here embeds one of these; libjpeg's error hooks find it through
// client_data and longjmp back to the guarded entry point with the failure recorded.
typedef struct {
    jmp_buf jump;
    ej_status failure;
    char message[JMSG_LENGTH_MAX + 64];
} ej_guard;

static ej_status ej_classify_error(int code) {
    switch (code) {
    case JERR_NO_SOI:
        return EJ_ERR_NOT_JPEG;
    case JERR_INPUT_EMPTY:
    case JERR_INPUT_EOF:
        return EJ_ERR_TRUNCATED;
    case JERR_BAD_PRECISION:
    case JERR_SOF_UNSUPPORTED:
    case JERR_NOT_COMPILED:
    case JERR_NOTIMPL:
    case JERR_ARITH_NOTIMPL:
    case JERR_CONVERSION_NOTIMPL:
    case JERR_CCIR601_NOTIMPL:
        return EJ_ERR_UNSUPPORTED;
    case JERR_IMAGE_TOO_BIG:
    case JERR_WIDTH_OVERFLOW:
        return EJ_ERR_TOO_LARGE;
    case JERR_OUT_OF_MEMORY:
    case JERR_NO_BACKING_STORE:
        return EJ_ERR_NO_MEMORY;
    case JERR_BAD_STATE:
    case JERR_BAD_BUFFER_MODE:
        return EJ_ERR_USAGE;
    default:
        return EJ_ERR_CORRUPT;
    }
}

static void ej_fail(j_common_ptr cinfo, ej_status status) {
    ej_guard *guard = (ej_guard *)cinfo->client_data;
    (*cinfo->err->format_message)(cinfo, guard->message);
    guard->failure = status;
    longjmp(guard->jump, 1);
}

static void ej_error_exit(j_common_ptr cinfo) {
    ej_fail(cinfo, ej_classify_error(cinfo->err->msg_code));
}

// libjpeg "warns" about truncated or corrupt data and goes on with grey pixels. The encoder
// never should warn: there every warning (level -1) fails like an error.
static void ej_emit_message(j_common_ptr cinfo, int level) {
    if (level >= 0) return;  // trace messages
    ej_fail(cinfo, cinfo->err->msg_code == JWRN_JPEG_EOF ? EJ_ERR_TRUNCATED : EJ_ERR_CORRUPT);
}

// Warnings a decoder accepts before it gives up on the input as damaged beyond use.
#define EJ_MAX_WARNINGS 100

// The least sensitive fail_on level that fails on a decoder warning.
int ej_warning_threshold(int msg_code, int marker) {
    switch (msg_code) {
    case JWRN_EXTRANEOUS_DATA:
        // Stray bytes before a marker between segments are skipped and lose nothing; before a
        // restart marker they are inside the entropy-coded data, which is then damaged.
        return (marker >= 0xD0 && marker <= 0xD7) ? EJ_FAIL_ON_ERROR : EJ_FAIL_ON_WARNING;
    case JWRN_JFIF_MAJOR:  // an unknown JFIF revision: the pixels decode as usual
        return EJ_FAIL_ON_WARNING;
    case JWRN_BOGUS_ICC:
        // A damaged ICC profile is not damage to the image: the profile is ignored (and the
        // colours taken as sRGB), at every level.
        return EJ_FAIL_ON_WARNING + 1;
    case JWRN_JPEG_EOF:
        return EJ_FAIL_ON_TRUNCATED;
    default:  // damaged entropy-coded data, impossible scan parameters, ...
        return EJ_FAIL_ON_ERROR;
    }
}

static void ej_fail_with(j_common_ptr cinfo, ej_status status, const char *message) {
    ej_guard *guard = (ej_guard *)cinfo->client_data;
    snprintf(guard->message, sizeof guard->message, "%s", message);
    guard->failure = status;
    longjmp(guard->jump, 1);
}

// --- decoder -----------------------------------------------------------------------------

struct ej_decoder {
    ej_guard guard;  // first: client_data points here
    int fail_on;        // an ej_fail_on: warnings this severe or worse fail
    int warnings;       // warnings accepted under fail_on
    char first_warning[JMSG_LENGTH_MAX];
    struct jpeg_decompress_struct cinfo;
    struct jpeg_error_mgr jerr;
    struct jpeg_progress_mgr progress;
    const int32_t *cancel;
    int max_scans;
    int convert_cmyk;   // output is CMYK from libjpeg, converted to RGB per row here
    int keep_cmyk;      // instead, CMYK rows are delivered as they are (ink values, not inverted)
    int cmyk_inverted;  // Adobe CMYK stores 255 - ink
    uint8_t *scratch;   // one CMYK row
    uint8_t *icc;       // the embedded ICC profile (its chunks reassembled), or NULL
    size_t icc_length;
    int out_channels;
    int skip_metadata;  // read no EXIF and no ICC profile (a gain map's own)
    // What the APP1/APP2 markers hold, seen in place in the input (which outlives the
    // decoder): nothing of theirs is copied but the reassembled profile. libjpeg's own
    // saving would copy every APP1/APP2 marker, up to the whole input, before any limit.
    const uint8_t *exif;
    size_t exif_length;
    const uint8_t *icc_chunk[256];  // by sequence number 1...255
    size_t icc_chunk_length[256];
    int icc_chunk_count;            // the count the first chunk gave; -1 once the set is damaged
};

static void ej_check_limits(ej_decoder *dec) {
    j_common_ptr common = (j_common_ptr)&dec->cinfo;
    if (dec->cancel != NULL && ej_atomic_load(dec->cancel) != 0)
        ej_fail_with(common, EJ_ERR_CANCELLED, "cancelled");
    if (dec->max_scans > 0 && dec->cinfo.input_scan_number > dec->max_scans) {
        char text[96];
        snprintf(text, sizeof text, "more than %d scans", dec->max_scans);
        ej_fail_with(common, EJ_ERR_TOO_MANY_SCANS, text);
    }
}

// Called by libjpeg between iMCU rows while it consumes a multi-scan file and once per
// jpeg_read_scanlines call: the checkpoint for cancellation and the scan limit.
static void ej_progress_monitor(j_common_ptr cinfo) {
    ej_decoder *dec = (ej_decoder *)cinfo->client_data;
    ej_check_limits(dec);
}

// A decoder warning fails when the decoder's fail_on is sensitive enough for it; otherwise
// libjpeg goes on (repairing what it can) and the warning is counted for the caller.
static void ej_decoder_emit_message(j_common_ptr cinfo, int level) {
    if (level >= 0) return;  // trace messages
    ej_decoder *dec = (ej_decoder *)cinfo->client_data;
    if (dec->fail_on >= ej_warning_threshold(cinfo->err->msg_code, cinfo->err->msg_parm.i[1]))
        ej_fail(cinfo, cinfo->err->msg_code == JWRN_JPEG_EOF ? EJ_ERR_TRUNCATED : EJ_ERR_CORRUPT);
    if (dec->warnings++ == 0) (*cinfo->err->format_message)(cinfo, dec->first_warning);
    // A real file has a few; thousands are a fuzzed one making libjpeg resync over and over,
    // which costs seconds of CPU whatever the level says.
    if (dec->warnings > EJ_MAX_WARNINGS) {
        char text[96];
        snprintf(text, sizeof text, "more than %d damaged places in the data", EJ_MAX_WARNINGS);
        ej_fail_with(cinfo, EJ_ERR_CORRUPT, text);
    }
}

ej_decoder *ej_decoder_create(const int32_t *cancel_flag, int max_scans, long max_memory, int fail_on) {
    ej_decoder *dec = calloc(1, sizeof *dec);
    if (dec == NULL) return NULL;
    dec->cancel = cancel_flag;
    dec->max_scans = max_scans;
    dec->fail_on = fail_on;
    dec->cinfo.err = jpeg_std_error(&dec->jerr);
    dec->jerr.error_exit = ej_error_exit;
    dec->jerr.emit_message = ej_decoder_emit_message;
    if (setjmp(dec->guard.jump)) {
        // What create allocated before failing (its memory manager, once there) goes too:
        // jpeg_destroy frees the pools when there are any.
        jpeg_destroy_decompress(&dec->cinfo);
        free(dec);
        return NULL;
    }
    dec->cinfo.client_data = &dec->guard;  // before create (which keeps it): its failure reports through it
    jpeg_create_decompress(&dec->cinfo);
    // Without a backing store, a virtual array over this bound fails instead of allocating.
    if (max_memory > 0) dec->cinfo.mem->max_memory_to_use = max_memory;
    dec->progress.progress_monitor = ej_progress_monitor;
    dec->cinfo.progress = &dec->progress;
    return dec;
}

int ej_decoder_warnings(const ej_decoder *dec, const char **first) {
    if (first != NULL) *first = dec->warnings > 0 ? dec->first_warning : NULL;
    return dec->warnings;
}

void ej_decoder_destroy(ej_decoder *dec) {
    if (dec == NULL) return;
    jpeg_destroy_decompress(&dec->cinfo);
    free(dec->scratch);
    free(dec->icc);
    free(dec);
}

const char *ej_message(const ej_decoder *dec) { return dec->guard.message; }

static int ej_color_of(J_COLOR_SPACE space) {
    switch (space) {
    case JCS_GRAYSCALE: return EJ_COLOR_GRAY;
    case JCS_YCbCr: return EJ_COLOR_YCBCR;
    case JCS_RGB: return EJ_COLOR_RGB;
    case JCS_CMYK: return EJ_COLOR_CMYK;
    case JCS_YCCK: return EJ_COLOR_YCCK;
    default: return EJ_COLOR_UNKNOWN;
    }
}

// Called by libjpeg for every APP1 and APP2 marker: notes the first EXIF payload and the ICC
// profile's chunks where they lie in the input, then skips the marker. A length word below 2
// is taken as an empty marker, as libjpeg's own reader does.
static boolean ej_read_app_marker(j_decompress_ptr cinfo) {
    ej_decoder *dec = (ej_decoder *)cinfo->client_data;
    struct jpeg_source_mgr *src = cinfo->src;
    unsigned int word = 0;
    for (int i = 0; i < 2; i++) {
        if (src->bytes_in_buffer == 0 && !(*src->fill_input_buffer)(cinfo)) return FALSE;
        word = (word << 8) | *src->next_input_byte++;
        src->bytes_in_buffer--;
    }
    size_t length = word >= 2 ? word - 2 : 0;
    if (length > src->bytes_in_buffer) {
        // Cut short by the end of the input: nothing of it is kept. What there is is skipped,
        // and the next read meets the end once (libjpeg's truncation warning), rather than
        // refilling the fake end of file for every two bytes of the length.
        src->next_input_byte += src->bytes_in_buffer;
        src->bytes_in_buffer = 0;
        return TRUE;
    }
    const uint8_t *payload = src->next_input_byte;
    src->next_input_byte += length;
    src->bytes_in_buffer -= length;
    if (dec->skip_metadata) return TRUE;
    if (cinfo->unread_marker == JPEG_APP0 + 1) {
        if (dec->exif == NULL && length >= 6 && memcmp(payload, "Exif\0\0", 6) == 0) {
            dec->exif = payload + 6;
            dec->exif_length = length - 6;
        }
    } else if (length >= 14 && memcmp(payload, "ICC_PROFILE\0", 12) == 0 && dec->icc_chunk_count >= 0) {
        int sequence = payload[12], count = payload[13];
        if (dec->icc_chunk_count == 0) dec->icc_chunk_count = count;
        if (sequence == 0 || count == 0 || sequence > count || count != dec->icc_chunk_count
            || dec->icc_chunk[sequence] != NULL) {
            dec->icc_chunk_count = -1;  // damaged: no profile (a warning, once the header is read)
        } else {
            dec->icc_chunk[sequence] = payload + 14;
            dec->icc_chunk_length[sequence] = length - 14;
        }
    }
    return TRUE;
}

// The profile's chunks in sequence order, in one buffer: NULL (with JWRN_BOGUS_ICC, subject
// to fail_on) when a chunk is missing, repeated or out of range, or the profile is empty.
static void ej_assemble_icc(ej_decoder *dec) {
    if (dec->icc_chunk_count == 0) return;
    size_t total = 0;
    int whole = dec->icc_chunk_count > 0;
    for (int i = 1; whole && i <= dec->icc_chunk_count; i++) {
        if (dec->icc_chunk[i] == NULL) whole = 0;
        else total += dec->icc_chunk_length[i];
    }
    if (!whole || total == 0) {
        WARNMS(&dec->cinfo, JWRN_BOGUS_ICC);
        return;
    }
    uint8_t *icc = malloc(total);
    if (icc == NULL) ej_fail_with((j_common_ptr)&dec->cinfo, EJ_ERR_NO_MEMORY, "out of memory for the ICC profile");
    size_t at = 0;
    for (int i = 1; i <= dec->icc_chunk_count; i++) {
        memcpy(icc + at, dec->icc_chunk[i], dec->icc_chunk_length[i]);
        at += dec->icc_chunk_length[i];
    }
    free(dec->icc);
    dec->icc = icc;
    dec->icc_length = total;
}

void ej_decoder_skip_metadata(ej_decoder *dec) { dec->skip_metadata = 1; }

ej_status ej_read_header(ej_decoder *dec, const uint8_t *data, size_t length, ej_info *info) {
    if (setjmp(dec->guard.jump)) return dec->guard.failure;
    jpeg_mem_src(&dec->cinfo, data, (unsigned long)length);
    jpeg_set_marker_processor(&dec->cinfo, JPEG_APP0 + 1, ej_read_app_marker);
    jpeg_set_marker_processor(&dec->cinfo, JPEG_APP0 + 2, ej_read_app_marker);
    jpeg_read_header(&dec->cinfo, TRUE);

    memset(info, 0, sizeof *info);
    info->width = (int)dec->cinfo.image_width;
    info->height = (int)dec->cinfo.image_height;
    info->components = dec->cinfo.num_components;
    info->color = ej_color_of(dec->cinfo.jpeg_color_space);
    info->progressive = dec->cinfo.progressive_mode ? 1 : 0;
    info->arithmetic = dec->cinfo.arith_code ? 1 : 0;
    info->adobe_marker = dec->cinfo.saw_Adobe_marker ? 1 : 0;
    // A sequential file whose first scan leaves out a component has further scans; libjpeg
    // then buffers the whole image's coefficients, as it does for every progressive file.
    info->multi_scan = (dec->cinfo.progressive_mode || dec->cinfo.comps_in_scan < dec->cinfo.num_components) ? 1 : 0;
    info->max_h_samp = dec->cinfo.max_h_samp_factor;
    info->max_v_samp = dec->cinfo.max_v_samp_factor;
    // As jdcoefct.c sizes its virtual arrays: blocks rounded up to whole MCUs per component.
    size_t coefficients = 0;
    for (int i = 0; i < dec->cinfo.num_components; i++) {
        const jpeg_component_info *c = &dec->cinfo.comp_info[i];
        size_t across = ((size_t)c->width_in_blocks + c->h_samp_factor - 1) / c->h_samp_factor * c->h_samp_factor;
        size_t down = ((size_t)c->height_in_blocks + c->v_samp_factor - 1) / c->v_samp_factor * c->v_samp_factor;
        coefficients += across * down * DCTSIZE2 * sizeof(JCOEF);
    }
    info->coefficient_bytes = coefficients;
    info->precision = dec->cinfo.data_precision;
    // The profile's chunks reassembled; a damaged set is a warning (JWRN_BOGUS_ICC, subject
    // to fail_on) and leaves no profile.
    ej_assemble_icc(dec);
    info->icc = dec->icc;
    info->icc_length = dec->icc_length;
    info->exif = dec->exif;
    info->exif_length = dec->exif_length;
    if (info->color == EJ_COLOR_UNKNOWN) {
        snprintf(dec->guard.message, sizeof dec->guard.message, "unsupported colour space with %d components",
                 info->components);
        return EJ_ERR_UNSUPPORTED;
    }
    return EJ_OK;
}

static ej_status ej_prepare(ej_decoder *dec, int scale_num) {
    if (scale_num < 1 || scale_num > 8) {
        snprintf(dec->guard.message, sizeof dec->guard.message, "scale %d/8 is out of range", scale_num);
        return EJ_ERR_USAGE;
    }
    struct jpeg_decompress_struct *cinfo = &dec->cinfo;
    cinfo->scale_num = (unsigned int)scale_num;
    cinfo->scale_denom = 8;
    cinfo->dct_method = JDCT_ISLOW;
    switch (cinfo->jpeg_color_space) {
    case JCS_GRAYSCALE:
        cinfo->out_color_space = JCS_GRAYSCALE;
        dec->out_channels = 1;
        break;
    case JCS_CMYK:
    case JCS_YCCK:
        cinfo->out_color_space = JCS_CMYK;  // libjpeg turns YCCK into CMYK; RGB is ours to do
        dec->convert_cmyk = 1;
        dec->cmyk_inverted = cinfo->saw_Adobe_marker ? 1 : 0;
        dec->out_channels = dec->keep_cmyk ? 4 : 3;
        break;
    default:
        cinfo->out_color_space = JCS_RGB;
        dec->out_channels = 3;
        break;
    }
    return EJ_OK;
}

void ej_set_keep_cmyk(ej_decoder *dec, int keep) { dec->keep_cmyk = keep; }

// A CMYK row as ink amounts (0 = no ink), whichever way the file stores it.
static void ej_cmyk_copy(const uint8_t *cmyk, uint8_t *out, size_t width, int inverted) {
    if (!inverted) {
        memcpy(out, cmyk, width * 4);
        return;
    }
    for (size_t i = 0; i < width * 4; i++) out[i] = (uint8_t)(255 - cmyk[i]);
}

static ej_status ej_started(ej_decoder *dec, int *out_width, int *out_height, int *out_channels) {
    *out_width = (int)dec->cinfo.output_width;
    *out_height = (int)dec->cinfo.output_height;
    *out_channels = dec->out_channels;
    if (dec->convert_cmyk) {
        free(dec->scratch);
        dec->scratch = malloc((size_t)dec->cinfo.output_width * 4);
        if (dec->scratch == NULL) {
            snprintf(dec->guard.message, sizeof dec->guard.message, "out of memory for a CMYK row");
            return EJ_ERR_NO_MEMORY;
        }
    }
    return EJ_OK;
}

ej_status ej_start(ej_decoder *dec, int scale_num, int *out_width, int *out_height, int *out_channels) {
    ej_status status = ej_prepare(dec, scale_num);
    if (status != EJ_OK) return status;
    if (setjmp(dec->guard.jump)) return dec->guard.failure;
    jpeg_start_decompress(&dec->cinfo);
    return ej_started(dec, out_width, out_height, out_channels);
}

ej_status ej_start_buffered(ej_decoder *dec, int scale_num, int *out_width, int *out_height, int *out_channels) {
    ej_status status = ej_prepare(dec, scale_num);
    if (status != EJ_OK) return status;
    if (setjmp(dec->guard.jump)) return dec->guard.failure;
    dec->cinfo.buffered_image = TRUE;
    jpeg_start_decompress(&dec->cinfo);
    return ej_started(dec, out_width, out_height, out_channels);
}

static inline uint8_t ej_mul255(unsigned a, unsigned b) {
    unsigned t = a * b + 128;
    return (uint8_t)((t + (t >> 8)) >> 8);
}

static void ej_cmyk_to_rgb(const uint8_t *cmyk, uint8_t *rgb, size_t width, int inverted) {
    for (size_t x = 0; x < width; x++, cmyk += 4, rgb += 3) {
        unsigned c = cmyk[0], m = cmyk[1], y = cmyk[2], k = cmyk[3];
        if (!inverted) {
            c = 255 - c; m = 255 - m; y = 255 - y; k = 255 - k;
        }
        rgb[0] = ej_mul255(c, k);
        rgb[1] = ej_mul255(m, k);
        rgb[2] = ej_mul255(y, k);
    }
}

ej_status ej_read_rows(ej_decoder *dec, uint8_t *dst, size_t stride, int max_rows, int *rows_read) {
    // volatile: read after a longjmp back into this frame.
    volatile int done = 0;
    *rows_read = 0;
    if (setjmp(dec->guard.jump)) {
        *rows_read = done;
        return dec->guard.failure;
    }
    ej_check_limits(dec);
    struct jpeg_decompress_struct *cinfo = &dec->cinfo;
    while (done < max_rows && cinfo->output_scanline < cinfo->output_height) {
        uint8_t *row = dst + (size_t)done * stride;
        if (dec->convert_cmyk) {
            JSAMPROW scratch = dec->scratch;
            JDIMENSION got = jpeg_read_scanlines(cinfo, &scratch, 1);
            if (got == 0) break;
            if (dec->keep_cmyk) {
                ej_cmyk_copy(dec->scratch, row, cinfo->output_width, dec->cmyk_inverted);
            } else {
                ej_cmyk_to_rgb(dec->scratch, row, cinfo->output_width, dec->cmyk_inverted);
            }
            done += 1;
        } else {
            JSAMPROW rows[8];
            int want = max_rows - done;
            if (want > 8) want = 8;
            for (int i = 0; i < want; i++) rows[i] = row + (size_t)i * stride;
            JDIMENSION got = jpeg_read_scanlines(cinfo, rows, (JDIMENSION)want);
            if (got == 0) break;
            done += (int)got;
        }
    }
    *rows_read = done;
    return EJ_OK;
}

ej_status ej_finish(ej_decoder *dec) {
    if (setjmp(dec->guard.jump)) return dec->guard.failure;
    jpeg_finish_decompress(&dec->cinfo);
    return EJ_OK;
}

ej_status ej_consume_scans(ej_decoder *dec, int scans, int *scans_completed, int *reached_eoi) {
    volatile int eoi = 0;
    if (setjmp(dec->guard.jump)) return dec->guard.failure;
    struct jpeg_decompress_struct *cinfo = &dec->cinfo;
    for (;;) {
        ej_check_limits(dec);
        if (jpeg_input_complete(cinfo)) {
            eoi = 1;
            break;
        }
        int result = jpeg_consume_input(cinfo);
        if (result == JPEG_REACHED_EOI) {
            eoi = 1;
            break;
        }
        if (result == JPEG_SUSPENDED) break;  // a memory source only suspends at its end
        // Reaching the start of scan `scans + 1` means the first `scans` scans are complete.
        if (result == JPEG_REACHED_SOS && scans > 0 && cinfo->input_scan_number > scans) break;
    }
    *reached_eoi = eoi;
    *scans_completed = eoi ? cinfo->input_scan_number : cinfo->input_scan_number - 1;
    return EJ_OK;
}

ej_status ej_start_output_pass(ej_decoder *dec, int fast) {
    if (setjmp(dec->guard.jump)) return dec->guard.failure;
    // The IDCT may change between passes: a preview can take the fast integer one.
    dec->cinfo.dct_method = fast ? JDCT_IFAST : JDCT_ISLOW;
    jpeg_start_output(&dec->cinfo, dec->cinfo.input_scan_number);
    return EJ_OK;
}

ej_status ej_finish_output_pass(ej_decoder *dec) {
    if (setjmp(dec->guard.jump)) return dec->guard.failure;
    jpeg_finish_output(&dec->cinfo);
    return EJ_OK;
}

// --- encoder -----------------------------------------------------------------------------

// Our own growable memory destination rather than jpeg_mem_dest: that one frees its
// initial buffer when it grows but only reports the current one at the end, so after an
// error (or a cancel) mid-encode the caller cannot know which buffer to free.
typedef struct {
    struct jpeg_destination_mgr pub;
    unsigned char *buffer;  // always the live allocation (or NULL)
    size_t capacity;
    size_t length;          // bytes finished when the encode ends
    size_t limit;           // largest capacity allowed (0 = no bound)
} ej_destination;

typedef struct {
    ej_guard guard;
    struct jpeg_compress_struct cinfo;
    struct jpeg_error_mgr jerr;
    ej_destination dest;
} ej_encoder;

static void ej_dest_out_of_memory(j_compress_ptr cinfo, size_t wanted) {
    ej_destination *dest = (ej_destination *)cinfo->dest;
    char text[160];
    if (dest->limit > 0 && wanted > dest->limit)
        snprintf(text, sizeof text, "the encoded output needs more than %zu bytes, the limit per buffer", dest->limit);
    else
        snprintf(text, sizeof text, "out of memory growing the encoded output to %zu bytes", wanted);
    ej_fail_with((j_common_ptr)cinfo, EJ_ERR_NO_MEMORY, text);
}

static void ej_dest_init(j_compress_ptr cinfo) {
    ej_destination *dest = (ej_destination *)cinfo->dest;
    dest->capacity = 64 * 1024;
    if (dest->limit > 0 && dest->capacity > dest->limit) dest->capacity = dest->limit;
    dest->buffer = malloc(dest->capacity);
    if (dest->buffer == NULL) ej_dest_out_of_memory(cinfo, dest->capacity);
    dest->pub.next_output_byte = dest->buffer;
    dest->pub.free_in_buffer = dest->capacity;
}

static boolean ej_dest_empty(j_compress_ptr cinfo) {
    ej_destination *dest = (ej_destination *)cinfo->dest;
    size_t grown = dest->capacity * 2;
    if (dest->limit > 0 && grown > dest->limit) {
        if (dest->capacity >= dest->limit) ej_dest_out_of_memory(cinfo, dest->capacity + 1);
        grown = dest->limit;
    }
    unsigned char *bigger = realloc(dest->buffer, grown);
    if (bigger == NULL) ej_dest_out_of_memory(cinfo, grown);
    // libjpeg calls this only when the buffer is full.
    dest->pub.next_output_byte = bigger + dest->capacity;
    dest->pub.free_in_buffer = grown - dest->capacity;
    dest->buffer = bigger;
    dest->capacity = grown;
    return TRUE;
}

static void ej_dest_term(j_compress_ptr cinfo) {
    ej_destination *dest = (ej_destination *)cinfo->dest;
    dest->length = dest->capacity - dest->pub.free_in_buffer;
}

ej_status ej_encode(const uint8_t *pixels, int width, int height, int channels, int quality,
                    int progressive, int chroma_444, const int32_t *cancel_flag, size_t max_memory,
                    const uint8_t *icc, size_t icc_length,
                    uint8_t **out, unsigned long *out_length, char *message, size_t message_capacity) {
    *out = NULL;
    *out_length = 0;
    if (width <= 0 || height <= 0 || (channels != 1 && channels != 3) || quality < 1 || quality > 100) {
        snprintf(message, message_capacity, "invalid encoder arguments");
        return EJ_ERR_USAGE;
    }
    ej_encoder *enc = calloc(1, sizeof *enc);
    if (enc == NULL) {
        snprintf(message, message_capacity, "out of memory");
        return EJ_ERR_NO_MEMORY;
    }
    enc->cinfo.err = jpeg_std_error(&enc->jerr);
    enc->jerr.error_exit = ej_error_exit;
    enc->jerr.emit_message = ej_emit_message;
    if (setjmp(enc->guard.jump)) {
        ej_status failure = enc->guard.failure;
        snprintf(message, message_capacity, "%s", enc->guard.message);
        jpeg_destroy_compress(&enc->cinfo);
        free(enc->dest.buffer);
        free(enc);
        return failure;
    }
    enc->cinfo.client_data = &enc->guard;
    jpeg_create_compress(&enc->cinfo);
    // Without a backing store, a whole-image buffer over this bound fails instead of allocating.
    if (max_memory > 0) enc->cinfo.mem->max_memory_to_use = (long)(max_memory > (size_t)LONG_MAX ? LONG_MAX : max_memory);
    enc->dest.limit = max_memory;
    enc->dest.pub.init_destination = ej_dest_init;
    enc->dest.pub.empty_output_buffer = ej_dest_empty;
    enc->dest.pub.term_destination = ej_dest_term;
    enc->cinfo.dest = &enc->dest.pub;
    enc->cinfo.image_width = (JDIMENSION)width;
    enc->cinfo.image_height = (JDIMENSION)height;
    enc->cinfo.input_components = channels;
    enc->cinfo.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
    jpeg_set_defaults(&enc->cinfo);
    jpeg_set_quality(&enc->cinfo, quality, TRUE);
    enc->cinfo.dct_method = JDCT_ISLOW;
    if (channels == 3) {
        int factor = chroma_444 ? 1 : 2;
        enc->cinfo.comp_info[0].h_samp_factor = factor;
        enc->cinfo.comp_info[0].v_samp_factor = factor;
    }
    if (progressive) jpeg_simple_progression(&enc->cinfo);
    jpeg_start_compress(&enc->cinfo, TRUE);
    // A profile needs one APP2 marker per EJ_ICC_BYTES_PER_MARKER and their count is one
    // byte: a larger profile cannot be written (the caller drops it, with a note).
    if (icc != NULL && icc_length > 0) {
        if (icc_length > EJ_MAX_ICC_BYTES) ej_fail_with((j_common_ptr)&enc->cinfo, EJ_ERR_USAGE, "the ICC profile is too large for JPEG");
        jpeg_write_icc_profile(&enc->cinfo, icc, (unsigned int)icc_length);
    }
    size_t stride = (size_t)width * (size_t)channels;
    while (enc->cinfo.next_scanline < enc->cinfo.image_height) {
        if (cancel_flag != NULL && ej_atomic_load(cancel_flag) != 0)
            ej_fail_with((j_common_ptr)&enc->cinfo, EJ_ERR_CANCELLED, "cancelled");
        JSAMPROW rows[16];
        JDIMENSION count = enc->cinfo.image_height - enc->cinfo.next_scanline;
        if (count > 16) count = 16;
        for (JDIMENSION i = 0; i < count; i++)
            rows[i] = (JSAMPROW)(pixels + (size_t)(enc->cinfo.next_scanline + i) * stride);
        jpeg_write_scanlines(&enc->cinfo, rows, count);
    }
    jpeg_finish_compress(&enc->cinfo);
    // The buffer grew by doubling: give back the unused tail (the caller keeps the buffer).
    if (enc->dest.length + 64 * 1024 < enc->dest.capacity) {
        unsigned char *fitted = realloc(enc->dest.buffer, enc->dest.length > 0 ? enc->dest.length : 1);
        if (fitted != NULL) enc->dest.buffer = fitted;
    }
    *out = enc->dest.buffer;
    *out_length = enc->dest.length;
    jpeg_destroy_compress(&enc->cinfo);
    free(enc);
    return EJ_OK;
}
