// RUN: moe-opt %S/Inputs/one-block.mlir --moe-microbatch=degree=1 --moe-build-train-step --moe-token-pipeline="degree=2 degree-bwd=4" | FileCheck %s
// RUN: moe-opt %S/Inputs/one-block.mlir --moe-microbatch=degree=1 --moe-build-train-step --moe-token-pipeline=degree=3 | FileCheck %s --check-prefix=UNEVEN
// RUN: moe-opt %S/Inputs/one-block.mlir --moe-microbatch=degree=1 --moe-build-train-step --moe-token-pipeline=degree=8 --moe-schedule=policy=pipe-moe --moe-print-schedule 2>&1 | FileCheck %s --check-prefix=R8
// RUN: not moe-opt %S/Inputs/one-block.mlir --moe-microbatch=degree=1 --moe-build-train-step --moe-token-pipeline=degree=9 2>&1 | FileCheck %s --check-prefix=OVER
// RUN: not moe-opt %S/Inputs/one-block.mlir --moe-token-pipeline=degree=2 2>&1 | FileCheck %s --check-prefix=NOSTEP
// RUN: not moe-opt %S/Inputs/one-block.mlir --moe-microbatch=degree=2 --moe-build-train-step --moe-token-pipeline=degree=2 2>&1 | FileCheck %s --check-prefix=MICRO
// RUN: not moe-opt %S/Inputs/one-block.mlir --moe-microbatch=degree=1 --moe-build-train-step --moe-schedule=policy=pipe-moe --moe-token-pipeline=degree=2 2>&1 | FileCheck %s --check-prefix=SCHED
// RUN: not moe-opt %S/Inputs/one-block.mlir --moe-token-pipeline=degree=0 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: %python %moe_src_root/python/gen_model_mlir.py gpt-moe-2block --capacity-factor dropless > %t.dropless.mlir
// RUN: not moe-opt %t.dropless.mlir --moe-microbatch=degree=1 --moe-build-train-step --moe-token-pipeline=degree=2 2>&1 | FileCheck %s --check-prefix=DROPLESS

// C = 8, G = 4: forward windows [0, 4) and [4, 8), 4 x 4 = 16 slots each.
// CHECK: %[[D0:.*]] = moe.dispatch {{.*}} capacity = 8 slots [0, 4] {moe.task = #moe.task<D, fwd, block = 0>} {{.*}} -> tensor<2x16x16xf32>
// CHECK: %[[D1:.*]] = moe.dispatch {{.*}} capacity = 8 slots [4, 4] {moe.task = #moe.task<D, fwd, block = 0, micro = 1>} {{.*}} -> tensor<2x16x16xf32>
// CHECK: %[[E0:.*]] = moe.expert relu %[[D0]] {{.*}}moe.task = #moe.task<E, fwd, block = 0>{{.*}} -> tensor<2x16x16xf32>
// CHECK: %[[E1:.*]] = moe.expert relu %[[D1]] {{.*}}moe.task = #moe.task<E, fwd, block = 0, micro = 1>
// CHECK: %[[C0:.*]] = moe.combine %[[E0]], {{.*}} slots [0, 4] {moe.task = #moe.task<C, fwd, block = 0>}
// CHECK: %[[C1:.*]] = moe.combine %[[E1]], {{.*}} slots [4, 4] {moe.task = #moe.task<C, fwd, block = 0, micro = 1>}
// The sum of the chunks belongs to the next task (HEAD after the last block).
// CHECK: %[[Y:.*]] = arith.addf %[[C0]], %[[C1]] {moe.task = #moe.task<HEAD, fwd>}
// CHECK: arith.addf %{{.*}}, %[[Y]]
// Backward windows [0, 2), [2, 4), [4, 6), [6, 8), cut from the forward chunks.
// CHECK: %[[W0:.*]] = moe.slot_window %[[E0]] groups = 4 from = 0 window [0, 2] {moe.task = #moe.task<C, bwd, block = 0>} : tensor<2x16x16xf32> -> tensor<2x8x16xf32>
// CHECK: moe.vjp (%{{.*}} = %[[W0]] : tensor<2x8x16xf32>
// CHECK: moe.combine {{.*}} slots [0, 2] :
// CHECK: moe.slot_window %[[E1]] groups = 4 from = 4 window [6, 2] {moe.task = #moe.task<C, bwd, block = 0, micro = 3>}
// CHECK-COUNT-3: arith.addf {{.*}} {moe.task = #moe.task<C, bwd, block = 0>} : tensor<4x8x2xf32>
// CHECK: moe.slot_window %[[D0]] groups = 4 from = 0 window [0, 2] {moe.task = #moe.task<E, bwd, block = 0>}
// CHECK: moe.dispatch {{.*}} slots [6, 2] :
// CHECK-COUNT-3: arith.addf {{.*}} {moe.task = #moe.task<D, bwd, block = 0>} : tensor<4x8x16xf32>
// CHECK-NOT: moe.dispatch {{.*}}capacity = 8 {
// CHECK-NOT: moe.dispatch {{.*}}capacity = 8 :

// Three windows of C = 8 differ by at most one slot: 2, 3, 3.
// UNEVEN: moe.dispatch {{.*}} slots [0, 2] {{.*}} -> tensor<2x8x16xf32>
// UNEVEN: moe.dispatch {{.*}} slots [2, 3] {{.*}} -> tensor<2x12x16xf32>
// UNEVEN: moe.dispatch {{.*}} slots [5, 3] {{.*}} -> tensor<2x12x16xf32>
// UNEVEN-NOT: moe.slot_window

// R = 8 with B = 4: Tutel's order, attention whole, 8 chunks of the MoE layer.
// R8: fwd compute: PRE AT_1^1 E_1^1 E_2^1 E_3^1 E_4^1 E_5^1 E_6^1 E_7^1 E_8^1 HEAD
// R8: fwd comm: D_1^1 D_2^1 D_3^1 D_4^1 D_5^1 D_6^1 D_7^1 D_8^1 C_1^1 C_2^1 C_3^1 C_4^1 C_5^1 C_6^1 C_7^1 C_8^1

// OVER: degree 9 exceeds the capacity C = 8 (a chunk would hold no slot)
// NOSTEP: moe-token-pipeline: not a training step (run moe-build-train-step first)
// MICRO: token chunks of a micro-batched step are not supported (use moe-microbatch degree=1)
// SCHED: moe-token-pipeline: the step is already scheduled (run it before moe-schedule)
// ZERO: moe-token-pipeline: degree must be >= 1 and degree-bwd >= 0, got 0 and 0
// DROPLESS: dropless routing without a bound has nothing to chunk: give it its variable-count form (moe-variable-dropless) or a capacity (moe-bound-dropless)
