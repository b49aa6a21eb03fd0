// The simulator on a CPU cluster (docs/passes/moe-simulate.md): a running
// collective takes comm_cpu_share of the core from compute, a running
// compute task stretches collectives by comm_stretch, and op_scale
// stretches an op class's modelled time to the runtime's measured one.
// Timelines computed by hand on Inputs/unit-profile-cpu.json (the unit
// profile with comm_cpu_share 0.5 and op_scale moe.linear = 3); the
// unit profile's answers beside them show each feature moves the result.
// RUN: moe-opt %s --split-input-file --moe-simulate="profile=%S/Inputs/unit-profile-cpu.json json=true" -o /dev/null | FileCheck %s
// RUN: moe-opt %s --split-input-file --moe-simulate="profile=%S/Inputs/unit-profile.json json=true" -o /dev/null | FileCheck %s --check-prefix=UNIT
// With a share of 0 the event-driven schedule is the list scheduler's.
// RUN: sed 's/"comm_cpu_share": 0.5/"comm_cpu_share": 0/; s/"moe.linear": 3/"moe.linear": 1/' %S/Inputs/unit-profile-cpu.json > %t.json
// RUN: moe-opt %s --split-input-file --moe-simulate="profile=%t.json json=true" -o /dev/null | FileCheck %s --check-prefix=UNIT
// comm_stretch 2 alone (no share): a collective progresses at half rate
// while a compute task runs.
// RUN: sed 's/"comm_cpu_share": 0.5/"comm_cpu_share": 0, "comm_stretch": 2/' %S/Inputs/unit-profile-cpu.json > %t-stretch.json
// RUN: moe-opt %s --split-input-file --moe-simulate="profile=%t-stretch.json json=true" -o /dev/null | FileCheck %s --check-prefix=STRETCH
// Both: each side runs at half rate while the other does.
// RUN: sed 's/"comm_cpu_share": 0.5/"comm_cpu_share": 0.5, "comm_stretch": 2/' %S/Inputs/unit-profile-cpu.json > %t-both.json
// RUN: moe-opt %s --split-input-file --moe-simulate="profile=%t-both.json json=true" -o /dev/null | FileCheck %s --check-prefix=BOTH

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
// Stretch 2: the all-reduce does 600 us of its work by t = 1200 (the add
// at full rate), the other 200 alone: it ends at 1400 and occupies its
// stream that long.
// STRETCH: "comm_busy_us": 1400,
// STRETCH-NEXT: "compute_busy_us": 1200,
// STRETCH: "function": "overlap",
// STRETCH: "iteration_us": 1400,
// Both at half rate: the all-reduce ends at 1600, when the add has done
// 800 us; its last 400 at full rate: 2000.
// BOTH: "comm_busy_us": 1600,
// BOTH-NEXT: "compute_busy_us": 2000,
// BOTH: "function": "overlap",
// BOTH: "iteration_us": 2000,
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
// STRETCH: "function": "chain",
// STRETCH: "iteration_us": 5006,
// BOTH: "function": "chain",
// BOTH: "iteration_us": 5006,
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
// Stretch 2: 600 us of the first all-reduce by 1200, its last 200 alone
// (1400), then the second alone: 1800.
// STRETCH: "function": "two_collectives",
// STRETCH: "iteration_us": 1800,
// Both: the first all-reduce ends at 1600 (the add at 800 of 1200), the
// second and the add's last 400 run side by side at half rate: 2400.
// BOTH: "function": "two_collectives",
// BOTH: "iteration_us": 2400,
func.func @two_collectives(%a: tensor<1x100000xf32>, %b: tensor<1x100000xf32>, %g: tensor<200xf32>, %h: tensor<100xf32>) -> (tensor<1x100000xf32>, tensor<200xf32>, tensor<100xf32>) attributes {moe.schedule = "test"} {
  %z = arith.addf %a, %b {moe.stream = #moe.stream<compute>} : tensor<1x100000xf32>
  %r = moe.all_reduce %g on @g axes = [0] {moe.stream = #moe.stream<comm>} : tensor<200xf32>
  %s = moe.all_reduce %h on @g axes = [0] {moe.stream = #moe.stream<comm>} : tensor<100xf32>
  return %z, %r, %s : tensor<1x100000xf32>, tensor<200xf32>, tensor<100xf32>
}
