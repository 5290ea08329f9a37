#!/usr/bin/env python3
"""Per-pixel CIEDE2000 colour difference between a reference and a candidate image.

    compare.py REFERENCE CANDIDATE [--tsv]    REFERENCE: PNG/PNM/JPEG or .npy (uint8);
                                              CANDIDATE: Enlarger's PNM or JPEG output
    compare.py --self-test                    checks ciede2000() against Sharma et al.'s pairs

Both images are taken as sRGB (a grey image as sRGB with R = G = B), decoded to linear light,
to XYZ and to CIELAB with the D65 white. Prints mean, 95th percentile and maximum dE2000 (and mean
dE76, the older Euclidean Lab distance). Exit status 2 if the sizes differ.
"""
import argparse
import sys
from pathlib import Path

import interpreter  # noqa: F401  (re-runs under Debian's python3 if Pillow or numpy is missing)
import numpy as np
from PIL import Image

# sRGB (IEC 61966-2-1) primaries to XYZ, D65.
SRGB_TO_XYZ = np.array([[0.4124564, 0.3575761, 0.1804375],
                        [0.2126729, 0.7151522, 0.0721750],
                        [0.0193339, 0.1191920, 0.9503041]])
D65_WHITE = SRGB_TO_XYZ.sum(axis=1)


def srgb_to_lab(rgb, grey=False):
    """sRGB values (... x 3; or, with grey, any shape with R = G = B implied), uint8 or float in
    0..1 -> float64 CIELAB (... x 3), D65 white."""
    rgb = np.asarray(rgb)
    v = rgb / 255.0 if rgb.dtype == np.uint8 else rgb.astype(np.float64)
    if grey:
        v = np.repeat(v[..., None], 3, axis=-1)
    linear = np.where(v <= 0.04045, v / 12.92, ((v + 0.055) / 1.055) ** 2.4)
    xyz = linear @ SRGB_TO_XYZ.T / D65_WHITE
    eps, kappa = 216 / 24389, 24389 / 27
    f = np.where(xyz > eps, np.cbrt(xyz), (kappa * xyz + 16) / 116)
    return np.stack([116 * f[..., 1] - 16, 500 * (f[..., 0] - f[..., 1]), 200 * (f[..., 1] - f[..., 2])], axis=-1)


def ciede2000(lab1, lab2):
    """CIEDE2000 (kL = kC = kH = 1) between arrays of Lab triples, elementwise over the last axis.

    Follows Sharma, Wu and Dalal, "The CIEDE2000 color-difference formula: implementation notes,
    supplementary test data, and mathematical observations" (Color Res. Appl. 30, 2005), including
    their conventions for a zero chroma and for the hue mean across 0/360 degrees.
    """
    lab1, lab2 = np.asarray(lab1, dtype=np.float64), np.asarray(lab2, dtype=np.float64)
    L1, a1, b1 = lab1[..., 0], lab1[..., 1], lab1[..., 2]
    L2, a2, b2 = lab2[..., 0], lab2[..., 1], lab2[..., 2]
    pow25_7 = 25.0 ** 7

    c_mean = (np.hypot(a1, b1) + np.hypot(a2, b2)) / 2
    g = 0.5 * (1 - np.sqrt(c_mean ** 7 / (c_mean ** 7 + pow25_7)))
    a1p, a2p = (1 + g) * a1, (1 + g) * a2
    c1p, c2p = np.hypot(a1p, b1), np.hypot(a2p, b2)
    h1p = np.degrees(np.arctan2(b1, a1p)) % 360  # arctan2(0, 0) = 0, the paper's convention
    h2p = np.degrees(np.arctan2(b2, a2p)) % 360
    chroma_product = c1p * c2p
    # Hues exactly 180 degrees apart (pair 14 of the test data) must take the "<= 180" branches;
    # the degree conversion and the modulo can land a rounding error on either side of 180.
    half_turn = 180 + 1e-9

    dLp = L2 - L1
    dCp = c2p - c1p
    dhp = h2p - h1p
    dhp = np.where(dhp > half_turn, dhp - 360, np.where(dhp < -half_turn, dhp + 360, dhp))
    dhp = np.where(chroma_product == 0, 0.0, dhp)
    dHp = 2 * np.sqrt(chroma_product) * np.sin(np.radians(dhp / 2))

    Lp_mean = (L1 + L2) / 2
    Cp_mean = (c1p + c2p) / 2
    h_sum = h1p + h2p
    hp_mean = np.where(np.abs(h1p - h2p) <= half_turn, h_sum / 2,
                       np.where(h_sum < 360, (h_sum + 360) / 2, (h_sum - 360) / 2))
    hp_mean = np.where(chroma_product == 0, h_sum, hp_mean)

    t = (1 - 0.17 * np.cos(np.radians(hp_mean - 30)) + 0.24 * np.cos(np.radians(2 * hp_mean))
         + 0.32 * np.cos(np.radians(3 * hp_mean + 6)) - 0.20 * np.cos(np.radians(4 * hp_mean - 63)))
    d_theta = 30 * np.exp(-(((hp_mean - 275) / 25) ** 2))
    r_c = 2 * np.sqrt(Cp_mean ** 7 / (Cp_mean ** 7 + pow25_7))
    s_l = 1 + 0.015 * (Lp_mean - 50) ** 2 / np.sqrt(20 + (Lp_mean - 50) ** 2)
    s_c = 1 + 0.045 * Cp_mean
    s_h = 1 + 0.015 * Cp_mean * t
    r_t = -np.sin(np.radians(2 * d_theta)) * r_c

    l_term, c_term, h_term = dLp / s_l, dCp / s_c, dHp / s_h
    return np.sqrt(l_term ** 2 + c_term ** 2 + h_term ** 2 + r_t * c_term * h_term)


# Table 1 of Sharma, Wu and Dalal (2005): L1 a1 b1, L2 a2 b2, dE2000 to 4 decimals.
SHARMA_PAIRS = [
    (50.0000, 2.6772, -79.7751, 50.0000, 0.0000, -82.7485, 2.0425),
    (50.0000, 3.1571, -77.2803, 50.0000, 0.0000, -82.7485, 2.8615),
    (50.0000, 2.8361, -74.0200, 50.0000, 0.0000, -82.7485, 3.4412),
    (50.0000, -1.3802, -84.2814, 50.0000, 0.0000, -82.7485, 1.0000),
    (50.0000, -1.1848, -84.8006, 50.0000, 0.0000, -82.7485, 1.0000),
    (50.0000, -0.9009, -85.5211, 50.0000, 0.0000, -82.7485, 1.0000),
    (50.0000, 0.0000, 0.0000, 50.0000, -1.0000, 2.0000, 2.3669),
    (50.0000, -1.0000, 2.0000, 50.0000, 0.0000, 0.0000, 2.3669),
    (50.0000, 2.4900, -0.0010, 50.0000, -2.4900, 0.0009, 7.1792),
    (50.0000, 2.4900, -0.0010, 50.0000, -2.4900, 0.0010, 7.1792),
    (50.0000, 2.4900, -0.0010, 50.0000, -2.4900, 0.0011, 7.2195),
    (50.0000, 2.4900, -0.0010, 50.0000, -2.4900, 0.0012, 7.2195),
    (50.0000, -0.0010, 2.4900, 50.0000, 0.0009, -2.4900, 4.8045),
    (50.0000, -0.0010, 2.4900, 50.0000, 0.0010, -2.4900, 4.8045),
    (50.0000, -0.0010, 2.4900, 50.0000, 0.0011, -2.4900, 4.7461),
    (50.0000, 2.5000, 0.0000, 50.0000, 0.0000, -2.5000, 4.3065),
    (50.0000, 2.5000, 0.0000, 73.0000, 25.0000, -18.0000, 27.1492),
    (50.0000, 2.5000, 0.0000, 61.0000, -5.0000, 29.0000, 22.8977),
    (50.0000, 2.5000, 0.0000, 56.0000, -27.0000, -3.0000, 31.9030),
    (50.0000, 2.5000, 0.0000, 58.0000, 24.0000, 15.0000, 19.4535),
    (50.0000, 2.5000, 0.0000, 50.0000, 3.1736, 0.5854, 1.0000),
    (50.0000, 2.5000, 0.0000, 50.0000, 3.2972, 0.0000, 1.0000),
    (50.0000, 2.5000, 0.0000, 50.0000, 1.8634, 0.5757, 1.0000),
    (50.0000, 2.5000, 0.0000, 50.0000, 3.2592, 0.3350, 1.0000),
    (60.2574, -34.0099, 36.2677, 60.4626, -34.1751, 39.4387, 1.2644),
    (63.0109, -31.0961, -5.8663, 62.8187, -29.7946, -4.0864, 1.2630),
    (61.2901, 3.7196, -5.3901, 61.4292, 2.2480, -4.9620, 1.8731),
    (35.0831, -44.1164, 3.7933, 35.0232, -40.0716, 1.5901, 1.8645),
    (22.7233, 20.0904, -46.6940, 23.0331, 14.9730, -42.5619, 2.0373),
    (36.4612, 47.8580, 18.3852, 36.2715, 50.5065, 21.2231, 1.4146),
    (90.8027, -2.0831, 1.4410, 91.1528, -1.6435, 0.0447, 1.4441),
    (90.9257, -0.5406, -0.9208, 88.6381, -0.8985, -0.7239, 1.5381),
    (6.7747, -0.2908, -2.4247, 5.8714, -0.0985, -2.2286, 0.6377),
    (2.0776, 0.0795, -1.1350, 0.9033, -0.0636, -0.5514, 0.9082),
]


def self_test():
    pairs = np.array(SHARMA_PAIRS)
    forward = ciede2000(pairs[:, 0:3], pairs[:, 3:6])
    backward = ciede2000(pairs[:, 3:6], pairs[:, 0:3])  # the formula is symmetric
    failed = 0
    for i, (want, got, rev) in enumerate(zip(pairs[:, 6], forward, backward), start=1):
        if abs(got - want) > 5e-5 or abs(rev - want) > 5e-5:
            failed += 1
            print(f"pair {i}: want {want:.4f}, got {got:.6f} (reversed {rev:.6f})")
    # sRGB -> Lab anchors: white is L* 100 with no chroma, black is L* 0.
    lab = srgb_to_lab(np.array([[[255, 255, 255], [0, 0, 0]]], dtype=np.uint8))[0]
    if not np.allclose(lab, [[100, 0, 0], [0, 0, 0]], atol=1e-3):
        failed += 1
        print(f"sRGB white/black -> Lab gave {lab.tolist()}")
    print(f"ciede2000 self-test: {len(pairs) + 1 - failed} passed, {failed} failed")
    return 0 if failed == 0 else 1


def load(path):
    """uint8 pixels of an image file or .npy array: H x W (grey) or H x W x 3."""
    if Path(path).suffix == ".npy":
        return np.load(path)
    with Image.open(path) as im:
        if im.mode not in ("L", "RGB"):
            im = im.convert("L" if im.mode in ("1", "I", "I;16") else "RGB")
        return np.asarray(im)


def size_of(pixels):
    return f"{pixels.shape[1]}x{pixels.shape[0]}"


def difference(reference, candidate):
    """Per-pixel dE2000 and dE76 arrays between two uint8 images of the same size."""
    lab_ref, lab_cand = srgb_to_lab(reference, reference.ndim == 2), srgb_to_lab(candidate, candidate.ndim == 2)
    return ciede2000(lab_ref, lab_cand), np.linalg.norm(lab_ref - lab_cand, axis=-1)


def summary(de2000, de76):
    return {"mean": float(de2000.mean()), "p95": float(np.percentile(de2000, 95)),
            "max": float(de2000.max()), "mean76": float(de76.mean())}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reference", nargs="?")
    parser.add_argument("candidate", nargs="?")
    parser.add_argument("--tsv", action="store_true", help="one line: size mean p95 max mean76, tab-separated")
    parser.add_argument("--self-test", action="store_true")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    if not args.candidate:
        parser.error("needs REFERENCE and CANDIDATE (or --self-test)")
    reference, candidate = load(args.reference), load(args.candidate)
    if reference.shape[:2] != candidate.shape[:2]:
        print(f"size mismatch: reference {size_of(reference)}, candidate {size_of(candidate)}", file=sys.stderr)
        return 2
    s = summary(*difference(reference, candidate))
    if args.tsv:
        print(f"{size_of(candidate)}\t{s['mean']:.3f}\t{s['p95']:.3f}\t{s['max']:.3f}\t{s['mean76']:.3f}")
    else:
        print(f"{size_of(candidate)}: dE2000 mean {s['mean']:.3f}, p95 {s['p95']:.3f}, max {s['max']:.3f} "
              f"(dE76 mean {s['mean76']:.3f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
