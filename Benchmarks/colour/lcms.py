"""A few Little CMS 2 calls through ctypes, for transforms Pillow's ImageCms cannot do.

ImageCms only transforms 8-bit images, so its sRGB result is rounded to 8 bits before the resize.
The reference wants the transform's exact output, so it asks lcms2 itself for a float transform
(8-bit device values in, float sRGB out). This is the same library Pillow links on Debian
(liblcms2-2); ImageCms stays as a cross-check (reference.py --depth 8).
"""
import ctypes
import ctypes.util

import numpy as np

INTENTS = {"perceptual": 0, "relative": 1, "saturation": 2, "absolute": 3}

# lcms2.h pixel-format bit fields.
_PT_GRAY, _PT_RGB, _PT_CMYK = 3, 4, 6


def _format(space, channels, nbytes, is_float=False):
    return (int(is_float) << 22) | (space << 16) | (channels << 3) | nbytes


TYPE_GRAY_8 = _format(_PT_GRAY, 1, 1)
TYPE_RGB_8 = _format(_PT_RGB, 3, 1)
TYPE_CMYK_8 = _format(_PT_CMYK, 4, 1)
TYPE_GRAY_FLT = _format(_PT_GRAY, 1, 4, True)
TYPE_RGB_FLT = _format(_PT_RGB, 3, 4, True)

_SIGNATURES = {0x52474220: "RGB", 0x434D594B: "CMYK", 0x47524159: "GRAY", 0x4C616220: "Lab", 0x58595A20: "XYZ"}


def _library():
    name = ctypes.util.find_library("lcms2") or "liblcms2.so.2"
    lib = ctypes.CDLL(name)
    p = ctypes.c_void_p
    for fn, res, args in [
        ("cmsOpenProfileFromMem", p, [ctypes.c_char_p, ctypes.c_uint32]),
        ("cmsCreate_sRGBProfile", p, []),
        ("cmsCreateGrayProfile", p, [p, p]),
        ("cmsD50_xyY", p, []),
        ("cmsBuildParametricToneCurve", p, [p, ctypes.c_int32, ctypes.POINTER(ctypes.c_double)]),
        ("cmsFreeToneCurve", None, [p]),
        ("cmsCloseProfile", ctypes.c_int, [p]),
        ("cmsGetColorSpace", ctypes.c_uint32, [p]),
        ("cmsGetEncodedICCversion", ctypes.c_uint32, [p]),
        ("cmsIsMatrixShaper", ctypes.c_int, [p]),
        ("cmsGetProfileInfoASCII", ctypes.c_uint32, [p, ctypes.c_int, ctypes.c_char_p, ctypes.c_char_p,
                                                     ctypes.c_char_p, ctypes.c_uint32]),
        ("cmsCreateTransform", p, [p, ctypes.c_uint32, p, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32]),
        ("cmsDoTransform", None, [p, p, p, ctypes.c_uint32]),
        ("cmsDeleteTransform", None, [p]),
    ]:
        getattr(lib, fn).restype = res
        getattr(lib, fn).argtypes = args
    return lib


_lib = _library()


class Profile:
    """An open lcms2 profile; close() it, or use it as a context manager."""

    def __init__(self, handle, what):
        if not handle:
            raise ValueError(f"lcms2 could not open {what}")
        self.handle = handle

    @classmethod
    def from_bytes(cls, data):
        return cls(_lib.cmsOpenProfileFromMem(data, len(data)), "the ICC profile")

    @classmethod
    def srgb(cls):
        return cls(_lib.cmsCreate_sRGBProfile(), "built-in sRGB")

    @classmethod
    def srgb_gray(cls):
        """Grey with sRGB's tone curve and a D50 white: what a grey photo is shown as unmanaged."""
        params = (ctypes.c_double * 5)(2.4, 1 / 1.055, 0.055 / 1.055, 1 / 12.92, 0.04045)
        curve = _lib.cmsBuildParametricToneCurve(None, 4, params)
        try:
            return cls(_lib.cmsCreateGrayProfile(_lib.cmsD50_xyY(), curve), "sRGB-curve grey")
        finally:
            _lib.cmsFreeToneCurve(curve)

    @classmethod
    def for_space(cls, space):
        return cls.srgb_gray() if space == "GRAY" else cls.srgb()

    def close(self):
        if self.handle:
            _lib.cmsCloseProfile(self.handle)
            self.handle = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def space(self):
        sig = _lib.cmsGetColorSpace(self.handle)
        return _SIGNATURES.get(sig, sig.to_bytes(4, "big").decode("latin-1").strip())

    @property
    def description(self):
        buf = ctypes.create_string_buffer(512)
        _lib.cmsGetProfileInfoASCII(self.handle, 0, b"en", b"US", buf, len(buf))
        return buf.value.decode("latin-1").strip()

    @property
    def version(self):
        v = _lib.cmsGetEncodedICCversion(self.handle)
        return f"{v >> 24}.{(v >> 20) & 0xF}"

    @property
    def kind(self):
        """'matrix' for matrix/TRC profiles (all intents give the same result), else 'LUT'."""
        return "matrix" if _lib.cmsIsMatrixShaper(self.handle) else "LUT"


_CHANNELS = {"GRAY": 1, "RGB": 3, "CMYK": 4}
_IN_8 = {"GRAY": TYPE_GRAY_8, "RGB": TYPE_RGB_8, "CMYK": TYPE_CMYK_8}
_OUT_FLT = {"GRAY": TYPE_GRAY_FLT, "RGB": TYPE_RGB_FLT}


def to_display_float(pixels, source, intent="perceptual", black_point_compensation=False):
    """8-bit device pixels (H x W x channels, or H x W for grey) in `source`'s space -> float32
    values in sRGB (or sRGB-curve grey for a grey source), 0..1, clipped.

    Clipping here is what any integer pipeline does at the transform's output; a float lcms
    transform between matrix profiles is otherwise unbounded.
    """
    space = source.space
    if space not in _IN_8:
        raise ValueError(f"cannot transform a {space} profile to sRGB")
    pixels = np.ascontiguousarray(pixels, dtype=np.uint8)
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    if pixels.shape[2] != _CHANNELS[space]:
        raise ValueError(f"{pixels.shape[2]}-channel pixels for a {space} profile")
    out_space = "GRAY" if space == "GRAY" else "RGB"
    flags = 0x2000 if black_point_compensation else 0  # cmsFLAGS_BLACKPOINTCOMPENSATION
    with Profile.for_space(out_space) as dest:
        xform = _lib.cmsCreateTransform(source.handle, _IN_8[space], dest.handle, _OUT_FLT[out_space],
                                        INTENTS[intent], flags)
        if not xform:
            raise ValueError(f"lcms2 cannot build a {space} -> sRGB transform for this profile")
        try:
            out = np.empty(pixels.shape[:2] + (_CHANNELS[out_space],), dtype=np.float32)
            # A band of rows at a time: both arrays are C-contiguous, so a band is one flat run.
            band = 256
            for y in range(0, pixels.shape[0], band):
                src, dst = pixels[y:y + band], out[y:y + band]
                _lib.cmsDoTransform(xform, src.ctypes.data, dst.ctypes.data, src.shape[0] * src.shape[1])
        finally:
            _lib.cmsDeleteTransform(xform)
    np.clip(out, 0.0, 1.0, out=out)
    return out[:, :, 0] if out_space == "GRAY" else out
