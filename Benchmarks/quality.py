#!/usr/bin/env python3
"""PSNR of Enlarger's final output (PNM) and of vipsthumbnail's against an exact reference:
full decode + EXIF transpose + the embedded ICC profile converted to sRGB (perceptual, with
Little CMS, as Enlarger does) + Pillow's Lanczos-3 resize at the same output size. Both are
colour-managed, so a photo with a profile (a phone's Display P3) is judged against its sRGB
picture, not its raw values: vipsthumbnail gets --export-profile srgb for such a photo only
(libvips 8.14 darkens a photo without a profile by about 9 levels when given it).

    Benchmarks/quality.sh        (builds, then runs this with the paths it needs)
Target: every photo >= 40 dB for Enlarger.
"""
import io
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image, ImageCms, ImageOps


def psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def reference(path, size):
    with Image.open(path) as im:
        icc = im.info.get("icc_profile")
        im = ImageOps.exif_transpose(im).convert("RGB")
        if icc:
            source = ImageCms.ImageCmsProfile(io.BytesIO(icc))
            im = ImageCms.profileToProfile(im, source, ImageCms.createProfile("sRGB"),
                                           renderingIntent=ImageCms.Intent.PERCEPTUAL, outputMode="RGB")
        return np.asarray(im.resize(size, Image.LANCZOS))


def main():
    enlarger, *photos = sys.argv[1:]
    worst = math.inf
    print(f"{'photo':42} {'size':>9} {'enlarger_dB':>12} {'vips_dB':>8}")
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([enlarger, "resize", *photos, "--width", "720", "--height", "588", "--format", "pnm",
                        "--out", out], check=True, stdout=subprocess.DEVNULL)
        for photo in photos:
            name = Path(photo).stem
            ours = np.asarray(Image.open(f"{out}/{name}.pnm").convert("RGB"))
            with Image.open(photo) as im:
                managed = ["--export-profile", "srgb"] if im.info.get("icc_profile") else []
            subprocess.run(["vipsthumbnail", photo, "--size", "720x588", *managed, "-o", f"{out}/{name}.vips.ppm"],
                           check=True,
                           env={"VIPS_CONCURRENCY": "1", "PATH": "/usr/bin:/bin"})
            vips = np.asarray(Image.open(f"{out}/{name}.vips.ppm").convert("RGB"))
            ours_db = psnr(ours, reference(photo, (ours.shape[1], ours.shape[0])))
            vips_db = psnr(vips, reference(photo, (vips.shape[1], vips.shape[0])))
            worst = min(worst, ours_db)
            print(f"{Path(photo).name:42} {ours.shape[1]:>4}x{ours.shape[0]:<4} {ours_db:12.2f} {vips_db:8.2f}")
    print(f"worst Enlarger PSNR: {worst:.2f} dB (target >= 40)")
    return 0 if worst >= 40 else 1


if __name__ == "__main__":
    sys.exit(main())
