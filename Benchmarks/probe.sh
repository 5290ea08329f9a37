#!/usr/bin/env bash
# /healthz latency of `enlarger serve --metrics` while IDLE silent connections and SLOW
# slowloris connections (a request head, one byte every 100 ms) hold its metrics port; each
# is opened again when the server closes it. Prints median, p95 and max over PROBES probes.
#   Benchmarks/probe.sh [IDLE] [SLOW] [PROBES]   (default 200 idle, 20 slowloris, 50 probes)
source "$(dirname "$0")/common.sh"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
start_serve --metrics "127.0.0.1:$port"
python3 "$repo/Benchmarks/probe.py" "127.0.0.1:$port" "${1:-200}" "${2:-20}" "${3:-50}"
