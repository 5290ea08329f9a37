// Writes a JPEG XL image (to stdout) whose one layer is larger than the image: a 96x64
// canvas and a WIDTHxHEIGHT layer of flat grey, centred on it, lossy (VarDCT). libjxl
// decodes the whole layer before it crops it to the canvas, so the file's header alone
// understates the decode. With `alpha` the layer has an alpha channel too (half opaque),
// which takes libjxl 0.7's costliest path; with `whole` the image is the layer's size (no
// crop). Built and run by scripts/make-test-images (libjxl-dev 0.7):
//   cc scripts/jxl-layer.c -ljxl -o jxl-layer && ./jxl-layer 4000 3000 > jxl-layer-larger.jxl
#include <jxl/encode.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int fail(const char *what) {
    fprintf(stderr, "jxl-layer: %s\n", what);
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 3) return fail("usage: jxl-layer WIDTH HEIGHT [alpha] [whole]");
    int alpha = 0, whole = 0;
    for (int i = 3; i < argc; i++) {
        if (strcmp(argv[i], "alpha") == 0) alpha = 1;
        else if (strcmp(argv[i], "whole") == 0) whole = 1;
        else return fail("usage: jxl-layer WIDTH HEIGHT [alpha] [whole]");
    }
    const uint32_t width = (uint32_t)strtoul(argv[1], NULL, 10), height = (uint32_t)strtoul(argv[2], NULL, 10);
    const uint32_t canvas_width = whole ? width : 96, canvas_height = whole ? height : 64;
    if (width < canvas_width || height < canvas_height) return fail("the layer must cover the canvas");

    JxlEncoder *encoder = JxlEncoderCreate(NULL);
    if (encoder == NULL) return fail("no encoder");
    JxlBasicInfo info;
    JxlEncoderInitBasicInfo(&info);
    info.xsize = canvas_width;
    info.ysize = canvas_height;
    info.bits_per_sample = 8;
    info.num_color_channels = 3;
    info.uses_original_profile = JXL_FALSE;
    if (alpha) {
        info.alpha_bits = 8;
        info.num_extra_channels = 1;
    }
    if (JxlEncoderSetBasicInfo(encoder, &info) != JXL_ENC_SUCCESS) return fail("basic info refused");
    JxlColorEncoding srgb;
    JxlColorEncodingSetToSRGB(&srgb, JXL_FALSE);
    if (JxlEncoderSetColorEncoding(encoder, &srgb) != JXL_ENC_SUCCESS) return fail("colour encoding refused");

    JxlEncoderFrameSettings *settings = JxlEncoderFrameSettingsCreate(encoder, NULL);
    JxlEncoderSetFrameDistance(settings, 1.0f);
    JxlEncoderFrameSettingsSetOption(settings, JXL_ENC_FRAME_SETTING_EFFORT, 3);
    JxlFrameHeader frame;
    JxlEncoderInitFrameHeader(&frame);
    frame.layer_info.have_crop = whole ? JXL_FALSE : JXL_TRUE;
    frame.layer_info.crop_x0 = -(int32_t)((width - canvas_width) / 2);
    frame.layer_info.crop_y0 = -(int32_t)((height - canvas_height) / 2);
    frame.layer_info.xsize = width;
    frame.layer_info.ysize = height;
    if (JxlEncoderSetFrameHeader(settings, &frame) != JXL_ENC_SUCCESS) return fail("frame header refused");

    const uint32_t channels = alpha ? 4 : 3;
    size_t length = (size_t)width * height * channels;
    uint8_t *pixels = malloc(length);
    if (pixels == NULL) return fail("out of memory");
    memset(pixels, 96, length);
    if (alpha) {
        for (size_t i = 3; i < length; i += 4) pixels[i] = 128;
    }
    JxlPixelFormat format = {channels, JXL_TYPE_UINT8, JXL_NATIVE_ENDIAN, 0};
    if (JxlEncoderAddImageFrame(settings, &format, pixels, length) != JXL_ENC_SUCCESS) return fail("frame refused");
    JxlEncoderCloseInput(encoder);

    size_t capacity = 1 << 16;
    uint8_t *output = malloc(capacity);
    if (output == NULL) return fail("out of memory");
    size_t used = 0;
    for (;;) {
        uint8_t *next = output + used;
        size_t available = capacity - used;
        JxlEncoderStatus status = JxlEncoderProcessOutput(encoder, &next, &available);
        used = (size_t)(next - output);
        if (status == JXL_ENC_SUCCESS) break;
        if (status != JXL_ENC_NEED_MORE_OUTPUT) return fail("encoding failed");
        capacity *= 2;
        output = realloc(output, capacity);
        if (output == NULL) return fail("out of memory");
    }
    fwrite(output, 1, used, stdout);
    JxlEncoderDestroy(encoder);
    free(pixels);
    free(output);
    return 0;
}
