#!/usr/bin/env bash
# Colour accuracy of Enlarger on the corpus photos that carry an ICC profile: dE2000 of its output
# against the exact colour-managed reference (reference.py). Beside it, two stand-ins measured the
# same way: the planned order (resize, then transform) simulated in Python, and no colour
# management at all (what doing nothing costs). See README.md.
#
#   Benchmarks/colour/colour.sh [--format pnm|jpeg] [--intent perceptual|relative] [--width N] [--keep DIR]
#
# ENLARGER_BIN: the binary to measure (default: build the release one). ENLARGER_CORPUS: the corpus.
# ENLARGER_CMYK_PROFILE: fallback profile for CMYK photos without one.
# Exit status 1 when a profiled photo misses mean <= 1.0 or p95 <= 2.0.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"

format=pnm intent=perceptual width=720 keep=""
while [ $# -gt 0 ]; do
    case "$1" in
        --format) format="$2"; shift 2 ;;
        --intent) intent="$2"; shift 2 ;;
        --width) width="$2"; shift 2 ;;
        --keep) keep="$2"; shift 2 ;;
        *) echo "usage: $0 [--format pnm|jpeg] [--intent perceptual|relative] [--width N] [--keep DIR]" >&2; exit 2 ;;
    esac
done
case "$format" in pnm) ext=pnm ;; jpeg) ext=jpg ;; *) echo "--format is pnm or jpeg" >&2; exit 2 ;; esac

if [ -n "${ENLARGER_BIN:-}" ]; then
    enlarger="$ENLARGER_BIN"
    corpus="${ENLARGER_CORPUS:-$here/../../../shared/corpus}"
else
    source "$here/../common.sh"  # installs the bench dependencies, builds, sets $enlarger and $corpus
fi

# Debian's python3-pil/python3-numpy are seen by /usr/bin/python3; a python3 earlier on PATH may lack them.
python=python3
python3 -c 'import PIL, numpy' 2>/dev/null || python=/usr/bin/python3
py() { nice "$python" "$@"; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
out="${keep:-$work}"
mkdir -p "$out/enlarger" "$out/reference" "$out/planned" "$out/unmanaged"

py "$here/profiled.py" "$corpus/good" --tsv >"$work/photos.tsv"
mapfile -t files < <(cut -f1 "$work/photos.tsv")
paths=()
for f in "${files[@]}"; do paths+=("$corpus/good/$f"); done
"$enlarger" resize "${paths[@]}" --width "$width" --format "$format" --out "$out/enlarger" --overwrite >"$work/enlarger.log" 2>&1 ||
    echo "warning: enlarger failed on some photos (see below)" >&2

# One row per photo: group, photo, profile, then Enlarger's size, mean, p95, max and mean dE76,
# the planned order's mean and p95, and the unmanaged mean and p95.
: >"$work/rows.tsv"
while IFS=$'\t' read -r file group space srgb description; do
    name="${file%.*}"
    candidate="$out/enlarger/$name.$ext"
    if [ ! -f "$candidate" ]; then
        grep -F "$file" "$work/enlarger.log" >&2 || echo "$file: no output from enlarger" >&2
        printf '%s\t%s\t%s\t-\tnone\n' "$group" "$file" "$description" >>"$work/rows.tsv"
        continue
    fi
    if ! label="$(py "$here/reference.py" "$corpus/good/$file" --like "$candidate" --intent "$intent" \
                  -o "$out/reference/$name.png" | cut -f3)"; then
        printf '%s\t%s\t%s\t-\tno reference\n' "$group" "$file" "$description" >>"$work/rows.tsv"
        continue
    fi
    py "$here/reference.py" "$corpus/good/$file" --like "$candidate" --intent "$intent" --resize-first \
        -o "$out/planned/$name.png" >/dev/null
    py "$here/reference.py" "$corpus/good/$file" --like "$candidate" --unmanaged -o "$out/unmanaged/$name.png" >/dev/null
    ours="$(py "$here/compare.py" "$out/reference/$name.png" "$candidate" --tsv)"
    planned="$(py "$here/compare.py" "$out/reference/$name.png" "$out/planned/$name.png" --tsv | cut -f2,3)"
    plain="$(py "$here/compare.py" "$out/reference/$name.png" "$out/unmanaged/$name.png" --tsv | cut -f2,3)"
    [ "$srgb" = yes ] && label="$label (= sRGB)"
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$group" "$file" "$label" "$ours" "$planned" "$plain" >>"$work/rows.tsv"
done <"$work/photos.tsv"

echo "Enlarger $("$enlarger" --version 2>/dev/null || echo '?'), --width $width --format $format, intent $intent;" \
     "dE2000 vs the colour-managed reference"
awk -F'\t' -v max_mean=1.0 -v max_p95=2.0 '
    function header(title) {
        printf "\n%s\n%-46s %-38s %9s %6s %6s %6s  %-13s  %s\n", title, "photo", "profile", "size", "mean", "p95",
               "max", "planned m/p95", "unmanaged m/p95"
    }
    $1 == "profiled" && !shown_profiled { header("Photos with an embedded profile:"); shown_profiled = 1 }
    $1 == "cmyk-no-profile" && !shown_fallback {
        header("CMYK photos without a profile (informational: the reference uses a fallback profile):"); shown_fallback = 1
    }
    NF < 8 {
        printf "%-46s %-38s %s\n", $2, substr($3, 1, 38), $5
        if ($1 == "profiled") missing++
        next
    }
    {
        printf "%-46s %-38s %9s %6.2f %6.2f %6.2f  %5.2f / %-5.2f  %5.2f / %.2f\n", $2, substr($3, 1, 38), $4, $5, $6,
               $7, $9, $10, $11, $12
        if ($1 == "profiled") {
            if (worst_mean_at == "" || $5 > worst_mean) { worst_mean = $5; worst_mean_at = $2 }
            if (worst_p95_at == "" || $6 > worst_p95) { worst_p95 = $6; worst_p95_at = $2 }
        }
    }
    END {
        printf "\nworst mean dE2000 %.2f (%s), worst p95 %.2f (%s)\n", worst_mean, worst_mean_at, worst_p95, worst_p95_at
        pass = worst_mean <= max_mean && worst_p95 <= max_p95 && !missing
        printf "%s: every profiled photo needs mean <= %.1f and p95 <= %.1f%s\n", pass ? "PASS" : "FAIL",
               max_mean, max_p95, missing ? sprintf(" (%d without a result)", missing) : ""
        exit pass ? 0 : 1
    }' "$work/rows.tsv"
