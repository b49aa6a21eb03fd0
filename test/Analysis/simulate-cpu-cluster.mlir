// The simulator on a CPU cluster (docs/passes/moe-simulate.md): a running
// collective takes comm_cpu_share of the core from compute, and op_scale
// stretches an op class's modelled time to the runtime's measured one.
// Timelines computed by hand on Inputs/unit-profile-cpu.json (the unit
// profile with comm_cpu_share 0.5 and op_scale moe.linear = 3); the
// unit profile's answers beside them show each feature moves the result.
// RUN: moe-opt %s --split-input-file --moe-simulate="profile=%S/Inputs/unit-profile-cpu.json json=true" -o /dev/null | FileCheck %s
// RUN: moe-opt %s --split-input-file --moe-simulate="profile=%S/Inputs/unit-profile.json json=true" -o /dev/null | FileCheck %s --check-prefix=UNIT
// With a share of 0 the event-driven schedule is the list scheduler's.
// RUN: sed 's/"comm_cpu_share": 0.5/"comm_cpu_share": 0/; s/"moe.linear": 3/"moe.linear": 1/' %S/Inputs/unit-profile-cpu.json > %t.json
// RUN: moe-opt %s --split-input-file --moe-simulate="profile=%t.json json=true" -o /dev/null | FileCheck %s --check-prefix=UNIT

shard.grid @g(shape = 4)

// A residual add of 3 x 400000 bytes (1200 us) beside an all-reduce of 800
// bytes (800 us). While the all-reduce runs the add gets half the core:
// 400 us of its work by t = 800, the other 800 us at full rate: ends at
// 1600 (1200 without contention).
// (JSON keys print in alphabetical order.)
// CHECK: "comm_busy_us": 800,
// CHECK-NEXT: "compute_busy_us": 1600,
// CHECK: "function": "overlap",
// CHECK: "iteration_us": 1600,
// UNIT: "function": "overlap",
// UNIT: "iteration_us": 1200,
func.func @overlap(%a: tensor<1x100000xf32>, %b: tensor<1x100000xf32>, %g: tensor<200xf32>) -> (tensor<1x100000xf32>, tensor<200xf32>) attributes {moe.schedule = "test"} {
  %z = arith.addf %a, %b {moe.stream = #moe.stream<compute>} : tensor<1x100000xf32>
  %r = moe.all_reduce %g on @g axes = [0] {moe.stream = #moe.stream<comm>} : tensor<200xf32>
  return %z, %r : tensor<1x100000xf32>, tensor<200xf32>
}

// -----

shard.grid @g(shape = 4)

// No overlap, so no contention: linear (1e6 flops = 1000 us, x 3 by
// op_scale = 3000 us), the all-reduce of its 2000-byte result (2000 us;
// op_scale leaves collectives alone), the residual add (6 us): 5006 us
// (3006 on the unit profile).
// CHECK: "comm_busy_us": 2000,
// CHECK-NEXT: "compute_busy_us": 3006,
// CHECK: "function": "chain",
// CHECK: "iteration_us": 5006,
// UNIT: "function": "chain",
// UNIT: "iteration_us": 3006,
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

// Two collectives in a row on the communication stream (800 us, then 400
// us) beside a 1200-us add: rate 1/2 over [0, 1200] while they run, so
// 600 us of work is done at 1200 and the rest at full rate: 1800.
// CHECK: "function": "two_collectives",
// CHECK: "iteration_us": 1800,
// UNIT: "function": "two_collectives",
// UNIT: "iteration_us": 1200,
func.func @two_collectives(%a: tensor<1x100000xf32>, %b: tensor<1x100000xf32>, %g: tensor<200xf32>, %h: tensor<100xf32>) -> (tensor<1x100000xf32>, tensor<200xf32>, tensor<100xf32>) attributes {moe.schedule = "test"} {
  %z = arith.addf %a, %b {moe.stream = #moe.stream<compute>} : tensor<1x100000xf32>
  %r = moe.all_reduce %g on @g axes = [0] {moe.stream = #moe.stream<comm>} : tensor<200xf32>
  %s = moe.all_reduce %h on @g axes = [0] {moe.stream = #moe.stream<comm>} : tensor<100xf32>
  return %z, %r, %s : tensor<1x100000xf32>, tensor<200xf32>, tensor<100xf32>
}
