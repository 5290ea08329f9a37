#!/usr/bin/env bash
# The service end to end, side by side with libvips in the same session:
#  1. throughput: the >= 6 MP photos (COPIES copies of each) through `enlarger serve` with 2
#     workers (1 job each) vs `vipsthumbnail` over the same files as 2 parallel processes
#     (fit 720x588, q80): wall-time ratio (target <= 0.9), and the CPU seconds of each part
#     (the workers, serve's broker, the submitting client; vips's two processes);
#     1b. the same with file sources: the worker reads each file under its --files-root
#     (submit --source file), so the client neither reads, hashes nor sends the images;
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
filesroot="$(mktemp -d)"
start_serve --cache-mib 0 --no-share-jobs --files-root "$filesroot"
trap 'kill $serve 2>/dev/null; wait $serve 2>/dev/null; rm -rf "$work" "$filesroot"' EXIT

mkdir -p "$work/in"
files=()
names=()
for ((c = 0; c < copies; c++)); do
    for p in "${photos[@]}"; do
        f="$work/in/$c-$(basename "$p")"
        ln -s "$p" "$f"
        files+=("$f")
        cp "$p" "$filesroot/$c-$(basename "$p")"
        names+=("$c-$(basename "$p")")
    done
done
half=$(( ${#files[@]} / 2 ))
wall() { local s e; s=$(date +%s.%N); "$@" >/dev/null 2>&1; e=$(date +%s.%N); awk -v s="$s" -v e="$e" 'BEGIN { printf "%.3f", e - s }'; }
run_service() { "$enlarger" submit "${files[@]}" --width 720 --height 588 --quality 80 --delivery final --overwrite \
    --runtime-dir "$runtime" --out "$work/out-service"; }
run_service_files() { "$enlarger" submit "${names[@]}" --source file --width 720 --height 588 --quality 80 \
    --delivery final --overwrite --runtime-dir "$runtime" --out "$work/out-files"; }
run_vips() {
    mkdir -p "$work/out-vips"
    VIPS_CONCURRENCY=1 vipsthumbnail "${files[@]:0:$half}" --size 720x588 -o "$work/out-vips/%s.jpg[Q=80]" &
    local first=$!
    VIPS_CONCURRENCY=1 vipsthumbnail "${files[@]:$half}" --size 720x588 -o "$work/out-vips/%s.jpg[Q=80]"
    wait "$first"  # not a bare `wait`: that would also wait for the serve process
}
echo "1. throughput: ${#files[@]} requests (${#photos[@]} photos x $copies), 2 workers vs 2 vipsthumbnail processes"
run_service >/dev/null 2>&1; run_vips >/dev/null 2>&1
# Where the service's CPU goes, per round: its workers, serve's own (the broker) and the
# submitting client, read from /proc and from the shell's `times`; and vips's, for scale.
ticks=$(getconf CLK_TCK)
cpu_of() { local total=0 pid; for pid in "$@"; do total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat"))); done; echo "$total"; }
# CPU seconds of this shell's finished children so far: `times` run here (a command
# substitution is a subshell with children of its own), its second line.
children_cpu() {
    times > "$work/times"
    awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/); printf "%.2f", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$work/times"
}
workers=$(pgrep -P "$serve" | tr '\n' ' ')
printf '%-6s %10s %10s %8s %12s %11s %11s %9s\n' round vips_s service_s ratio workers_cpu broker_cpu submit_cpu vips_cpu
# Timed in this shell (not in a command substitution), so that `times` counts the children.
timed_service() {  # [RUN]: run_service (inline images) or run_service_files
    w0=$(cpu_of $workers) b0=$(cpu_of "$serve")
    children_cpu > "$work/c0"
    wall "${1:-run_service}" > "$work/wall"
    children_cpu > "$work/c1"
    w1=$(cpu_of $workers) b1=$(cpu_of "$serve")
    s=$(< "$work/wall")
    submit_cpu=$(awk -v a="$(< "$work/c0")" -v b="$(< "$work/c1")" 'BEGIN { printf "%.2f", b - a }')
}
timed_vips() {
    children_cpu > "$work/c0"
    wall run_vips > "$work/wall"
    children_cpu > "$work/c1"
    v=$(< "$work/wall")
    vips_cpu=$(awk -v a="$(< "$work/c0")" -v b="$(< "$work/c1")" 'BEGIN { printf "%.2f", b - a }')
}
# ROUNDS rounds of RUN against vips, alternating which goes first; each round's ratio to FILE.
compare() {  # RUN FILE
    : > "$2"
    for ((i = 1; i <= rounds; i++)); do
        if ((i % 2)); then timed_vips; timed_service "$1"; else timed_service "$1"; timed_vips; fi
        r=$(awk -v s="$s" -v v="$v" 'BEGIN { printf "%.3f", s / v }')
        awk -v i="$i" -v v="$v" -v s="$s" -v r="$r" -v t="$ticks" -v w=$((w1 - w0)) -v b=$((b1 - b0)) \
            -v c="$submit_cpu" -v vc="$vips_cpu" \
            'BEGIN { printf "%-6s %10s %10s %8s %12.2f %11.2f %11s %9s\n", i, v, s, r, w / t, b / t, c, vc }'
        echo "$r" >> "$2"
    done
}
compare run_service "$work/ratios"
echo "median wall-time ratio service/vips: $(median < "$work/ratios")  (target <= 0.9, must be <= 1.0)"

echo "1b. the same with file sources (the worker reads the files; the client sends their names)"
run_service_files >/dev/null 2>&1
printf '%-6s %10s %10s %8s %12s %11s %11s %9s\n' round vips_s service_s ratio workers_cpu broker_cpu submit_cpu vips_cpu
compare run_service_files "$work/ratios-files"
echo "median wall-time ratio service (file sources)/vips: $(median < "$work/ratios-files")"

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
