#!/usr/bin/env bash
# Identical requests through `enlarger serve` (2 workers, 1 job each):
#  1. CLIENTS clients ask for the same 12 MP photo at once, ROUNDS times each way: sharing one
#     job (the default: each request carries the image's digest) vs one job each (no digest).
#     Prints wall time to the last final, the jobs the workers ran, and the median ratio.
#  2. HITS cache hits one after another over ipc: p50/p90/p99 from submit to final, beside an
#     uncached resize of the same photo and the client's own SHA-256 of it.
#   Benchmarks/share.sh [CLIENTS] [ROUNDS] [HITS]   (default 100 clients, 3 rounds, 1000 hits)
source "$(dirname "$0")/common.sh"
"$repo/scripts/build" --product enlarger-bench >&2
bench="$(dirname "$enlarger")/enlarger-bench"
"$bench" share "$corpus/good/bimg_test_exif_full.jpg" --clients "${1:-100}" --rounds "${2:-3}" --hits "${3:-1000}" \
    --enlarger "$enlarger"
