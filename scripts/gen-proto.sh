#!/usr/bin/env bash
# Regenerates the Swift sources for the wire protocol from proto/enlarger/v1/*.proto.
#
# Uses the system `protoc` and a `protoc-gen-swift` built from swift-protobuf at the same
# version the package depends on, so generated code and runtime always match. Everything it
# builds lives in .build-protoc/ (git-ignored). Safe to run repeatedly: the plugin is only
# rebuilt when missing or out of date, and the output directory is rewritten from scratch.
#
# Environment:
#   SWIFT_PROTOBUF_VERSION  tag of swift-protobuf to build the plugin from (default 1.39.0)
#   SWIFT_PROTOBUF_URL      where to clone it from (default the GitHub repository; git's
#                           url.<base>.insteadOf settings apply, so a local mirror works)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

version="${SWIFT_PROTOBUF_VERSION:-1.39.0}"
url="${SWIFT_PROTOBUF_URL:-https://github.com/apple/swift-protobuf}"
work=".build-protoc"
checkout="$work/swift-protobuf-$version"
plugin_build="$work/plugin-$version"
proto_root="proto"
out="Sources/EnlargerProtocol/Generated"

say() { printf 'gen-proto: %s\n' "$*"; }

command -v protoc >/dev/null || { say "protoc not found (Debian: apt-get install protobuf-compiler)"; exit 1; }
command -v swift >/dev/null || { say "swift not found"; exit 1; }

if [[ -d "$checkout/.git" ]]; then
    say "using swift-protobuf $version checkout in $checkout"
else
    say "cloning swift-protobuf $version into $checkout"
    mkdir -p "$work"
    git -c advice.detachedHead=false clone --quiet --depth 1 --branch "$version" "$url" "$checkout"
fi

say "building protoc-gen-swift (release) in $plugin_build"
swift build --package-path "$checkout" --scratch-path "$plugin_build" -c release \
    --product protoc-gen-swift 2>&1 | sed 's/^/    /' | tail -n 3
plugin="$(swift build --package-path "$checkout" --scratch-path "$plugin_build" -c release \
    --show-bin-path)/protoc-gen-swift"
[[ -x "$plugin" ]] || { say "plugin missing at $plugin"; exit 1; }

protos=()
while IFS= read -r -d '' file; do protos+=("${file#"$proto_root"/}"); done \
    < <(find "$proto_root" -name '*.proto' -print0 | sort -z)
[[ ${#protos[@]} -gt 0 ]] || { say "no .proto files under $proto_root"; exit 1; }

say "protoc $(protoc --version | awk '{print $2}'): ${protos[*]} -> $out"
rm -rf "$out"
mkdir -p "$out"
protoc --plugin=protoc-gen-swift="$plugin" \
    --proto_path="$proto_root" \
    --swift_opt=Visibility=Public \
    --swift_opt=FileNaming=DropPath \
    --swift_out="$out" \
    "${protos[@]}"

for file in "$out"/*.swift; do say "wrote $file ($(wc -l <"$file") lines)"; done
