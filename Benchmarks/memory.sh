#!/usr/bin/env bash
# Peak RSS of resizing the 24 MP photo (bimg_vertical.jpg, 4000x6000) to fit 720x720:
# `enlarger resize` vs `vipsthumbnail` (single-threaded). Median of ROUNDS runs each.
#   Benchmarks/memory.sh [ROUNDS]   (default 5)
source "$(dirname "$0")/common.sh"
rounds="${1:-5}"
photo="$corpus/good/bimg_vertical.jpg"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
rss() { /usr/bin/time -f "%M" -o "$out/rss" "$@" >/dev/null 2>&1; cat "$out/rss"; }
for ((i = 1; i <= rounds; i++)); do
    VIPS_CONCURRENCY=1 rss vipsthumbnail "$photo" --size 720x720 -o "$out/%s.jpg[Q=80]" >> "$out/v"
    rss "$enlarger" resize "$photo" --width 720 --height 720 --out "$out" --overwrite >> "$out/e"
done
v=$(median < "$out/v"); e=$(median < "$out/e")
echo "peak RSS, median of $rounds: vipsthumbnail $((v / 1024)) MB, enlarger $((e / 1024)) MB (target <= 64 MB)"
