#!/usr/bin/env bash
# The fuzz smoke test (test/Frontend/onnx-fuzz.test):
#   run-fuzz.sh <bin dir> <work dir> <src root> [seconds]
# Builds a seed corpus of valid and broken tiny models, then runs the
# libFuzzer binary for a bounded time when it was built, and the replay
# driver with random mutations always. Exits non-zero on any crash.
set -euo pipefail
bin=$1 work=$2 src=$3 secs=${4:-20}
py=/usr/bin/python3
models=$src/python/onnx_models
rm -rf "$work" && mkdir -p "$work/seeds" "$work/corpus" "$work/artifacts"
for k in layer-fused layer-decomposed rms-div rms-recip rms-rsqrt rms-fused \
         rms-simplified; do
  $py "$models/common.py" norm-model "$k" -o "$work/seeds/norm-$k.onnx"
done
for v in $($py "$models/bad_models.py" --list); do
  $py "$models/bad_models.py" "$v" -o "$work/seeds/bad-$v.onnx"
done
# Whole 2-block models (when the contrib-op writer is there): the mutations
# that keep them parseable reach the walk, the matchers and the builder.
if [[ -f $models/contrib_models.py ]]; then
  for v in mha-gelu; do
    $py "$models/contrib_models.py" "$v" -o "$work/seeds/contrib-$v.onnx" \
      >/dev/null 2>&1 || true
  done
fi
# PyTorch exports (when torch is there): the weight-first RMSNorm with
# rotary and the expert loop (StaticEval, the rotary / KV-repeat / FFN
# probes, the MoE value kinds), and GShard's einsum dispatch. They are
# ~1 MB each, so the replay driver mutates them fewer times.
mkdir -p "$work/seeds-torch"
if $py -c "import torch" 2>/dev/null; then
  for st in llama-wfirst llama-issue gshard; do
    $py "$models/torch_models.py" "$st" --loss \
      -o "$work/seeds-torch/torch-$st.onnx" >/dev/null 2>&1 || true
  done
fi
cd "$work"
cp seeds/* corpus/   # libFuzzer adds what it finds to corpus/, not seeds/
cp seeds-torch/* corpus/ 2>/dev/null || true
if [[ -x $bin/moe-onnx-fuzz ]]; then
  echo "libFuzzer: $secs s"
  # Leaks: the MLIR context is deliberately kept for the whole run. A fixed
  # seed (MOE_FUZZ_SEED to vary it) makes CI's run repeatable: a crash it
  # finds is found again on the next run, not once by luck.
  ASAN_OPTIONS=detect_leaks=0 "$bin/moe-onnx-fuzz" corpus \
    -seed="${MOE_FUZZ_SEED:-1}" \
    -max_total_time="$secs" -runs=200000 -rss_limit_mb=2048 -timeout=20 \
    -artifact_prefix="$work/artifacts/" -print_final_stats=1 2>fuzz.log ||
    { tail -60 fuzz.log; echo "moe-onnx-fuzz found a crash"; exit 1; }
  grep -E "^stat::number_of_executed_units|Done" fuzz.log || true
else
  echo "libFuzzer binary not built; replay driver only"
fi
"$bin/moe-onnx-fuzz-replay" --mutations 300 --seed 7 seeds
if compgen -G "seeds-torch/*.onnx" >/dev/null; then
  "$bin/moe-onnx-fuzz-replay" --mutations 25 --seed 11 seeds-torch
fi
