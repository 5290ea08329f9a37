#!/usr/bin/env bash
# Enlarger vs libvips' `vipsthumbnail`, both colour-managed (vips with --export-profile srgb;
# Enlarger converts embedded profiles to sRGB by default), single-threaded, to fit 720x720 at
# JPEG quality 80, alternating runs; medians of ROUNDS:
#   1. JPEG: CPU over the >= 6 MP photos of the corpus (target: Enlarger/vips <= 0.7).
#   2. PNG and WebP made from the 12 MP and 24 MP photos (vips copy; WebP at Q 80): CPU per
#      file (target <= 1.0x vips) and peak RSS (target <= 1.2x vips).
#   3. HEIC, AVIF, GIF (vips' cgif, 256 colours) and JPEG XL (libjxl, Q 80) made from the
#      same photos: CPU per file, reported.
#   4. The cost of AVIF and WebP output: Enlarger's CPU writing each, against writing JPEG.
#   Benchmarks/formats.sh [ROUNDS]   (default 5)
source "$(dirname "$0")/common.sh"
rounds="${1:-5}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
measure() { /usr/bin/time -f "%U %S %M" -o "$out/time" "$@" >/dev/null 2>&1 || { echo "failed: $*" >&2; exit 1; }; }
cpu() { awk '{ print $1 + $2 }' "$out/time"; }
rss() { awk '{ print $3 }' "$out/time"; }
vips_run() { VIPS_CONCURRENCY=1 measure vipsthumbnail "$@" --size 720x720 --export-profile srgb -o "$out/v/%s.jpg[Q=80]"; }
enlarger_run() { measure "$enlarger" resize "$@" --width 720 --height 720 --quality 80 --out "$out/e" --overwrite; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f\n", a / b }'; }
mkdir -p "$out/v" "$out/e" "$out/in"

# Alternates vips and Enlarger over ROUNDS; prints the medians of CPU, RSS and their ratios.
compare() {
    local label="$1"; shift
    : > "$out/vc"; : > "$out/ec"; : > "$out/vm"; : > "$out/em"; : > "$out/rc"; : > "$out/rm"
    vips_run "$@"; enlarger_run "$@"  # warm the page cache and both binaries
    for ((i = 1; i <= rounds; i++)); do
        if ((i % 2)); then
            vips_run "$@"; vc=$(cpu); vm=$(rss); enlarger_run "$@"; ec=$(cpu); em=$(rss)
        else
            enlarger_run "$@"; ec=$(cpu); em=$(rss); vips_run "$@"; vc=$(cpu); vm=$(rss)
        fi
        echo "$vc" >> "$out/vc"; echo "$ec" >> "$out/ec"; echo "$vm" >> "$out/vm"; echo "$em" >> "$out/em"
        ratio "$ec" "$vc" >> "$out/rc"; ratio "$em" "$vm" >> "$out/rm"
    done
    printf '%-28s cpu vips %6.3f s  enlarger %6.3f s  ratio %5.3f   rss vips %4d MB  enlarger %4d MB  ratio %5.2f\n' \
        "$label" "$(median < "$out/vc")" "$(median < "$out/ec")" "$(median < "$out/rc")" \
        $(( $(median < "$out/vm" | cut -d. -f1) / 1024 )) $(( $(median < "$out/em" | cut -d. -f1) / 1024 )) \
        "$(median < "$out/rm")"
}

echo "== 1. JPEG, >= 6 MP photos, colour-managed on both sides"
mapfile -t photos < <(photos)
echo "${#photos[@]} photos"
compare "all photos (one process)" "${photos[@]}"

echo "== 2. PNG and WebP at 12 and 24 MP"
for photo in bimg_test_exif_full bimg_vertical; do
    vips copy "$corpus/good/$photo.jpg" "$out/in/$photo.png"
    vips copy "$corpus/good/$photo.jpg" "$out/in/$photo.webp[Q=80]"
    vips copy "$corpus/good/$photo.jpg" "$out/in/$photo.heic[compression=hevc,Q=80]"
    vips copy "$corpus/good/$photo.jpg" "$out/in/$photo.avif[compression=av1,Q=80]"
    vips copy "$corpus/good/$photo.jpg" "$out/in/$photo.gif"
    vips copy "$corpus/good/$photo.jpg" "$out/in/$photo.jxl[Q=80]"
done
for format in png webp; do
    for photo in bimg_test_exif_full bimg_vertical; do
        compare "$format $photo ($(vipsheader -f width "$out/in/$photo.$format")x$(vipsheader -f height "$out/in/$photo.$format"))" \
            "$out/in/$photo.$format"
    done
done

echo "== 3. HEIC, AVIF, GIF and JPEG XL at 12 and 24 MP (report)"
for format in heic avif gif jxl; do
    for photo in bimg_test_exif_full bimg_vertical; do
        compare "$format $photo" "$out/in/$photo.$format"
    done
done

echo "== 4. Output formats: Enlarger's CPU per output format, 12 and 24 MP JPEG in"
for photo in bimg_test_exif_full bimg_vertical; do
    line="$photo:"
    for format in jpeg webp avif png; do
        : > "$out/c"
        for ((i = 1; i <= rounds; i++)); do
            measure "$enlarger" resize "$corpus/good/$photo.jpg" --width 720 --height 720 --format "$format" --out "$out/e" --overwrite
            cpu >> "$out/c"
        done
        line+="  $format $(median < "$out/c") s"
    done
    echo "$line"
done
