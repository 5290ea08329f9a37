#!/usr/bin/env bash
# AV1 encode time by output size, the stage no cancel can interrupt: what --max-avif-pixels
# (16,000,000 by default) lets a cancelled job keep its thread for. The 24 MP corpus photo is
# scaled to each height and written as AVIF, RUNS times each; prints the median encode time.
#   Benchmarks/avif-limit.sh [RUNS]   (default 3)
source "$(dirname "$0")/common.sh"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
for height in 2000 4000 4898 6000; do
    for _ in $(seq "${1:-3}"); do
        "$enlarger" resize "$corpus/good/bimg_vertical.jpg" --height "$height" --enlarge --format avif \
            --max-avif-pixels 100000000 --out "$out" --overwrite --json
    done | python3 -c '
import json, statistics, sys
runs = [json.loads(line) for line in sys.stdin]
w, h = runs[0]["width"], runs[0]["height"]
median = statistics.median(r["encode_ms"] for r in runs) / 1000
print(f"{w}x{h} ({w * h / 1e6:.1f} MP): AV1 encode median {median:.2f} s over {len(runs)} runs")'
done
