#!/usr/bin/env bash
# Regenerates the Python protobuf modules in src/enlarger/_proto/ from the repository's
# proto/enlarger/v1/*.proto (the wire contract), with the system `protoc` (Debian:
# apt-get install protobuf-compiler).
#
# protoc names modules after the .proto paths (`enlarger.v1.common_pb2`), which would make
# the generated code import a top-level `enlarger.v1` package that does not exist; the
# imports are rewritten to relative ones so the modules live inside this package.
#
# The generated code needs a protobuf runtime at least as new as protoc's (3.21 makes code
# for runtime 4.21+); pyproject.toml's lower bound says which. Safe to run repeatedly: the
# output directory is rewritten from scratch.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
proto_root="$(cd "$here/../../proto" && pwd)"
out="$here/src/enlarger/_proto"

say() { printf 'gen-proto: %s\n' "$*"; }

command -v protoc >/dev/null || { say "protoc not found (Debian: apt-get install protobuf-compiler)"; exit 1; }

protos=()
while IFS= read -r -d '' file; do protos+=("${file#"$proto_root"/}"); done \
    < <(find "$proto_root/enlarger/v1" -name '*.proto' -print0 | sort -z)
[[ ${#protos[@]} -gt 0 ]] || { say "no .proto files under $proto_root/enlarger/v1"; exit 1; }

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
say "protoc $(protoc --version | awk '{print $2}'): ${protos[*]}"
protoc --proto_path="$proto_root" --python_out="$work" --pyi_out="$work" "${protos[@]}"

rm -rf "$out"
mkdir -p "$out"
printf '%s\n' \
    '"""Protobuf modules generated from proto/enlarger/v1 by scripts/gen-proto.sh. Do not edit."""' \
    >"$out/__init__.py"
for file in "$work"/enlarger/v1/*_pb2.py "$work"/enlarger/v1/*_pb2.pyi; do
    # `from enlarger.v1 import common_pb2 as ...` -> `from . import common_pb2 as ...`
    sed -E 's/^from enlarger\.v1 import /from . import /' "$file" >"$out/$(basename "$file")"
done
if grep -n '^from enlarger\|^import enlarger' "$out"/*.py "$out"/*.pyi; then
    say "an import of the top-level enlarger.v1 package is left (above): update the rewrite"
    exit 1
fi
for file in "$out"/*; do say "wrote ${file#"$here"/} ($(wc -l <"$file") lines)"; done
