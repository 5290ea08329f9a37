#!/usr/bin/env python3
"""PSNR of Enlarger's final output (PNM) and of vipsthumbnail's against an exact reference:
full decode + EXIF transpose + Pillow's Lanczos-3 resize at the same output size.

    Benchmarks/quality.sh        (builds, then runs this with the paths it needs)
Target: every photo >= 40 dB for Enlarger.
"""
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps


def psnr(a, b):
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def reference(path, size):
    with Image.open(path) as im:
        im = ImageOps.exif_transpose(im).convert("RGB")
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
            subprocess.run(["vipsthumbnail", photo, "--size", "720x588", "-o", f"{out}/{name}.vips.ppm"], check=True,
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
