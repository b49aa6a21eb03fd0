// RUN: moe-opt %S/Inputs/one-block.mlir --moe-microbatch --moe-build-train-step --moe-schedule --moe-autotune="profile=%S/../Analysis/Inputs/unit-profile.json method=grid" --moe-verify-schedule -o %t.mlir | FileCheck %s --check-prefix=GRID
// RUN: FileCheck %s --check-prefix=IR < %t.mlir
// RUN: moe-opt %S/Inputs/one-block.mlir --moe-microbatch --moe-build-train-step --moe-schedule --moe-autotune="profile=flowmoe-cluster1 method=bo samples=5 seed=3" --moe-verify-schedule -o /dev/null | FileCheck %s --check-prefix=BO
// RUN: moe-opt %S/Inputs/one-block.mlir --moe-flowmoe-pipeline="chunk-bytes=auto profile=flowmoe-cluster1 tune=random" -o /dev/null | FileCheck %s --check-prefix=PIPE
// RUN: not moe-opt %S/Inputs/one-block.mlir --moe-microbatch --moe-build-train-step --moe-schedule --moe-autotune="profile=flowmoe-cluster1 method=annealing" 2>&1 | FileCheck %s --check-prefix=METHOD
// RUN: not moe-opt %S/Inputs/one-block.mlir --moe-microbatch --moe-build-train-step --moe-schedule --moe-autotune 2>&1 | FileCheck %s --check-prefix=PROFILE
// RUN: not moe-opt %S/Inputs/one-block.mlir --moe-microbatch --moe-build-train-step --moe-schedule --moe-autotune="profile=flowmoe-cluster1 samples=0" 2>&1 | FileCheck %s --check-prefix=SAMPLES
// RUN: not moe-opt %S/Inputs/one-block.mlir --moe-flowmoe-pipeline --moe-autotune=profile=flowmoe-cluster1 2>&1 | FileCheck %s --check-prefix=SYNCED
// RUN: not moe-opt %S/Inputs/one-block.mlir --moe-microbatch --moe-build-train-step --moe-schedule --moe-chunk-gradients --moe-autotune=profile=flowmoe-cluster1 2>&1 | FileCheck %s --check-prefix=CHUNKED
// RUN: not moe-opt %S/Inputs/one-block.mlir --moe-autotune=profile=flowmoe-cluster1 2>&1 | FileCheck %s --check-prefix=NOSTEP

// Grid search: 8 evenly spaced S_p up to the block's all-reduce payload
// (wq 1024 + wk 512 + wv 512 + wo 1024 + norm 64 + gate 512 = 3648 bytes).
// GRID: autotune @m on profile unit, method grid, 8 samples over (0, 3648] bytes [simulated]
// GRID-NEXT: sample  1: S_p =        456 B
// GRID-NEXT: sample  2: S_p =        912 B
// GRID: sample  8: S_p =       3648 B
// GRID-NEXT: best:      S_p = {{ *[0-9]+}} B
// The step itself is chunked and synced.
// IR: moe.all_reduce {{.*}}chunk = 0>
// IR: moe.wait_event

// BO-COUNT-5: sample
// BO: best:
// PIPE: method random, 8 samples
// METHOD: moe-autotune: unknown method 'annealing' (expected bo, grid or random)
// PROFILE: moe-autotune: needs profile=<preset or JSON file>
// SAMPLES: moe-autotune: samples must be in [1, 1000], got 0
// SYNCED: is a sync: run moe-autotune before moe-insert-syncs (it inserts them)
// CHUNKED: moe-autotune: the step is already chunked
// NOSTEP: moe-autotune: no scheduled step (run moe-schedule first)
