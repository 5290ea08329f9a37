#!/usr/bin/env bash
# `enlarger sync` side by side with libvips in the same session: mirror the good corpus (every
# file the service reads: JPEG, PNG, WebP, HEIC, AVIF; COPIES copies of each) as 320x320
# thumbnails through `enlarger serve` (2 workers, 1 job each), against `vipsthumbnail` over
# the same files as 2 parallel processes. Each round starts from an empty mirror (a first
# pass: every file is sent); then a second pass over the unchanged tree shows what the
# manifest saves. The broker runs without its result cache and shared jobs, so every file of
# every round is decoded and resized. Prints files/s each way and the median wall-time ratio.
#   Benchmarks/sync.sh [ROUNDS] [COPIES]   (default 3 rounds, 2 copies)
source "$(dirname "$0")/common.sh"
rounds="${1:-3}"
copies="${2:-2}"
# No result cache and no shared jobs: the copies, and every round, are worked out afresh,
# as vipsthumbnail works them (the cache would answer them from memory).
start_serve --cache-mib 0 --no-share-jobs

# The files both tools read: those `enlarger info` accepts (vipsthumbnail gets the same list).
mkdir -p "$work/src"
files=()
for f in "$corpus"/good/*; do
    case "$f" in *.tsv) continue ;; esac
    "$enlarger" info "$f" >/dev/null 2>&1 || continue
    for ((c = 0; c < copies; c++)); do
        mkdir -p "$work/src/$c"
        # Copies: sync mirrors regular files and does not follow symbolic links.
        cp "$f" "$work/src/$c/$(basename "$f")"
        files+=("$work/src/$c/$(basename "$f")")
    done
done
half=$(( ${#files[@]} / 2 ))
wall() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N); awk -v s="$s" -v e="$e" 'BEGIN { printf "%.3f", e - s }'; }
run_sync() { rm -rf "$work/out-sync"; "$enlarger" sync "$work/src" --out "$work/out-sync" --width 320 --height 320 \
    --runtime-dir "$runtime"; }
run_again() { "$enlarger" sync "$work/src" --out "$work/out-sync" --width 320 --height 320 --runtime-dir "$runtime"; }
run_vips() {
    rm -rf "$work/out-vips"; mkdir -p "$work/out-vips"
    VIPS_CONCURRENCY=1 vipsthumbnail "${files[@]:0:$half}" --size 320x320 -o "$work/out-vips/%s.jpg[Q=80]" &
    local first=$!
    VIPS_CONCURRENCY=1 vipsthumbnail "${files[@]:$half}" --size 320x320 -o "$work/out-vips/%s.jpg[Q=80]"
    wait "$first"  # not a bare `wait`: that would also wait for the serve process
}
echo "sync: ${#files[@]} files (the readable good corpus x $copies), 2 workers vs 2 vipsthumbnail processes, 320x320"
run_sync >/dev/null 2>&1; run_vips >/dev/null 2>&1
written=$(find "$work/out-sync" -type f ! -name '.*' | wc -l)
echo "the first pass wrote $written thumbnails"
printf '%-6s %10s %10s %12s %12s %8s %14s\n' round vips_s sync_s vips_files/s sync_files/s ratio unchanged_s
: > "$work/ratios"
for ((i = 1; i <= rounds; i++)); do
    if ((i % 2)); then v=$(wall run_vips); s=$(wall run_sync); else s=$(wall run_sync); v=$(wall run_vips); fi
    a=$(wall run_again)
    r=$(awk -v s="$s" -v v="$v" 'BEGIN { printf "%.3f", s / v }')
    printf '%-6s %10s %10s %12.1f %12.1f %8s %14s\n' "$i" "$v" "$s" \
        "$(awk -v n="${#files[@]}" -v t="$v" 'BEGIN { print n / t }')" \
        "$(awk -v n="${#files[@]}" -v t="$s" 'BEGIN { print n / t }')" "$r" "$a"
    echo "$r" >> "$work/ratios"
done
echo "median wall-time ratio sync/vips: $(median < "$work/ratios")"
