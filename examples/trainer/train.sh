#!/usr/bin/env bash
# The example trainer: a byte-level MoE language model (examples/trainer/
# make_model.py: 2 blocks, 8 experts, top-2) exported from PyTorch to ONNX,
# imported with its weights, scheduled by the FlowMoE pipeline and trained
# on 4 CPU ranks (mpirun -np 4) on examples/data/moe-notes.txt with AdamW,
# gradient clipping and a warm-up + cosine schedule (docs/optimizers.md),
# one loss line per step with a progress line on stderr. Halfway it saves a
# checkpoint and stops; a second moe-run resumes from it for the remaining
# steps, continuing bit-exactly (docs/checkpoint-format.md), and the
# trained weights are written back into the ONNX file (moe-export-onnx).
#
#   examples/trainer/train.sh [STEPS] [PIPELINE-OPTIONS]
#   e.g. examples/trainer/train.sh 40 "degree=2 policy=flowmoe lr=0.2"
#   (plain SGD: the pipeline's default optimizer)
#
# MOE_GRID (default 1x4: nodes x ranks per node) and MOE_MPIRUN (default
# "mpirun --allow-run-as-root --oversubscribe -np RANKS") place the ranks
# elsewhere: scripts/emulated-cluster.sh run sets both to train on an
# emulated cluster's nodes (docs/cluster.md). MOE_ROUTING_TRACE=FILE
# schedules the step with routing statistics and records the run's routing
# trace there (moe-run --routing-trace; docs/routing-trace-format.md).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="${MOE_BUILD_DIR:-$ROOT/build}"
STEPS="${1:-20}"
# AdamW, clipping, warm-up (2 updates, none for short runs) + cosine decay
# over the run (docs/optimizers.md).
WARMUP=$(( STEPS > 4 ? 2 : 0 ))
PIPELINE="${2:-degree=2 policy=flowmoe chunk-bytes=64KiB optimizer=adamw lr=0.02 weight-decay=0.01 clip-norm=1.0 lr-schedule=cosine warmup=$WARMUP total-steps=$STEPS min-lr=0.002}"
# A routing trace is recorded in one run (no checkpoint split), so that it
# covers every step.
TRACE_ARGS=()
if [[ -n "${MOE_ROUTING_TRACE:-}" ]]; then
  PIPELINE="$PIPELINE routing-stats=1"
  TRACE_ARGS=(--routing-trace "$MOE_ROUTING_TRACE")
fi
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
FIRST=$(( STEPS > 1 && ${#TRACE_ARGS[@]} == 0 ? STEPS / 2 : STEPS ))
CHECKPOINTS="$OUT/checkpoints"
rm -rf "$CHECKPOINTS"
"${MPIRUN[@]}" "$BUILD_DIR/bin/moe-run" "$OUT/byte-moe.step.mlir" \
  --data "$ROOT/examples/data/moe-notes.txt" --steps "$FIRST" --timeout 120 \
  --save-every "$FIRST" --checkpoint "$CHECKPOINTS" \
  ${TRACE_ARGS[@]+"${TRACE_ARGS[@]}"}
if (( STEPS > FIRST )); then
  echo "== checkpoint $(cat "$CHECKPOINTS/LATEST") saved; a new job resumes from it"
  "${MPIRUN[@]}" "$BUILD_DIR/bin/moe-run" "$OUT/byte-moe.step.mlir" \
    --data "$ROOT/examples/data/moe-notes.txt" --steps $(( STEPS - FIRST )) \
    --timeout 120 --resume "$CHECKPOINTS" \
    --save-every "$STEPS" --checkpoint "$CHECKPOINTS"
fi
# The trained weights back into the ONNX model (every rank's experts,
# the import's transposes undone): PyTorch and ONNX Runtime load them
# (docs/tools/moe-export-onnx.md).
"$BUILD_DIR/bin/moe-export-onnx" "$OUT/byte-moe.step.mlir" \
  --checkpoint "$CHECKPOINTS" -o "$OUT/byte-moe-trained.onnx" 2> /dev/null
echo "== trained weights of $(cat "$CHECKPOINTS/LATEST") exported to $OUT/byte-moe-trained.onnx"
