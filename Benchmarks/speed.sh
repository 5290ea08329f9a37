#!/usr/bin/env bash
# CPU seconds of `enlarger resize` vs libvips' `vipsthumbnail` over the same >= 6 MP photos:
# fit 720x588, quality 80, one process each over all files, single-threaded, alternating.
# Prints each round and the median ratio Enlarger/vips (target <= 0.8).
#   Benchmarks/speed.sh [ROUNDS]   (default 9)
source "$(dirname "$0")/common.sh"
rounds="${1:-9}"
mapfile -t files < <(photos)
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
cpu() { /usr/bin/time -f "%U %S" -o "$out/time" "$@" >/dev/null 2>&1; awk '{ print $1 + $2 }' "$out/time"; }
run_vips() { VIPS_CONCURRENCY=1 cpu vipsthumbnail "${files[@]}" --size 720x588 -o "$out/vips/%s.jpg[Q=80]"; }
run_enlarger() { cpu "$enlarger" resize "${files[@]}" --width 720 --height 588 --quality 80 --out "$out/enlarger" --overwrite; }
mkdir -p "$out/vips"
echo "${#files[@]} photos: $(for f in "${files[@]}"; do basename "$f"; done | tr '\n' ' ')"
run_vips >/dev/null; run_enlarger >/dev/null  # warm the page cache and both binaries
printf '%-6s %10s %10s %8s\n' round vips_s enlarger_s ratio
: > "$out/ratios"; : > "$out/v"; : > "$out/e"
for ((i = 1; i <= rounds; i++)); do
    if ((i % 2)); then v=$(run_vips); e=$(run_enlarger); else e=$(run_enlarger); v=$(run_vips); fi
    r=$(awk -v e="$e" -v v="$v" 'BEGIN { printf "%.3f", e / v }')
    printf '%-6s %10s %10s %8s\n' "$i" "$v" "$e" "$r"
    echo "$r" >> "$out/ratios"; echo "$v" >> "$out/v"; echo "$e" >> "$out/e"
done
echo "median CPU seconds: vips $(median < "$out/v")  enlarger $(median < "$out/e")"
echo "median ratio enlarger/vips: $(median < "$out/ratios")  (target <= 0.8)"
