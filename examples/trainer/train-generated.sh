#!/usr/bin/env bash
# The example trainer without moe-run: the same byte-level MoE language
# model as train.sh (examples/trainer/make_model.py, exported from PyTorch
# to ONNX), compiled ahead of time by moe_compile_model into a C++ library
# (docs/codegen.md), linked with the example driver
# (examples/codegen/driver.cpp) and trained on 4 CPU ranks (mpirun -np 4) on
# examples/data/moe-notes.txt, starting from the ONNX weights (the
# parameter file the build writes). At run time there is no compiler, no
# ONNX and no MLIR: only the generated step and the runtime. It prints the
# loss lines moe-run --data prints for the same step (test/Examples/
# trainer-generated.test checks that they are equal).
#
#   examples/trainer/train-generated.sh [STEPS] [PIPELINE-OPTIONS]
#
# MOE_BUILD_DIR: the moe-mlir build (default build/); the example's files
# go to MOE_EXAMPLE_OUT (default $MOE_BUILD_DIR/examples/trainer-generated).
#
# MOE_GRID (default 1x4: nodes x ranks per node) and MOE_MPIRUN (default
# "mpirun --allow-run-as-root --oversubscribe -np RANKS") place the ranks
# elsewhere: scripts/emulated-cluster.sh run sets both to train on an
# emulated cluster's nodes (docs/cluster.md).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD_DIR="$(cd "${MOE_BUILD_DIR:-$ROOT/build}" && pwd)"
STEPS="${1:-20}"
# AdamW, clipping, warm-up (2 updates, none for short runs) + cosine decay
# over the run (docs/optimizers.md).
WARMUP=$(( STEPS > 4 ? 2 : 0 ))
PIPELINE="${2:-degree=2 policy=flowmoe chunk-bytes=64KiB optimizer=adamw lr=0.02 weight-decay=0.01 clip-norm=1.0 lr-schedule=cosine warmup=$WARMUP total-steps=$STEPS min-lr=0.002}"
GRID="${MOE_GRID:-1x4}"
RANKS=$(( ${GRID%x*} * ${GRID#*x} ))
read -r -a MPIRUN <<< "${MOE_MPIRUN:-mpirun --allow-run-as-root --oversubscribe -np $RANKS}"
OUT="${MOE_EXAMPLE_OUT:-$BUILD_DIR/examples/trainer-generated}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)" # absolute: the IR names the ONNX file by it

# Replaces $2 with $1 only when they differ: the library's build depends on
# the model's timestamp, so an unchanged model is not recompiled.
update() { if cmp -s "$1" "$2"; then rm -f "$1"; else mv -f "$1" "$2"; fi; }

mkdir -p "$OUT/new"
/usr/bin/python3 "$ROOT/examples/trainer/make_model.py" -o "$OUT/new/byte-moe.onnx" 2> "$OUT/export.log" ||
  { cat "$OUT/export.log" >&2; exit 1; }
update "$OUT/new/byte-moe.onnx" "$OUT/byte-moe.onnx"
# Imported for 1 x 4 (8 experts, 2 per rank); the model is dropless: the
# pipeline routes it with variable counts (moe-variable-dropless), as
# train.sh does.
"$BUILD_DIR/bin/moe-opt" "$OUT/byte-moe.onnx" --onnx-grid="$GRID" \
  -o "$OUT/new/byte-moe.mlir"
update "$OUT/new/byte-moe.mlir" "$OUT/byte-moe.mlir"

# moe_compile_model in a small CMake project against this build: schedule,
# EmitC, C++, the parameter file, the library, the driver.
RUNTIME_LIB="$BUILD_DIR/runtime/libmoe_runtime.a"
[[ -f "$RUNTIME_LIB" ]] || RUNTIME_LIB="$BUILD_DIR/lib/libmoe_runtime.a"
# The runtime was built with its CUDA backend when the archive has the
# loader of the backend's module (runtime/src/cuda/CudaModule.h).
CUDA=OFF
ar t "$RUNTIME_LIB" | grep -q 'CudaLoader\.cpp\.o$' && CUDA=ON
echo "== moe_compile_model: byte-moe -> FlowMoE step -> C++ library + driver ($PIPELINE)"
cmake -G Ninja -S "$ROOT/examples/trainer" -B "$OUT/generated" -DCMAKE_BUILD_TYPE=Release \
  -DMOE_SOURCE_DIR="$ROOT" -DMOE_BUILD_DIR="$BUILD_DIR" -DMOE_RUNTIME_CUDA="$CUDA" \
  -DMOE_TRAINER_MODEL="$OUT/byte-moe.mlir" -DMOE_TRAINER_PIPELINE="$PIPELINE" \
  > "$OUT/generated-cmake.log" || { cat "$OUT/generated-cmake.log" >&2; exit 1; }
cmake --build "$OUT/generated" -j "$(nproc)" > "$OUT/generated-build.log" ||
  { cat "$OUT/generated-build.log" >&2; exit 1; }

echo "== training $STEPS steps on $RANKS ranks: the generated step, no moe-run (grid $GRID)"
"${MPIRUN[@]}" "$OUT/generated/byte_moe-trainer" \
  --data "$ROOT/examples/data/moe-notes.txt" \
  --params "$OUT/generated/byte_moe.moe/byte_moe.params" \
  --steps "$STEPS" --timeout 120
