// RUN: moe-opt %s --split-input-file --moe-insert-syncs | FileCheck %s
// RUN: moe-opt %S/Inputs/one-block.mlir --moe-microbatch=degree=2 --moe-build-train-step --moe-schedule --moe-insert-syncs --moe-verify-schedule -o /dev/null
// RUN: moe-opt %S/Inputs/one-block.mlir --moe-microbatch=degree=2 --moe-build-train-step --moe-schedule --moe-insert-syncs > %t.once.mlir
// RUN: moe-opt %t.once.mlir --moe-insert-syncs > %t.twice.mlir
// RUN: grep -c wait_event %t.once.mlir | FileCheck %s --check-prefix=COUNT
// RUN: diff %t.once.mlir %t.twice.mlir
// RUN: not moe-opt %S/Inputs/one-block.mlir --moe-insert-syncs 2>&1 | FileCheck %s --check-prefix=NOSTEP

shard.grid @g(shape = 4)

// A value produced on the compute stream and used on the communication
// stream needs one record/wait pair; a second use after it does not.
// CHECK-LABEL: func.func @cross
func.func @cross(%x: tensor<8xf32>) -> tensor<8xf32> attributes {moe.schedule = "test"} {
  // CHECK: %[[A:.*]] = arith.addf {{.*}}<compute>
  // CHECK-NEXT: %[[E:.*]] = moe.record_event on <compute>
  // CHECK-NEXT: moe.wait_event %[[E]] on <comm>
  // CHECK-NEXT: moe.all_reduce %[[A]]
  // CHECK-NOT: moe.wait_event
  // CHECK: return
  %a = arith.addf %x, %x {moe.stream = #moe.stream<compute>} : tensor<8xf32>
  %r = moe.all_reduce %a on @g axes = [0] {moe.stream = #moe.stream<comm>} : tensor<8xf32>
  %s = moe.all_reduce %a on @g axes = [0] {moe.stream = #moe.stream<comm>} : tensor<8xf32>
  %t = arith.addf %a, %a {moe.stream = #moe.stream<compute>} : tensor<8xf32>
  return %s : tensor<8xf32>
}

// -----

shard.grid @g(shape = 4)

// The consumer needs two producers of the compute stream: it waits only
// for the later one (stream order covers the earlier).
// CHECK-LABEL: func.func @latest
func.func @latest(%x: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) attributes {moe.schedule = "test"} {
  // CHECK: arith.addf
  // CHECK-NEXT: %[[B:.*]] = arith.mulf
  // CHECK-NEXT: %[[E:.*]] = moe.record_event on <compute>
  // CHECK-NEXT: moe.wait_event %[[E]] on <comm>
  // CHECK-NEXT: moe.all_reduce
  // CHECK-NOT: record_event
  %a = arith.addf %x, %x {moe.stream = #moe.stream<compute>} : tensor<8xf32>
  %b = arith.mulf %x, %x {moe.stream = #moe.stream<compute>} : tensor<8xf32>
  %r:2 = moe.all_reduce %a, %b on @g axes = [0] {moe.stream = #moe.stream<comm>} : tensor<8xf32>, tensor<8xf32>
  return %r#0, %r#1 : tensor<8xf32>, tensor<8xf32>
}

// -----

shard.grid @g(shape = 4)

// Transitive: comm waited for compute's %a; compute then waits for comm's
// %r, which implies nothing new about %a. A later comm use of %a needs no
// wait, and neither does a compute use of a comm value produced before the
// point compute already waited for.
// CHECK-LABEL: func.func @transitive
func.func @transitive(%x: tensor<8xf32>) -> tensor<8xf32> attributes {moe.schedule = "test"} {
  // CHECK: moe.wait_event {{.*}} on <comm>
  // CHECK: %[[R:.*]] = moe.all_reduce
  // CHECK-NEXT: %[[S:.*]] = moe.all_reduce
  // CHECK-NEXT: %[[E:.*]] = moe.record_event on <comm>
  // CHECK-NEXT: moe.wait_event %[[E]] on <compute>
  // CHECK-NEXT: arith.addf %[[S]]
  // CHECK-NEXT: arith.addf %[[R]]
  // CHECK-NOT: moe.wait_event
  // CHECK: return
  %a = arith.addf %x, %x {moe.stream = #moe.stream<compute>} : tensor<8xf32>
  %r = moe.all_reduce %a on @g axes = [0] {moe.stream = #moe.stream<comm>} : tensor<8xf32>
  %s = moe.all_reduce %x on @g axes = [0] {moe.stream = #moe.stream<comm>} : tensor<8xf32>
  %u = arith.addf %s, %s {moe.stream = #moe.stream<compute>} : tensor<8xf32>
  %v = arith.addf %r, %u {moe.stream = #moe.stream<compute>} : tensor<8xf32>
  %w = moe.all_reduce %a on @g axes = [0] {moe.stream = #moe.stream<comm>} : tensor<8xf32>
  return %v : tensor<8xf32>
}

// -----

shard.grid @g(shape = 4)

// Same stream: no event at all.
// CHECK-LABEL: func.func @same
// CHECK-NOT: moe.record_event
func.func @same(%x: tensor<8xf32>) -> tensor<8xf32> attributes {moe.schedule = "test"} {
  %a = moe.all_reduce %x on @g axes = [0] {moe.stream = #moe.stream<comm>} : tensor<8xf32>
  %b = moe.all_reduce %a on @g axes = [0] {moe.stream = #moe.stream<comm>} : tensor<8xf32>
  return %b : tensor<8xf32>
}

// Running the pass twice adds nothing: existing waits already cover.
// COUNT: {{[1-9][0-9]*}}
// NOSTEP: moe-insert-syncs: no scheduled step (run moe-schedule first)
