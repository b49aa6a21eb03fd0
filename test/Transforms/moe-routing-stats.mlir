// moe-routing-stats: one moe.routing_counts right after every forward
// token-choice dispatch, on its stream and task, reading its indices (no
// new event: the dispatch waited for them); the schedule still verifies.
// RUN: moe-opt %S/Inputs/one-block.mlir --moe-flowmoe-pipeline="degree=2 routing-stats=1" -o %t.mlir
// RUN: FileCheck %s < %t.mlir
// RUN: moe-opt %t.mlir --moe-routing-stats --moe-verify-schedule | FileCheck %s --check-prefix=TWICE
// RUN: moe-opt %S/Inputs/one-block.mlir --moe-flowmoe-pipeline="degree=2" | FileCheck %s --check-prefix=OFF
// RUN: not moe-opt %S/Inputs/one-block.mlir --moe-routing-stats 2>&1 | FileCheck %s --check-prefix=NOSTEP

// B = 4 in 2 micro-batches of 2 samples, 4 ranks, E = 8: 8 x 8 counts.
// CHECK: %[[I0:.*]], %{{.*}}, %[[C0:.*]] = moe.gate softmax_topk
// CHECK: moe.wait_event %{{.*}} on <comm>
// CHECK-NEXT: moe.dispatch %{{.*}}, %[[I0]], %[[C0]] {{.*}}moe.task = #moe.task<D, fwd, block = 0>}
// CHECK-NEXT: moe.routing_counts %[[I0]] on @cluster axes = [1] experts = 8 {moe.stream = #moe.stream<comm>, moe.task = #moe.task<D, fwd, block = 0>} : (tensor<2x8x2xi32>) -> tensor<8x8xi32>
// CHECK: %[[I1:.*]], %{{.*}}, %[[C1:.*]] = moe.gate softmax_topk {{.*}}micro = 1
// CHECK: moe.dispatch %{{.*}}, %[[I1]], %[[C1]] {{.*}}moe.task = #moe.task<D, fwd, block = 0, micro = 1>}
// CHECK-NEXT: moe.routing_counts %[[I1]] on @cluster axes = [1] experts = 8 {moe.stream = #moe.stream<comm>, moe.task = #moe.task<D, fwd, block = 0, micro = 1>}
// CHECK-NOT: moe.routing_counts

// TWICE-COUNT-2: moe.routing_counts
// TWICE-NOT: moe.routing_counts

// OFF-NOT: moe.routing_counts

// NOSTEP: moe-routing-stats: no scheduled step
