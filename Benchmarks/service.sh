#!/usr/bin/env bash
# The service end to end, side by side with libvips in the same session:
#  1. throughput: the >= 6 MP photos (COPIES copies of each) through `enlarger serve` with 2
#     workers (1 job each) vs `vipsthumbnail` over the same files as 2 parallel processes
#     (fit 720x588, q80): wall-time ratio (target <= 0.9);
#  2. time to first result: degraded vs final t_ms per photo (median), one request at a time;
#  3. cancel: `enlarger-bench cancel-rtt` (cancel() -> Cancelled over ipc) against the same serve.
#   Benchmarks/service.sh [ROUNDS] [COPIES]   (default 5 rounds, 4 copies)
source "$(dirname "$0")/common.sh"
"$repo/scripts/build" --product enlarger-bench >&2
bench="$(dirname "$enlarger")/enlarger-bench"
rounds="${1:-5}"
copies="${2:-4}"
mapfile -t photos < <(photos)
# Without the result cache and shared jobs: every round resizes every file, as vips does.
start_serve --cache-mib 0 --no-share-jobs

mkdir -p "$work/in"
files=()
for ((c = 0; c < copies; c++)); do
    for p in "${photos[@]}"; do
        f="$work/in/$c-$(basename "$p")"
        ln -s "$p" "$f"
        files+=("$f")
    done
done
half=$(( ${#files[@]} / 2 ))
wall() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N); awk -v s="$s" -v e="$e" 'BEGIN { printf "%.3f", e - s }'; }
run_service() { "$enlarger" submit "${files[@]}" --width 720 --height 588 --quality 80 --delivery final \
    --runtime-dir "$runtime" --out "$work/out-service"; }
run_vips() {
    mkdir -p "$work/out-vips"
    VIPS_CONCURRENCY=1 vipsthumbnail "${files[@]:0:$half}" --size 720x588 -o "$work/out-vips/%s.jpg[Q=80]" &
    local first=$!
    VIPS_CONCURRENCY=1 vipsthumbnail "${files[@]:$half}" --size 720x588 -o "$work/out-vips/%s.jpg[Q=80]"
    wait "$first"  # not a bare `wait`: that would also wait for the serve process
}
echo "1. throughput: ${#files[@]} requests (${#photos[@]} photos x $copies), 2 workers vs 2 vipsthumbnail processes"
run_service >/dev/null 2>&1; run_vips >/dev/null 2>&1
printf '%-6s %10s %10s %8s\n' round vips_s service_s ratio
: > "$work/ratios"
for ((i = 1; i <= rounds; i++)); do
    if ((i % 2)); then v=$(wall run_vips); s=$(wall run_service); else s=$(wall run_service); v=$(wall run_vips); fi
    r=$(awk -v s="$s" -v v="$v" 'BEGIN { printf "%.3f", s / v }')
    printf '%-6s %10s %10s %8s\n' "$i" "$v" "$s" "$r"
    echo "$r" >> "$work/ratios"
done
echo "median wall-time ratio service/vips: $(median < "$work/ratios")  (target <= 0.9, must be <= 1.0)"

echo
# The >= 6 MP photos are all baseline; the progressive 3.4 MP photo covers the third kind
# of degraded source (early scans).
progressive="$corpus/good/jxltestdata_flower.png.im_q85_420_progr.jpg"
ttfr=("${files[@]}")
for ((c = 0; c < copies; c++)); do
    ln -s "$progressive" "$work/in/$c-$(basename "$progressive")"
    ttfr+=("$work/in/$c-$(basename "$progressive")")
done
echo "2. time to first result (progressive delivery, one request at a time over one warm connection, $copies runs each)"
"$enlarger" submit "${ttfr[@]}" --width 720 --height 588 --in-flight 1 --runtime-dir "$runtime" --out "$work/ttfr" \
    --json > "$work/ttfr.jsonl"
"$enlarger" resize "${photos[@]}" "$progressive" --width 720 --height 588 --degraded --json --out "$work/sources" \
    > "$work/sources.jsonl"
python3 - "$work/ttfr.jsonl" "$work/sources.jsonl" <<'PY'
import json, statistics, sys, os
events = [json.loads(l) for l in open(sys.argv[1])]
sources = {os.path.basename(j["input"]): j["degraded"]["source"] for j in map(json.loads, open(sys.argv[2])) if "degraded" in j}
per = {}
for e in events:
    if "input" not in e:
        continue  # the closing summary line
    name = os.path.basename(e["input"]).split("-", 1)[1]  # copies are named N-<photo>
    per.setdefault(name, {}).setdefault(e["event"], []).append(e["t_ms"])
print(f"{'photo':40} {'source':17} {'degraded_ms':>11} {'final_ms':>9} {'ratio':>6} target")
for name, ev in sorted(per.items()):
    d, f = statistics.median(ev["degraded"]), statistics.median(ev["final"])
    src = sources.get(name, "?")
    target = 0.3 if src in ("exifThumbnail", "progressiveScans") else 0.8
    print(f"{name:40} {src:17} {d:11.1f} {f:9.1f} {d / f:6.2f} <= {target}")
PY

echo
echo "3. cancel over ipc"
"$bench" cancel-rtt --runtime-dir "$runtime"
