#!/usr/bin/env bash
# A responsive site's srcset from one upload: six outputs (320, 640 and 1280 px boxes, each as
# WebP and JPEG, quality 80) of every >= 6 MP photo. CPU seconds of one `enlarger resize
# --variant` (one decode per photo) against six `vipsthumbnail` runs and six single-output
# `enlarger resize` runs over the same photos; one process per run, single-threaded,
# alternating. Prints each round and the median ratios (targets: <= 0.45 of vips, <= 0.6 of
# six Enlarger runs).
#   Benchmarks/variants.sh [ROUNDS]   (default 5)
source "$(dirname "$0")/common.sh"
rounds="${1:-5}"
mapfile -t files < <(photos)
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
boxes=(320 640 1280)
formats=(webp jpeg)
cpu() { /usr/bin/time -f "%U %S" -o "$out/time" "$@" >/dev/null 2>&1; awk '{ print $1 + $2 }' "$out/time"; }
run_variants() {
    cpu "$enlarger" resize "${files[@]}" --quality 80 --out "$out/variants" --overwrite \
        --variant 320x320:webp,640x640:webp,1280x1280:webp,320x320:jpeg,640x640:jpeg,1280x1280:jpeg
}
run_six() {  # vips | enlarger: six runs, one per output; the sum of their CPU seconds
    local total=0 t
    for box in "${boxes[@]}"; do
        for format in "${formats[@]}"; do
            if [ "$1" = vips ]; then
                t=$(VIPS_CONCURRENCY=1 cpu vipsthumbnail "${files[@]}" --size "${box}x${box}" \
                    -o "$out/vips/%s-$box.$format[Q=80]")
            else
                t=$(cpu "$enlarger" resize "${files[@]}" --width "$box" --height "$box" --format "$format" \
                    --quality 80 --out "$out/single-$box" --overwrite)
            fi
            total=$(awk -v a="$total" -v b="$t" 'BEGIN { print a + b }')
        done
    done
    echo "$total"
}
mkdir -p "$out/vips"
echo "${#files[@]} photos: $(for f in "${files[@]}"; do basename "$f"; done | tr '\n' ' ')"
run_variants >/dev/null; run_six vips >/dev/null  # warm the page cache and the binaries
printf '%-6s %10s %12s %11s %10s %12s\n' round vips6_s enlarger6_s variants_s vs_vips vs_enlarger
: > "$out/rv"; : > "$out/re"; : > "$out/v"; : > "$out/e"; : > "$out/m"
for ((i = 1; i <= rounds; i++)); do
    if ((i % 2)); then v=$(run_six vips); e=$(run_six enlarger); m=$(run_variants)
    else m=$(run_variants); e=$(run_six enlarger); v=$(run_six vips); fi
    rv=$(awk -v m="$m" -v v="$v" 'BEGIN { printf "%.3f", m / v }')
    re=$(awk -v m="$m" -v e="$e" 'BEGIN { printf "%.3f", m / e }')
    printf '%-6s %10s %12s %11s %10s %12s\n' "$i" "$v" "$e" "$m" "$rv" "$re"
    echo "$rv" >> "$out/rv"; echo "$re" >> "$out/re"; echo "$v" >> "$out/v"; echo "$e" >> "$out/e"; echo "$m" >> "$out/m"
done
echo "median CPU seconds: six vips $(median < "$out/v"), six enlarger $(median < "$out/e"), variants $(median < "$out/m")"
echo "median ratio variants/six vips: $(median < "$out/rv")  (target <= 0.45)"
echo "median ratio variants/six enlarger: $(median < "$out/re")  (target <= 0.6)"
