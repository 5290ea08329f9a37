// See include/colour_shim.h.
#include <stdio.h>
#include <stdlib.h>

#include <lcms2.h>

#include "colour_shim.h"

struct ec_transform {
    cmsContext context;
    cmsHTRANSFORM transform;
    size_t in_bytes;   // per pixel
    size_t out_bytes;
};

// lcms reports problems through a log handler (stderr by default): the caller gets a status.
static void ec_quiet(cmsContext context, cmsUInt32Number code, const char *text) {
    (void)context;
    (void)code;
    (void)text;
}

static void ec_say(char *message, size_t length, const char *text) {
    if (message != NULL && length > 0) snprintf(message, length, "%s", text);
}

// Grey with sRGB's tone curve (the D50 white of ICC's connection space).
static cmsHPROFILE ec_srgb_gray(cmsContext context) {
    cmsFloat64Number parameters[5] = {2.4, 1.0 / 1.055, 0.055 / 1.055, 1.0 / 12.92, 0.04045};
    cmsToneCurve *curve = cmsBuildParametricToneCurve(context, 4, parameters);
    if (curve == NULL) return NULL;
    cmsHPROFILE profile = cmsCreateGrayProfileTHR(context, cmsD50_xyY(), curve);
    cmsFreeToneCurve(curve);
    return profile;
}

ec_transform *ec_transform_create(const uint8_t *icc, size_t length, int pixels, ec_status *status,
                                  char *message, size_t message_length) {
    *status = EC_ERR_NO_TRANSFORM;
    cmsContext context = cmsCreateContext(NULL, NULL);
    if (context == NULL) {
        ec_say(message, message_length, "no memory for a colour context");
        return NULL;
    }
    cmsSetLogErrorHandlerTHR(context, ec_quiet);
    cmsHPROFILE source = cmsOpenProfileFromMemTHR(context, icc, (cmsUInt32Number)length);
    if (source == NULL) {
        *status = EC_ERR_BAD_PROFILE;
        ec_say(message, message_length, "the embedded ICC profile cannot be read");
        cmsDeleteContext(context);
        return NULL;
    }
    cmsColorSpaceSignature space = cmsGetColorSpace(source);
    int gray = pixels == EC_PIXELS_GRAY, cmyk = pixels == EC_PIXELS_CMYK, rgba = pixels == EC_PIXELS_RGBA;
    cmsColorSpaceSignature expected = gray ? cmsSigGrayData : cmyk ? cmsSigCmykData : cmsSigRgbData;
    if (space != expected) {
        *status = EC_ERR_MISMATCH;
        ec_say(message, message_length, gray ? "the embedded ICC profile is not a grey one"
                                        : cmyk ? "the embedded ICC profile is not a CMYK one"
                                               : "the embedded ICC profile is not an RGB one");
        cmsCloseProfile(source);
        cmsDeleteContext(context);
        return NULL;
    }
    cmsHPROFILE target = gray ? ec_srgb_gray(context) : cmsCreate_sRGBProfileTHR(context);
    cmsHTRANSFORM transform = NULL;
    if (target != NULL) {
        cmsUInt32Number input = gray ? TYPE_GRAY_8 : cmyk ? TYPE_CMYK_8 : rgba ? TYPE_RGBA_8 : TYPE_RGB_8;
        cmsUInt32Number output = gray ? TYPE_GRAY_8 : rgba ? TYPE_RGBA_8 : TYPE_RGB_8;
        transform = cmsCreateTransformTHR(context, source, input, target, output, INTENT_PERCEPTUAL,
                                          cmsFLAGS_NOCACHE | (rgba ? cmsFLAGS_COPY_ALPHA : 0));
        cmsCloseProfile(target);
    }
    cmsCloseProfile(source);
    if (transform == NULL) {
        ec_say(message, message_length, "no colour transform can be built from the embedded ICC profile");
        cmsDeleteContext(context);
        return NULL;
    }
    ec_transform *result = malloc(sizeof *result);
    if (result == NULL) {
        cmsDeleteTransform(transform);
        cmsDeleteContext(context);
        ec_say(message, message_length, "no memory for a colour transform");
        return NULL;
    }
    result->context = context;
    result->transform = transform;
    result->in_bytes = gray ? 1 : cmyk || rgba ? 4 : 3;
    result->out_bytes = gray ? 1 : rgba ? 4 : 3;
    *status = EC_OK;
    return result;
}

void ec_transform_apply(const ec_transform *transform, const uint8_t *src, uint8_t *dst, size_t count) {
    while (count > 0) {
        cmsUInt32Number chunk = count > 1u << 30 ? 1u << 30 : (cmsUInt32Number)count;
        cmsDoTransform(transform->transform, src, dst, chunk);
        count -= chunk;
        src += (size_t)chunk * transform->in_bytes;
        dst += (size_t)chunk * transform->out_bytes;
    }
}

void ec_transform_destroy(ec_transform *transform) {
    if (transform == NULL) return;
    cmsDeleteTransform(transform->transform);
    cmsDeleteContext(transform->context);
    free(transform);
}

uint8_t *ec_profile_from_primaries(const double xy[8], int transfer, const char *description, size_t *length) {
    *length = 0;
    // Type 4 parametric curves, Y = (aX + b)^g above d, cX below: lcms's own form.
    double params[5];
    int parametric = 4;
    switch (transfer) {
    case 1: case 6: case 14: case 15:  // BT.709, BT.601, BT.2020: the inverse of their OETF
        params[0] = 1 / 0.45; params[1] = 1 / 1.099; params[2] = 0.099 / 1.099; params[3] = 1 / 4.5; params[4] = 0.081;
        break;
    case 13:  // sRGB
        params[0] = 2.4; params[1] = 1 / 1.055; params[2] = 0.055 / 1.055; params[3] = 1 / 12.92; params[4] = 0.04045;
        break;
    case 4: parametric = 1; params[0] = 2.2; break;
    case 5: parametric = 1; params[0] = 2.8; break;
    case 8: parametric = 1; params[0] = 1.0; break;
    default: return NULL;
    }
    cmsContext context = cmsCreateContext(NULL, NULL);
    if (context == NULL) return NULL;
    cmsSetLogErrorHandlerTHR(context, ec_quiet);
    cmsToneCurve *curve = cmsBuildParametricToneCurve(context, parametric, params);
    cmsCIExyY white = {xy[6], xy[7], 1.0};
    cmsCIExyYTRIPLE primaries = {{xy[0], xy[1], 1.0}, {xy[2], xy[3], 1.0}, {xy[4], xy[5], 1.0}};
    cmsToneCurve *curves[3] = {curve, curve, curve};
    cmsHPROFILE profile = curve != NULL ? cmsCreateRGBProfileTHR(context, &white, &primaries, curves) : NULL;
    uint8_t *bytes = NULL;
    if (profile != NULL) {
        cmsMLU *text = cmsMLUalloc(context, 1);
        if (text != NULL && cmsMLUsetASCII(text, "en", "US", description)) {
            cmsWriteTag(profile, cmsSigProfileDescriptionTag, text);
        }
        if (text != NULL) cmsMLUfree(text);
        cmsUInt32Number size = 0;
        if (cmsSaveProfileToMem(profile, NULL, &size) && size > 0 && (bytes = malloc(size)) != NULL) {
            if (cmsSaveProfileToMem(profile, bytes, &size)) {
                *length = size;
            } else {
                free(bytes);
                bytes = NULL;
            }
        }
        cmsCloseProfile(profile);
    }
    if (curve != NULL) cmsFreeToneCurve(curve);
    cmsDeleteContext(context);
    return bytes;
}
