"""Protobuf modules generated from proto/enlarger/v1 by scripts/gen-proto.sh. Do not edit."""
