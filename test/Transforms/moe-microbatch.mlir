// RUN: moe-opt %S/Inputs/one-block.mlir --moe-microbatch=degree=2 | FileCheck %s
// RUN: moe-opt %S/Inputs/one-block.mlir --moe-microbatch=degree=4 | FileCheck %s --check-prefix=R4
// RUN: moe-opt %S/Inputs/one-block.mlir --moe-microbatch=degree=1 | FileCheck %s --check-prefix=R1
// RUN: not moe-opt %S/Inputs/one-block.mlir --moe-microbatch=degree=3 2>&1 | FileCheck %s --check-prefix=UNEVEN
// RUN: not moe-opt %S/Inputs/one-block.mlir --moe-microbatch=degree=0 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: not moe-opt %S/Inputs/one-block.mlir --moe-build-train-step --moe-microbatch 2>&1 | FileCheck %s --check-prefix=STEP

// Two micro-batches of 2 samples: capacity ceil(1.0*2*2*8/8) = 4 each,
// G x C = 4 x 4 = 16 slots per local expert.
// CHECK: moe.block 0 (%[[H:.*]] = %{{.*}} : tensor<4x8x16xf32>) -> tensor<4x8x16xf32> {
// CHECK: %[[P:.*]]:2 = moe.split %[[H]] : tensor<4x8x16xf32> -> tensor<2x8x16xf32>, tensor<2x8x16xf32>
// CHECK: moe.attention %[[P]]#0 {{.*}}moe.task = #moe.task<AT, fwd, block = 0>{{.*}} -> tensor<2x8x16xf32>
// CHECK: moe.gate softmax_topk {{.*}} capacity_factor = 1.0 capacity = 4 {moe.task = #moe.task<AT, fwd, block = 0>}
// CHECK: moe.dispatch {{.*}} capacity = 4 {moe.task = #moe.task<D, fwd, block = 0>} {{.*}} -> tensor<2x16x16xf32>
// CHECK: moe.expert relu {{.*}}moe.task = #moe.task<E, fwd, block = 0>
// CHECK: moe.combine {{.*}} capacity = 4 {moe.task = #moe.task<C, fwd, block = 0>} {{.*}} -> tensor<2x8x16xf32>
// The residual add after the combine starts the next task (HEAD after the last block).
// CHECK: arith.addf {{.*}}moe.task = #moe.task<HEAD, fwd>
// CHECK: moe.attention %[[P]]#1 {{.*}}moe.task = #moe.task<AT, fwd, block = 0, micro = 1>
// CHECK: moe.dispatch {{.*}}moe.task = #moe.task<D, fwd, block = 0, micro = 1>
// CHECK: moe.combine {{.*}}moe.task = #moe.task<C, fwd, block = 0, micro = 1>
// CHECK: %[[M:.*]] = moe.merge %{{.*}}, %{{.*}} : tensor<2x8x16xf32>, tensor<2x8x16xf32> -> tensor<4x8x16xf32>
// CHECK: moe.yield %[[M]]

// R4: moe.split %{{.*}} : tensor<4x8x16xf32> -> tensor<1x8x16xf32>, tensor<1x8x16xf32>, tensor<1x8x16xf32>, tensor<1x8x16xf32>
// R4-COUNT-4: moe.gate softmax_topk {{.*}} capacity = 2
// R4: moe.merge

// Degree 1 only labels the tasks.
// R1-NOT: moe.split
// R1: moe.gate {{.*}}capacity = 8 {moe.task = #moe.task<AT, fwd, block = 0>}

// UNEVEN: moe-microbatch: degree 3 does not divide the batch B = 4
// ZERO: moe-microbatch: degree must be >= 1, got 0
// STEP: moe-microbatch: the model has no moe.block to split
