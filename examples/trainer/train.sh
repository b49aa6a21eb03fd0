#!/usr/bin/env bash
# The example trainer: a byte-level MoE language model (examples/trainer/
# make_model.py: 2 blocks, 8 experts, top-2) exported from PyTorch to ONNX,
# imported with its weights, scheduled by the FlowMoE pipeline and trained
# on 4 CPU ranks (mpirun -np 4) on examples/data/moe-notes.txt, one loss
# line per step with a progress line on stderr.
#
#   examples/trainer/train.sh [STEPS] [PIPELINE-OPTIONS]
#   e.g. examples/trainer/train.sh 40 "degree=2 policy=flowmoe lr=0.2"
#
# MOE_GRID (default 1x4: nodes x ranks per node) and MOE_MPIRUN (default
# "mpirun --allow-run-as-root --oversubscribe -np RANKS") place the ranks
# elsewhere: scripts/emulated-cluster.sh run sets both to train on an
# emulated cluster's nodes (docs/cluster.md).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${MOE_BUILD_DIR:-$ROOT/build}"
STEPS="${1:-20}"
PIPELINE="${2:-degree=2 policy=flowmoe chunk-bytes=64KiB lr=0.2}"
GRID="${MOE_GRID:-1x4}"
RANKS=$(( ${GRID%x*} * ${GRID#*x} ))
read -r -a MPIRUN <<< "${MOE_MPIRUN:-mpirun --allow-run-as-root --oversubscribe -np $RANKS}"
OUT="$BUILD_DIR/examples/trainer"
mkdir -p "$OUT"
/usr/bin/python3 "$ROOT/examples/trainer/make_model.py" -o "$OUT/byte-moe.onnx" 2> "$OUT/export.log" ||
  { cat "$OUT/export.log" >&2; exit 1; }
# 8 experts over 4 ranks. The model is dropless (Mixtral): the pipeline's
# moe-variable-dropless routes it with variable counts (only routed tokens
# travel and are computed; docs/passes/moe-variable-dropless.md).
"$BUILD_DIR/bin/moe-opt" "$OUT/byte-moe.onnx" --onnx-grid="$GRID" \
  --moe-model-summary -o "$OUT/byte-moe.mlir"
"$BUILD_DIR/bin/moe-opt" "$OUT/byte-moe.mlir" --moe-flowmoe-pipeline="$PIPELINE" -o "$OUT/byte-moe.step.mlir"
echo "== training $STEPS steps on $RANKS ranks: $PIPELINE (grid $GRID)"
"${MPIRUN[@]}" "$BUILD_DIR/bin/moe-run" "$OUT/byte-moe.step.mlir" \
  --data "$ROOT/examples/data/moe-notes.txt" --steps "$STEPS" --timeout 120
