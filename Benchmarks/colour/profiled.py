#!/usr/bin/env python3
"""Lists the corpus photos that carry an embedded ICC profile, and the CMYK ones that do not.

    profiled.py [CORPUS_GOOD_DIR] [--tsv]

CORPUS_GOOD_DIR defaults to $ENLARGER_CORPUS/good, else ../shared/corpus/good beside the repo.
The profile is read from the JPEG's APP2 "ICC_PROFILE" chunks (reassembled in sequence order,
wherever they sit before the first scan) and cross-checked with Pillow's info['icc_profile'].
"Effectively sRGB" means: every colour of a grid of 8-bit device values (0, 17, ..., 255 per channel),
converted through the profile to sRGB as reference.py does, lands within dE2000 1.0 of the same
value read as sRGB: leaving the profile out changes nothing visible.

--tsv prints one line per photo for colour.sh: file, group (profiled or cmyk-no-profile),
profile space, sRGB-equivalent (yes/no), description.
"""
import argparse
import os
import sys
from pathlib import Path

import interpreter  # noqa: F401  (re-runs under Debian's python3 if Pillow or numpy is missing)
import numpy as np

import compare
import jpeg
import lcms

SRGB_EQUIVALENT_DE = 1.0


def default_corpus():
    corpus = os.environ.get("ENLARGER_CORPUS") or Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus"
    return Path(corpus) / "good"


def worst_difference_from_srgb(profile):
    """Max dE2000 between device values read through the profile and the same values read as sRGB."""
    steps = np.arange(0, 256, 17, dtype=np.uint8)
    if profile.space == "GRAY":
        grid = steps[None, :]
        managed = lcms.to_display_float(grid, profile)
        de = compare.ciede2000(compare.srgb_to_lab(managed, grey=True), compare.srgb_to_lab(grid, grey=True))
    else:
        grid = np.stack(np.meshgrid(steps, steps, steps, indexing="ij"), axis=-1).reshape(1, -1, 3)
        managed = lcms.to_display_float(grid, profile)
        de = compare.ciede2000(compare.srgb_to_lab(managed), compare.srgb_to_lab(grid))
    return float(de.max())


def survey(path):
    h = jpeg.header(path.read_bytes())
    icc = h.icc
    row = {"file": path.name, "size": f"{h.width}x{h.height}", "jpeg": h.colour,
           "icc_bytes": len(icc) if icc else 0, "note": ""}
    im, exif_dropped = jpeg.open_photo(path)
    with im:
        if (icc or None) != (im.info.get("icc_profile") or None):
            row["note"] = "Pillow reads a different profile"
    if exif_dropped:
        row["note"] = "Pillow 9.4 opens it only without its broken EXIF"
    if not icc:
        return row
    try:
        with lcms.Profile.from_bytes(icc) as profile:
            row.update(space=profile.space, description=profile.description, version=profile.version,
                       kind=profile.kind)
            expected = {"gray": "GRAY", "CMYK": "CMYK", "YCCK": "CMYK"}.get(row["jpeg"], "RGB")
            if profile.space != expected:
                row["note"] = f"{profile.space} profile on a {row['jpeg']} image: unusable, ignore it"
            elif profile.space == "CMYK":
                row["srgb_de"] = None
            else:
                row["srgb_de"] = worst_difference_from_srgb(profile)
    except ValueError:
        row["note"] = f"not a usable ICC profile ({len(icc)} bytes): read the photo as if it had none"
    return row


def photos(good):
    with open(good / "MANIFEST.tsv", encoding="utf-8") as manifest:
        next(manifest)
        return [good / line.split("\t", 1)[0] for line in manifest if line.strip()]


def srgb_label(row):
    de = row.get("srgb_de")
    if de is None:
        return "no"
    return f"{'yes' if de <= SRGB_EQUIVALENT_DE else 'no'} ({de:.2f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("good", nargs="?", type=Path, default=None)
    parser.add_argument("--tsv", action="store_true")
    args = parser.parse_args()
    good = args.good or default_corpus()
    rows = [survey(p) for p in photos(good)]
    profiled = [r for r in rows if r["icc_bytes"] and "space" in r]
    bare_cmyk = [r for r in rows if not r["icc_bytes"] and r["jpeg"] in ("CMYK", "YCCK")]

    if args.tsv:
        for r in profiled:
            if not r["note"].endswith("ignore it"):
                srgb = "yes" if r["srgb_de"] is not None and r["srgb_de"] <= SRGB_EQUIVALENT_DE else "no"
                print(f"{r['file']}\tprofiled\t{r['space']}\t{srgb}\t{r['description']}")
        for r in bare_cmyk:
            print(f"{r['file']}\tcmyk-no-profile\tCMYK\tno\t(none)")
        return 0

    print(f"Photos with an embedded ICC profile ({len(profiled)} of the {len(rows)} files in {good.name}/; "
          f"size as stored, before EXIF orientation):\n")
    print(f"{'photo':48} {'size':>9} {'jpeg':5} {'icc':4} {'ver':3} {'kind':6} {'bytes':>7} "
          f"{'sRGB? (max dE00)':17} description")
    for r in sorted(profiled, key=lambda r: (r["space"], r["description"], r["file"])):
        print(f"{r['file']:48} {r['size']:>9} {r['jpeg']:5} {r['space']:4} {r['version']:3} {r['kind']:6} "
              f"{r['icc_bytes']:>7} {srgb_label(r):17} {r['description']}{'  [' + r['note'] + ']' if r['note'] else ''}")
    unreadable = [r for r in rows if r["icc_bytes"] and "space" not in r]
    for r in unreadable:
        print(f"{r['file']:48} {r['size']:>9} {r['jpeg']:5} {r['note']}")
    print(f"\nCMYK/YCCK photos without a profile ({len(bare_cmyk)}): need a fallback CMYK profile\n")
    for r in bare_cmyk:
        print(f"{r['file']:48} {r['size']:>9} {r['jpeg']}")
    for r in rows:
        if r["note"] == "Pillow reads a different profile":
            print(f"warning: {r['file']}: Pillow reads a different profile from the APP2 chunks", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
