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
echo "== predicted on FlowMoE Cluster 1 (simulated)"
"$OPT" "$OUT" --moe-simulate=profile=flowmoe-cluster1 -o /dev/null
# A real run needs as many ranks as the model's grid: the shipped 2-block
# model (2 x 2) on 4 CPU ranks, a few steps.
if [[ -x "$BUILD_DIR/bin/moe-run" && $# -eq 0 ]]; then
  SMALL="$BUILD_DIR/examples/gpt-moe-2block.step.mlir"
  "$OPT" "$ROOT/examples/gpt-moe-2block.mlir" --moe-flowmoe-pipeline="$PIPELINE" -o "$SMALL"
  echo "== mpirun -np 4 moe-run gpt-moe-2block (real execution on CPU ranks)"
  mpirun --allow-run-as-root --oversubscribe -np 4 "$BUILD_DIR/bin/moe-run" "$SMALL" --steps 3
  # The example trainer: a PyTorch MoE LM imported from ONNX with its
  # weights, trained on the shipped text for a few steps (the loss falls).
  echo "== examples/trainer/train.sh: ONNX -> moe -> FlowMoE step, trained on 4 CPU ranks"
  "$ROOT/examples/trainer/train.sh" "${MOE_TRAIN_STEPS:-10}"
  # The same model compiled ahead of time into a C++ library
  # (moe_compile_model) and trained by the example driver: no moe-run, the
  # same loss lines.
  echo "== examples/trainer/train-generated.sh: the same model as a generated C++ library, trained without moe-run"
  "$ROOT/examples/trainer/train-generated.sh" "${MOE_TRAIN_STEPS:-10}"
fi
