#!/usr/bin/env bash
# Quality of the final result vs an exact Lanczos-3 reference (see quality.py).
source "$(dirname "$0")/common.sh"
mapfile -t files < <(photos)
python3 "$(dirname "$0")/quality.py" "$enlarger" "${files[@]}"
