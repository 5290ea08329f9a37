#!/usr/bin/env bash
# Quality of the final result vs an exact Lanczos-3 reference (see quality.py).
source "$(dirname "$0")/common.sh"
mapfile -t files < <(photos)
# Debian's python3-pil/python3-numpy are seen by /usr/bin/python3; a python3 earlier on PATH may lack them.
python=python3
python3 -c 'import PIL, numpy' 2>/dev/null || python=/usr/bin/python3
"$python" "$(dirname "$0")/quality.py" "$enlarger" "${files[@]}"
