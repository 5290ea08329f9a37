# Shared by the benchmark scripts: builds the release binary and lists the photos.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
corpus="${ENLARGER_CORPUS:-$repo/../shared/corpus}"
ENLARGER_BENCH_DEPS=1 "$repo/scripts/setup"
"$repo/scripts/build" --product enlarger >&2
enlarger="$("$repo/scripts/build" --show-bin-path)/enlarger"

# The real photos of at least 6 MP in the good corpus (the 99.6 MP synthetic file is a flat
# colour, not a photo, and is left out).
photos() {
    awk -F'\t' -v dir="$corpus/good" 'NR > 1 && $5 * $6 >= 6000000 && $11 !~ /synthetic/ { print dir "/" $1 }' \
        "$corpus/good/MANIFEST.tsv"
}

median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# Starts `enlarger serve` with 2 workers of 1 job each (and any further serve options given)
# in a new temporary directory: sets `work` (removed on exit, serve stopped) and `runtime`,
# and waits until both workers are in.
start_serve() {
    work="$(mktemp -d)"
    runtime="$work/run"
    "$enlarger" serve --workers 2 --concurrency 1 --runtime-dir "$runtime" "$@" >"$work/serve.log" 2>&1 &
    serve=$!
    trap 'kill $serve 2>/dev/null; wait $serve 2>/dev/null; rm -rf "$work"' EXIT
    until "$enlarger" status --runtime-dir "$runtime" 2>/dev/null | grep -q "^workers 2"; do sleep 0.2; done
}
