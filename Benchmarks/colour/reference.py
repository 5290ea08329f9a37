#!/usr/bin/env python3
"""The exact colour-managed reference for one photo: what a resize to sRGB should produce.

    reference.py PHOTO (--like IMAGE | --size WxH | --width W [--height H]) -o OUT.png
                 [--intent perceptual|relative] [--depth float|8] [--cmyk-fallback ICC] [--unmanaged]

Steps: full decode with Pillow (libjpeg-turbo, like Enlarger); EXIF orientation applied
(ImageOps.exif_transpose); the embedded profile converted to sRGB by Little CMS with the
perceptual intent and no black-point compensation (what sharp does; see README.md); Lanczos-3 resize (Pillow's LANCZOS) to
the exact size asked for; rounded to 8 bits. A grey photo stays one channel: it is converted to
grey with sRGB's tone curve.

--depth float (default) asks lcms2 for float output and resizes each channel in float, so the only
rounding is the final one. --depth 8 uses Pillow's ImageCms (8-bit in, 8-bit out) and an 8-bit
resize: a cross-check that differs by about one level.

The source profile is the embedded one when it is a usable ICC profile matching the image
(RGB/CMYK/GRAY); a CMYK photo without one uses --cmyk-fallback (default: $ENLARGER_CMYK_PROFILE,
else Ghostscript's SWOP-like default_cmyk.icc from Debian's libgs-common); any other photo without
one is taken as sRGB already.

Two stand-ins for comparison, at the same size:
--unmanaged: no colour management, as today's Enlarger: device values taken as sRGB (CMYK by the
  naive formula of Pillow's convert, which Enlarger's decoder shares), then the same float resize.
--resize-first: the planned pipeline's order simulated: Pillow's 8-bit Lanczos-3 in the device
  space (CMYK stays CMYK), then the same lcms2 transform of the small image.

--like IMAGE takes the output size from an image (Enlarger's output); --width/--height fit inside
that box without enlarging, rounding as Enlarger does.
"""
import argparse
import io
import math
import os
import sys
from pathlib import Path

import interpreter  # noqa: F401  (re-runs under Debian's python3 if Pillow or numpy is missing)
import numpy as np
from PIL import Image, ImageCms, ImageOps

import jpeg
import lcms

CMYK_FALLBACKS = [
    "/usr/share/color/icc/ghostscript/default_cmyk.icc",  # Debian libgs-common: "Artifex CMYK SWOP Profile"
]
SPACE_OF_MODE = {"L": "GRAY", "RGB": "RGB", "CMYK": "CMYK"}


def cmyk_fallback(explicit=None):
    candidates = [explicit] if explicit else [os.environ.get("ENLARGER_CMYK_PROFILE"), *CMYK_FALLBACKS]
    for path in candidates:
        if path and Path(path).is_file():
            return Path(path)
    return None


def source_profile(im, icc, fallback):
    """(profile bytes or None, label): None means the pixels are sRGB (or sRGB-curve grey) already."""
    space = SPACE_OF_MODE.get(im.mode)
    if space is None:
        raise ValueError(f"Pillow decoded a {im.mode} image; expected L, RGB or CMYK")
    if icc:
        try:
            with lcms.Profile.from_bytes(icc) as p:
                if p.space == space:
                    return icc, p.description
        except ValueError:
            pass  # not a real profile: read the photo as if it had none
    if space == "CMYK":
        path = cmyk_fallback(fallback)
        if path is None:
            raise ValueError("CMYK photo without a profile and no fallback CMYK profile "
                             "(apt-get install libgs-common, or set ENLARGER_CMYK_PROFILE)")
        data = path.read_bytes()
        with lcms.Profile.from_bytes(data) as p:
            return data, f"fallback: {p.description}"
    return None, "none (sRGB assumed)"


def decoded(photo):
    """The photo decoded and turned upright, as Pillow gives it (L, RGB or CMYK)."""
    im, exif_dropped = jpeg.open_photo(photo)
    im.load()
    if not exif_dropped:
        im = ImageOps.exif_transpose(im)
    return im


def fit_inside(width, height, box_w, box_h):
    """Enlarger's --fit inside without --enlarge (Imaging/ResizePlan.swift): the limiting axis lands
    on the box, the other is rounded half away from zero, never to 0 and never upscaled."""
    def scaled(length, factor):
        return max(1, math.floor(length * factor + 0.5))
    fx = box_w / width if box_w else None
    fy = box_h / height if box_h else None
    if fx is None or fy is None:
        factor = fx if fx is not None else fy
        if factor >= 1:
            return width, height
        return (box_w, scaled(height, factor)) if fx is not None else (scaled(width, factor), box_h)
    factor = min(fx, fy)
    if factor >= 1:
        return width, height
    return (box_w, scaled(height, factor)) if fx <= fy else (scaled(width, factor), box_h)


def resize_float(values, size):
    """Lanczos-3 of float 0..1 pixels (H x W or H x W x C), each channel as a Pillow 'F' image."""
    channels = values[:, :, None] if values.ndim == 2 else values
    out = np.stack([np.asarray(Image.fromarray(np.ascontiguousarray(channels[:, :, c]), "F")
                               .resize(size, Image.LANCZOS)) for c in range(channels.shape[2])], axis=-1)
    out = np.clip(np.floor(out * 255 + 0.5), 0, 255).astype(np.uint8)
    return out[:, :, 0] if values.ndim == 2 else out


def managed(im, icc, size, intent="perceptual", depth="float"):
    space = SPACE_OF_MODE[im.mode]
    if depth == "float":
        if icc is None:
            values = np.asarray(im, dtype=np.float32) / 255
        else:
            with lcms.Profile.from_bytes(icc) as p:
                values = lcms.to_display_float(np.asarray(im), p, intent)
        return resize_float(values, size)
    # 8-bit: Pillow's ImageCms has no sRGB-curve grey, so grey goes to sRGB and keeps one channel.
    if icc is not None:
        out_mode = "RGB"
        im = ImageCms.profileToProfile(im, ImageCms.ImageCmsProfile(io.BytesIO(icc)), ImageCms.createProfile("sRGB"),
                                       renderingIntent=lcms.INTENTS[intent], outputMode=out_mode)
        if space == "GRAY":
            im = im.getchannel("G")
    return np.asarray(im.resize(size, Image.LANCZOS))


def unmanaged(im, size):
    # The same float resize as the reference, so the difference is the colour management alone.
    return managed(im.convert("L" if im.mode == "L" else "RGB"), None, size)


def resize_then_transform(im, icc, size, intent="perceptual"):
    """The planned pipeline's order: an 8-bit Lanczos-3 in the device space, then the transform."""
    small = np.asarray(im.resize(size, Image.LANCZOS))
    if icc is None:
        return small
    with lcms.Profile.from_bytes(icc) as p:
        values = lcms.to_display_float(small, p, intent)
    return np.clip(np.floor(values * 255 + 0.5), 0, 255).astype(np.uint8)


def build(photo, size=None, box=None, intent="perceptual", depth="float", fallback=None, plain=False,
          resize_first=False):
    """(uint8 pixels, profile label) of the reference for one photo (or of --unmanaged/--resize-first)."""
    im = decoded(photo)
    if size is None:
        size = fit_inside(im.width, im.height, *box)
    if plain:
        return unmanaged(im, size), "unmanaged"
    icc, label = source_profile(im, jpeg.header(Path(photo).read_bytes()).icc, fallback)
    if resize_first:
        return resize_then_transform(im, icc, size, intent), label
    return managed(im, icc, size, intent, depth), label


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("photo")
    parser.add_argument("-o", "--out", required=True, help="PNG to write (8-bit grey or RGB)")
    parser.add_argument("--like", help="take the output size from this image")
    parser.add_argument("--size", help="exact output size, WxH")
    parser.add_argument("--width", type=int)
    parser.add_argument("--height", type=int)
    parser.add_argument("--intent", choices=["perceptual", "relative"], default="perceptual")
    parser.add_argument("--depth", choices=["float", "8"], default="float")
    parser.add_argument("--cmyk-fallback", help="ICC profile for CMYK photos without one")
    parser.add_argument("--unmanaged", action="store_true", help="no colour management (Pillow's plain convert)")
    parser.add_argument("--resize-first", action="store_true",
                        help="simulate the planned order: 8-bit resize in the device space, then the transform")
    args = parser.parse_args()

    size, box = None, None
    if args.like:
        with Image.open(args.like) as like:
            size = like.size
    elif args.size:
        size = tuple(int(v) for v in args.size.lower().split("x"))
    elif args.width or args.height:
        box = (args.width, args.height)
    else:
        parser.error("give --like, --size or --width/--height")
    try:
        pixels, label = build(args.photo, size, box, args.intent, args.depth, args.cmyk_fallback, args.unmanaged,
                              args.resize_first)
    except ValueError as e:
        print(f"{Path(args.photo).name}: {e}", file=sys.stderr)
        return 1
    Image.fromarray(pixels).save(args.out)
    print(f"{Path(args.photo).name}\t{pixels.shape[1]}x{pixels.shape[0]}\t{label}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
