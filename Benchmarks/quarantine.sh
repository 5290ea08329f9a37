#!/usr/bin/env bash
# Crashing requests beside ordinary ones: `enlarger serve` (2 workers, 1 job each) in a 500 MiB
# memory cgroup, with a memory budget set far above it (4 GiB), so that each of CRASHERS
# requests (the 99.6 MP photo at 9000 px) gets its worker killed by the out-of-memory killer;
# half a second later, 9 ordinary requests (corpus photos at 720 px). Prints each ordinary
# request's latency, when the crashing ones ended, the worker deaths and whether serve (and
# its broker) lived. Needs root and a cgroup memory controller (v1 or v2).
#   Benchmarks/quarantine.sh [CRASHERS]   (default 12)
[ "$(id -u)" -eq 0 ] || { echo "quarantine.sh: needs root (it makes a memory cgroup)" >&2; exit 1; }
source "$(dirname "$0")/common.sh"
crashers="${1:-12}"
limit=$((500 * 1024 * 1024))
name="enlarger-quarantine-$$"
if [ -d /sys/fs/cgroup/memory ]; then
    group="/sys/fs/cgroup/memory/$name"
    mkdir "$group" && echo "$limit" >"$group/memory.limit_in_bytes"
elif grep -qw memory /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
    group="/sys/fs/cgroup/$name"
    mkdir "$group" && echo "$limit" >"$group/memory.max"
else
    echo "quarantine.sh: no cgroup memory controller to use" >&2
    exit 1
fi
work="$(mktemp -d)"
runtime="$work/run"
sh -c "echo \$\$ >'$group/cgroup.procs'; exec '$enlarger' serve --workers 2 --concurrency 1 --memory-budget 4G \
    --runtime-dir '$runtime'" >"$work/serve.log" 2>&1 &
serve=$!
trap 'kill $serve 2>/dev/null; wait $serve 2>/dev/null; rm -rf "$work"; rmdir "$group" 2>/dev/null' EXIT
until "$enlarger" status --runtime-dir "$runtime" 2>/dev/null | grep -q "^workers 2"; do sleep 0.2; done

start=$(date +%s.%N)
since() { awk -v now="$(date +%s.%N)" -v then="$1" 'BEGIN { printf "%.2f\n", now - then }'; }
for i in $(seq 1 "$crashers"); do
    ( "$enlarger" submit "$corpus/good/thumbor_9643x10328.jpg" --width 9000 --no-share --id-prefix "crash$i" \
          --out "$work/out" --overwrite --runtime-dir "$runtime" >/dev/null 2>&1 || true
      echo "$(since "$start")" >>"$work/crashers" ) &
done
sleep 0.5
photos=(bimg_test_exif_full.jpg bimg_vertical.jpg exifsamples_DSCN0010.jpg exifsamples_iphone_hdr_NO.jpg
        sharp_2569067123_aca715a2ee_o.jpg sharp_gain-map.jpg exifsamples_30-type_error.jpg exifsamples_canon_hdr_NO.jpg
        exifsamples_kodak-dc240.jpg)
for photo in "${photos[@]}"; do
    ( submitted=$(date +%s.%N)
      if "$enlarger" submit "$corpus/good/$photo" --width 720 --no-share --id-prefix "ok-$photo" --out "$work/out" --overwrite \
             --runtime-dir "$runtime" >/dev/null 2>&1; then outcome=finished; else outcome=failed; fi
      echo "$(since "$submitted") $outcome $photo" >>"$work/ordinary" ) &
done
for job in $(jobs -p); do [ "$job" = "$serve" ] || wait "$job" || true; done

echo "ordinary requests (latency s, outcome, photo):"
sort -g "$work/ordinary"
echo "ordinary latency median $(cut -d' ' -f1 "$work/ordinary" | median) s, max $(cut -d' ' -f1 "$work/ordinary" | sort -g | tail -n 1) s"
echo "the $crashers crashing requests ended by $(sort -g "$work/crashers" | tail -n 1) s"
echo "worker deaths: $(grep -c "worker exited" "$work/serve.log")"
if kill -0 "$serve" 2>/dev/null; then
    "$enlarger" status --runtime-dir "$runtime" | grep -E "^totals" | tr ',' '\n' | grep -E "^ (finished|failed|workers_lost|jobs_quarantined) "
    echo "serve and its broker lived"
else
    echo "serve (and its broker) died"
fi
