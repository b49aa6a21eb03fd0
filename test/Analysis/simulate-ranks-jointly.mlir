// Every rank simulated at once on a CPU cluster with recorded routing
// (docs/passes/moe-simulate.md, "Ranks simulated jointly"): each rank's
// experts compute their own rows, a collective runs only once every rank
// of its group has posted it, and it is stretched by comm_stretch while
// ranks of its group compute (comm_stretch when all do,
// comm_stretch_partial when some do; absent, the latter is the former).
// Timelines computed by hand on
// Inputs/two-node-unit-profile.json with 1 us per flop and comm_stretch 2,
// two micro-batches of one layer on 2 nodes x 1 rank whose experts are
// busy on opposite ranks (Inputs/opposite-ranks.trace): micro-batch 0
// sends all 8 rows to rank 1, micro-batch 1 all to rank 0. Each exchange
// moves 4 rows of 8 bytes across the link (32 us); an expert row costs 24
// flops, so the busy rank's expert takes 192 us and the other's 0.
// RUN: sed 's/"beta_us_per_flop": 0.01/"beta_us_per_flop": 1.0/; s/"launch_us": 0,/"launch_us": 0, "comm_stretch": 2,/' %S/Inputs/two-node-unit-profile.json > %t-cpu.json
// RUN: moe-opt %s --moe-simulate="profile=%t-cpu.json json=true routing-trace=%S/Inputs/opposite-ranks.trace" -o /dev/null | FileCheck %s --check-prefix=JOINT
//
// Jointly, comm_stretch_partial absent (= 2; rank 0's timeline is
// reported; both ranks end at 320):
//   D0 0-32 on both ranks (nothing computes).
//   D1 posted at 32 on both; rank 1's E0 (192 us) runs 32-224, so D1 runs
//   at half rate: 32-96. Rank 0's E0 has no rows (ends at 32).
//   Rank 0 posts C0 at 96 and runs E1 96-288; rank 1 posts C0 only at 224
//   (after its E0); C0 then runs at half rate while rank 0's E1 computes:
//   224-288 on both (rank 0's C0 spans 96-288: 192 us, its wait included).
//   C1 288-320 (nothing computes).
// JOINT: "busy_us_by_task": {
// JOINT-NEXT: "C": 224,
// JOINT-NEXT: "D": 96,
// JOINT-NEXT: "E": 192
// JOINT: "iteration_us": 320,
//
// comm_stretch_partial (some ranks of the group compute, the others not)
// apart from comm_stretch (all compute). At 4: D1 runs at a quarter rate
// while only rank 1 computes, 32-160; rank 0 posts C0 at 160 and runs E1
// 160-352; C0 runs from 224 at a quarter rate while only rank 0 computes:
// 224-352; C1 352-384.
// RUN: sed 's/"launch_us": 0,/"launch_us": 0, "comm_stretch_partial": 4,/' %t-cpu.json > %t-partial4.json
// RUN: moe-opt %s --moe-simulate="profile=%t-partial4.json json=true routing-trace=%S/Inputs/opposite-ranks.trace" -o /dev/null | FileCheck %s --check-prefix=PARTIAL4
// PARTIAL4: "busy_us_by_task": {
// PARTIAL4-NEXT: "C": 224,
// PARTIAL4-NEXT: "D": 160,
// PARTIAL4-NEXT: "E": 192
// PARTIAL4: "iteration_us": 384,
// At 1 (a peer's compute does not slow a collective): D1 32-64; rank 0
// posts C0 at 64 and runs E1 64-256; C0 224-256; C1 256-288.
// RUN: sed 's/"launch_us": 0,/"launch_us": 0, "comm_stretch_partial": 1,/' %t-cpu.json > %t-partial1.json
// RUN: moe-opt %s --moe-simulate="profile=%t-partial1.json json=true routing-trace=%S/Inputs/opposite-ranks.trace" -o /dev/null | FileCheck %s --check-prefix=PARTIAL1
// PARTIAL1: "busy_us_by_task": {
// PARTIAL1-NEXT: "C": 224,
// PARTIAL1-NEXT: "D": 64,
// PARTIAL1-NEXT: "E": 192
// PARTIAL1: "iteration_us": 288,
//
// A partial stretch that is not a number in [1, 100] is an error naming it.
// RUN: sed 's/"launch_us": 0,/"launch_us": 0, "comm_stretch_partial": 0.5,/' %t-cpu.json > %t-low.json
// RUN: not moe-opt %s --moe-simulate="profile=%t-low.json" -o /dev/null 2>&1 | FileCheck %s --check-prefix=LOW
// LOW: comm_stretch_partial: must be between 1 and 100
// RUN: sed 's/"launch_us": 0,/"launch_us": 0, "comm_stretch_partial": 101,/' %t-cpu.json > %t-high.json
// RUN: not moe-opt %s --moe-simulate="profile=%t-high.json" -o /dev/null 2>&1 | FileCheck %s --check-prefix=HIGH
// HIGH: comm_stretch_partial: must be between 1 and 100
// RUN: sed 's/"launch_us": 0,/"launch_us": 0, "comm_stretch_partial": "2",/' %t-cpu.json > %t-text.json
// RUN: not moe-opt %s --moe-simulate="profile=%t-text.json" -o /dev/null 2>&1 | FileCheck %s --check-prefix=TEXT
// TEXT: comm_stretch_partial{{.*}}number
//
// One rank standing for all (the simulation without a CPU cluster's
// coupling: comm_stretch 1 here), each expert priced at its busiest
// rank's 192 us: D0 0-32, D1 32-64, E0 32-224, E1 224-416, C0 224-256, C1
// 416-448. With the coupling dropped and the stretch kept, C0 would run
// 224-288 and the step end at 448 too: the joint run's 320 needs each rank
// to compute only its own rows.
// RUN: sed 's/"beta_us_per_flop": 0.01/"beta_us_per_flop": 1.0/' %S/Inputs/two-node-unit-profile.json > %t-gpu.json
// RUN: moe-opt %s --moe-simulate="profile=%t-gpu.json json=true routing-trace=%S/Inputs/opposite-ranks.trace" -o /dev/null | FileCheck %s --check-prefix=ONE
// ONE: "busy_us_by_task": {
// ONE-NEXT: "C": 64,
// ONE-NEXT: "D": 64,
// ONE-NEXT: "E": 384
// ONE: "iteration_us": 448,

shard.grid @g(shape = 2x1)
func.func @two_micro(%x0: tensor<1x4x2xf32>, %i0: tensor<1x4x1xi32>,
                     %w0: tensor<1x4x1xf32>, %c0: tensor<2xi32>,
                     %x1: tensor<1x4x2xf32>, %i1: tensor<1x4x1xi32>,
                     %w1: tensor<1x4x1xf32>, %c1: tensor<2xi32>,
                     %up: tensor<1x2x3xf32>, %down: tensor<1x3x2xf32>)
    -> (tensor<1x4x2xf32>, tensor<1x4x2xf32>) attributes {moe.schedule = "test"} {
  %d0 = moe.dispatch %x0, %i0, %c0 on @g axes = [0, 1] experts = 2 capacity = 8 {moe.stream = #moe.stream<comm>, moe.task = #moe.task<D, fwd, block = 0, micro = 0>} : (tensor<1x4x2xf32>, tensor<1x4x1xi32>, tensor<2xi32>) -> tensor<1x16x2xf32>
  %ed0 = moe.record_event on <comm>
  %d1 = moe.dispatch %x1, %i1, %c1 on @g axes = [0, 1] experts = 2 capacity = 8 {moe.stream = #moe.stream<comm>, moe.task = #moe.task<D, fwd, block = 0, micro = 1>} : (tensor<1x4x2xf32>, tensor<1x4x1xi32>, tensor<2xi32>) -> tensor<1x16x2xf32>
  %ed1 = moe.record_event on <comm>
  moe.wait_event %ed0 on <compute>
  %e0 = moe.expert relu %d0 up(%up) down(%down) {moe.stream = #moe.stream<compute>, moe.task = #moe.task<E, fwd, block = 0, micro = 0>} : (tensor<1x16x2xf32>, tensor<1x2x3xf32>, tensor<1x3x2xf32>) -> tensor<1x16x2xf32>
  %ee0 = moe.record_event on <compute>
  moe.wait_event %ed1 on <compute>
  %e1 = moe.expert relu %d1 up(%up) down(%down) {moe.stream = #moe.stream<compute>, moe.task = #moe.task<E, fwd, block = 0, micro = 1>} : (tensor<1x16x2xf32>, tensor<1x2x3xf32>, tensor<1x3x2xf32>) -> tensor<1x16x2xf32>
  %ee1 = moe.record_event on <compute>
  moe.wait_event %ee0 on <comm>
  %o0 = moe.combine %e0, %i0, %w0, %c0 on @g axes = [0, 1] experts = 2 capacity = 8 {moe.stream = #moe.stream<comm>, moe.task = #moe.task<C, fwd, block = 0, micro = 0>} : (tensor<1x16x2xf32>, tensor<1x4x1xi32>, tensor<1x4x1xf32>, tensor<2xi32>) -> tensor<1x4x2xf32>
  moe.wait_event %ee1 on <comm>
  %o1 = moe.combine %e1, %i1, %w1, %c1 on @g axes = [0, 1] experts = 2 capacity = 8 {moe.stream = #moe.stream<comm>, moe.task = #moe.task<C, fwd, block = 0, micro = 1>} : (tensor<1x16x2xf32>, tensor<1x4x1xi32>, tensor<1x4x1xf32>, tensor<2xi32>) -> tensor<1x4x2xf32>
  return %o0, %o1 : tensor<1x4x2xf32>, tensor<1x4x2xf32>
}
