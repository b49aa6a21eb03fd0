// The simulator on schedules whose timelines are computed by hand, with the
// unit profile (1 ns/flop, 1 ns/byte of memory traffic, 1 us/collective
// byte, no start-up costs).
// RUN: moe-opt %s --split-input-file --moe-simulate="profile=%S/Inputs/unit-profile.json json=true" -o /dev/null | FileCheck %s
// RUN: moe-opt %s --split-input-file --moe-simulate="profile=%S/Inputs/unit-profile.json" -o /dev/null | FileCheck %s --check-prefix=TEXT

shard.grid @g(shape = 4)

// Two independent tasks: a linear of 2*1*1000*500 = 1e6 flops = 1000 us on
// the compute stream and an all-reduce of 800 bytes = 800 us on the
// communication stream. They overlap completely.
// CHECK: "compute_busy_us": 1000,
// CHECK: "exposed_comm_us": 0,
// CHECK: "iteration_us": 1000,
// CHECK: "lower_bound_us": 1000,
// CHECK: "overlap_us": 800,
// TEXT: simulated @overlap (policy test) on profile unit [simulated, not measured]
// TEXT-NEXT: iteration time                1.000 ms
func.func @overlap(%x: tensor<1x1000xf32>, %w: tensor<1000x500xf32>, %g: tensor<200xf32>) -> (tensor<1x500xf32>, tensor<200xf32>) attributes {moe.schedule = "test"} {
  %y = moe.linear %x, %w {moe.stream = #moe.stream<compute>} : (tensor<1x1000xf32>, tensor<1000x500xf32>) -> tensor<1x500xf32>
  %r = moe.all_reduce %g on @g axes = [0] {moe.stream = #moe.stream<comm>} : tensor<200xf32>
  return %y, %r : tensor<1x500xf32>, tensor<200xf32>
}

// -----

shard.grid @g(shape = 4)

// A chain across streams: linear (1000 us), then the all-reduce of its
// 2000-byte result (2000 us), then a residual add of 3 x 2000 bytes of
// traffic (6 us). Nothing overlaps: 3006 us; communication fully exposed.
// CHECK: "comm_busy_us": 2000,
// CHECK: "exposed_comm_us": 2000,
// CHECK: "iteration_us": 3006,
// CHECK: "overlap_us": 0,
// CHECK: "peak_pending_gradient_bytes": 2000,
func.func @chain(%x: tensor<1x1000xf32>, %w: tensor<1000x500xf32>) -> tensor<1x500xf32> attributes {moe.schedule = "test"} {
  %y = moe.linear %x, %w {moe.stream = #moe.stream<compute>} : (tensor<1x1000xf32>, tensor<1000x500xf32>) -> tensor<1x500xf32>
  %e1 = moe.record_event on <compute>
  moe.wait_event %e1 on <comm>
  %r = moe.all_reduce %y on @g axes = [0] {moe.stream = #moe.stream<comm>} : tensor<1x500xf32>
  %e2 = moe.record_event on <comm>
  moe.wait_event %e2 on <compute>
  %z = arith.addf %r, %y {moe.stream = #moe.stream<compute>} : tensor<1x500xf32>
  return %z : tensor<1x500xf32>
}

// -----

shard.grid @g(shape = 4)

// The priority pool: an all-reduce chunk (400 B = 400 us) issued before a
// dispatch in program order, both ready at once. The dispatch sends
// E x C x M x 4 = 4 x 2 x 8 x 4 = 256 bytes, 3/4 of them to other ranks:
// 192 us. The pool runs the all-to-all first: dispatch [0, 192], chunk
// [192, 592].
// CHECK: "iteration_us": 592,
// (The order itself is checked on the trace in simulate-trace.mlir.)
func.func @pool(%g: tensor<100xf32>, %x: tensor<2x4x8xf32>, %i: tensor<2x4x1xi32>, %c: tensor<4xi32>) -> (tensor<100xf32>, tensor<1x8x8xf32>) attributes {moe.schedule = "test"} {
  %r = moe.all_reduce %g on @g axes = [0] bytes [0, 400] {moe.stream = #moe.stream<comm>} : tensor<100xf32>
  %d = moe.dispatch %x, %i, %c on @g axes = [0] experts = 4 capacity = 2 {moe.stream = #moe.stream<comm>} : (tensor<2x4x8xf32>, tensor<2x4x1xi32>, tensor<4xi32>) -> tensor<1x8x8xf32>
  return %r, %d : tensor<100xf32>, tensor<1x8x8xf32>
}

// -----

shard.grid @g(shape = 4)

// A chunk that waits for its gradient does not hold back the all-to-all
// behind it: the gradient (linear of 2*1000*100 flops = 200 us) gates only
// the low-priority queue. Dispatch [0, 192]; chunk [200, 600].
// CHECK: "iteration_us": 600,
// CHECK: "overlap_us": 192,
func.func @gated_chunk(%xw: tensor<1x1000xf32>, %w: tensor<1000x100xf32>, %x: tensor<2x4x8xf32>, %i: tensor<2x4x1xi32>, %c: tensor<4xi32>) -> (tensor<1x100xf32>, tensor<1x8x8xf32>) attributes {moe.schedule = "test"} {
  %y = moe.linear %xw, %w {moe.stream = #moe.stream<compute>} : (tensor<1x1000xf32>, tensor<1000x100xf32>) -> tensor<1x100xf32>
  %e = moe.record_event on <compute>
  moe.wait_event %e on <comm>
  %r = moe.all_reduce %y on @g axes = [0] {moe.stream = #moe.stream<comm>} : tensor<1x100xf32>
  %d = moe.dispatch %x, %i, %c on @g axes = [0] experts = 4 capacity = 2 {moe.stream = #moe.stream<comm>} : (tensor<2x4x8xf32>, tensor<2x4x1xi32>, tensor<4xi32>) -> tensor<1x8x8xf32>
  return %r, %d : tensor<1x100xf32>, tensor<1x8x8xf32>
}
