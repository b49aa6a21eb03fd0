// RUN: moe-opt %S/Inputs/one-block.mlir --moe-build-train-step=lr=0.5 | FileCheck %s
// RUN: moe-opt %S/Inputs/one-block.mlir --moe-microbatch=degree=2 --moe-build-train-step | FileCheck %s --check-prefix=R2
// RUN: not moe-opt %S/Inputs/one-block.mlir --moe-build-train-step --moe-build-train-step 2>&1 | FileCheck %s --check-prefix=TWICE
// RUN: not moe-opt %S/Inputs/one-block.mlir --moe-build-train-step=lr=-1 2>&1 | FileCheck %s --check-prefix=LR
// RUN: echo 'func.func @f() { return }' | not moe-opt --moe-build-train-step 2>&1 | FileCheck %s --check-prefix=NOMODEL

// The step returns the loss and every updated parameter.
// CHECK: func.func @m({{.*}}) -> (tensor<f32>, tensor<32x16xf32>, tensor<16x16xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x16xf32>, tensor<16xf32>, tensor<16x8xf32>, tensor<2x16x32xf32>, tensor<2x32x16xf32>, tensor<16x32xf32>)
// The blocks are inlined; forward tasks keep their labels.
// CHECK-NOT: moe.block
// CHECK: moe.embedding {{.*}}moe.task = #moe.task<PRE, fwd>
// CHECK: moe.dispatch {{.*}}moe.task = #moe.task<D, fwd, block = 0>
// CHECK: %[[LOSS:.*]] = moe.cross_entropy {{.*}}moe.task = #moe.task<HEAD, fwd>
// Seed 1/P with P = 4 data-parallel ranks: gradients of the mean loss.
// CHECK: arith.constant {moe.task = #moe.task<HEAD, bwd>} dense<2.500000e-01> : tensor<f32>
// Backward tasks in reverse order, each a moe.vjp of its forward op.
// CHECK: moe.vjp {{.*}}moe.task = #moe.task<HEAD, bwd>
// CHECK-NEXT: moe.cross_entropy
// CHECK: moe.vjp {{.*}}moe.task = #moe.task<HEAD, bwd>
// CHECK-NEXT: moe.linear
// The residual add fans the cotangent out to both of its operands.
// CHECK: %[[C:.*]]:2 = moe.vjp ({{.*}}) cotangents({{.*}}) -> (tensor<2x32x16xf32>, tensor<4x8x2xf32>) attributes {moe.task = #moe.task<C, bwd, block = 0>}
// CHECK-NEXT: moe.combine
// CHECK: moe.vjp {{.*}}attributes {moe.task = #moe.task<E, bwd, block = 0>}
// CHECK-NEXT: moe.expert
// CHECK: moe.vjp {{.*}} -> (tensor<4x8x16xf32>) attributes {moe.task = #moe.task<D, bwd, block = 0>}
// CHECK-NEXT: moe.dispatch
// CHECK: moe.vjp {{.*}}attributes {moe.task = #moe.task<AT, bwd, block = 0>}
// CHECK-NEXT: moe.gate
// CHECK: moe.vjp {{.*}}attributes {moe.task = #moe.task<AT, bwd, block = 0>}
// CHECK-NEXT: moe.attention
// CHECK: moe.vjp {{.*}}attributes {moe.task = #moe.task<PRE, bwd>}
// CHECK-NEXT: moe.embedding
// AR^(1): the block's replicated weights (wq, wk, wv, wo, norm, gate) but not
// the experts; then the weights outside blocks (head, embedding).
// CHECK: moe.all_reduce {{.*}} on @cluster axes = [1] {moe.task = #moe.task<AR, bwd, block = 0>} : tensor<16x16xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x16xf32>, tensor<16xf32>, tensor<16x8xf32>{{$}}
// CHECK: moe.all_reduce {{.*}} {moe.task = #moe.task<AR, bwd>} : tensor<32x16xf32>, tensor<16x32xf32>{{$}}
// CHECK-COUNT-10: moe.sgd {{.*}} lr = 5.000000e-01 {moe.task = #moe.task<OPT, bwd>}
// CHECK: return %[[LOSS]],

// With two micro-batches the weights' gradients are accumulated.
// R2: moe.vjp {{.*}}moe.task = #moe.task<E, bwd, block = 0, micro = 1>
// R2: moe.vjp {{.*}}moe.task = #moe.task<E, bwd, block = 0>}
// R2: arith.addf {{.*}}moe.task = #moe.task<E, bwd, block = 0>} : tensor<2x16x32xf32>
// R2: moe.vjp {{.*}} -> (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x16xf32>, tensor<16xf32>) attributes {moe.task = #moe.task<AT, bwd, block = 0>}
// R2-NEXT: moe.attention
// R2: arith.addf {{.*}} : tensor<16x16xf32>
// R2: moe.all_reduce

// TWICE: moe-build-train-step: the function is already a training step
// LR: moe-build-train-step: lr must be positive, got -1
// NOMODEL: moe-build-train-step: no function carries a #moe.model
