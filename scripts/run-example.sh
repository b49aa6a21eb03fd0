#!/usr/bin/env bash
# README command (a): set up, build, and run the main job on a shipped
# example: FlowMoE's GPT2-Tiny-MoE (Table 2) through the moe passes.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${MOE_BUILD_DIR:-$ROOT/build}"
"$ROOT/scripts/setup.sh"
MODEL="${1:-$ROOT/examples/gpt2-tiny-moe.mlir}"
OUT="$BUILD_DIR/examples/$(basename "${MODEL%.mlir}").out.mlir"
mkdir -p "$(dirname "$OUT")"
OPT="$BUILD_DIR/bin/moe-opt"
echo "== moe-opt $(basename "$MODEL") --moe-model-summary"
"$OPT" "$MODEL" --moe-model-summary -o /dev/null
PIPELINE="degree=2 chunk-bytes=2MiB policy=flowmoe"
echo "== moe-opt $(basename "$MODEL") --moe-flowmoe-pipeline=\"$PIPELINE\" --moe-print-schedule"
"$OPT" "$MODEL" --moe-flowmoe-pipeline="$PIPELINE" --moe-print-schedule -o "$OUT"
echo "== scheduled training step written to $OUT ($(wc -l < "$OUT") lines)"
