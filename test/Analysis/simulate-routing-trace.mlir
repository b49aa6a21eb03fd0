// Trace-driven simulation (docs/load-aware.md §6): dispatch, expert and
// combine priced from a hand-made routing trace on 2 nodes x 1 rank
// (Inputs/imbalanced.trace), 10 ns/flop, 1 us per all-to-all byte, no
// start-up costs. A token row is M x 4 = 8 bytes; an expert row costs
// 2 x 2 x 3 x 2 = 24 flops (M = 2, H = 3, two GEMMs).
//
// Uniform routing (no trace): the padded exchange sends E C M 4 = 2 x 8 x
// 2 x 4 = 128 B, half to the other node: 64 us each way; the expert runs
// G C = 16 slots: 384 flops = 3.84 us. 64 + 3.84 + 64 = 131.84 us.
// RUN: moe-opt %s --moe-simulate="profile=%S/Inputs/two-node-unit-profile.json json=true" -o /dev/null | FileCheck %s --check-prefix=UNIFORM
// UNIFORM: "iteration_us": 131.8{{[0-9]*}},
//
// Step 1, imbalanced: both samples route all 4 tokens to expert 1 (rank
// 1). Rank 0 sends 4 rows to the other node (32 B: 32 us), rank 1
// receives them; rank 1's expert computes 8 rows (192 flops = 1.92 us),
// rank 0's none. 32 + 1.92 + 32 = 65.92 us.
// RUN: moe-opt %s --moe-simulate="profile=%S/Inputs/two-node-unit-profile.json json=true routing-trace=%S/Inputs/imbalanced.trace" -o /dev/null | FileCheck %s --check-prefix=STEP1
// STEP1: "busy_us_by_task": {
// STEP1-NEXT: "C": 32,
// STEP1-NEXT: "D": 32,
// STEP1-NEXT: "E": 1.9{{[0-9]*}}
// STEP1: "iteration_us": 65.9{{[0-9]*}},
// STEP1: "routing_step": 1,
// STEP1-NEXT: "routing_trace": "{{.*}}imbalanced.trace"
//
// Step 2: every token stays on its rank: nothing crosses a link, and each
// expert computes 4 rows (0.96 us).
// RUN: moe-opt %s --moe-simulate="profile=%S/Inputs/two-node-unit-profile.json routing-trace=%S/Inputs/imbalanced.trace routing-step=2" -o /dev/null | FileCheck %s --check-prefix=STEP2
// STEP2: routing from trace {{.*}}imbalanced.trace, step 2
// STEP2: iteration time                0.001 ms
// STEP2: inter-node links           0.000 ms
//
// Capacity 2 per (source rank, expert) drops 2 of rank 0's rows and 2 of
// rank 1's: 2 rows cross (16 us), rank 1's expert computes 4 (0.96 us).
// RUN: sed 's/capacity = 8/capacity = 2/; s/1x16x2xf32/1x4x2xf32/g' %s | moe-opt --moe-simulate="profile=%S/Inputs/two-node-unit-profile.json json=true routing-trace=%S/Inputs/imbalanced.trace" -o /dev/null | FileCheck %s --check-prefix=CAPPED
// CAPPED: "iteration_us": 32.9{{[0-9]*}},
//
// A trace that does not fit the step, or no such step, is an error naming
// both.
// RUN: not moe-opt %s --moe-simulate="profile=%S/Inputs/two-node-unit-profile.json routing-trace=%S/Inputs/imbalanced.trace routing-step=5" -o /dev/null 2>&1 | FileCheck %s --check-prefix=NOSTEP
// NOSTEP: moe-simulate: routing trace {{.*}}imbalanced.trace: has no step 5
// RUN: sed 's/1x4x2xf32/1x2x2xf32/g; s/1x4x1x/1x2x1x/g' %s | not moe-opt --moe-simulate="profile=%S/Inputs/two-node-unit-profile.json routing-trace=%S/Inputs/imbalanced.trace" -o /dev/null 2>&1 | FileCheck %s --check-prefix=SHAPE
// SHAPE: error: 'moe.dispatch' op routing trace {{.*}}imbalanced.trace: holds 2 samples of 4 tokens over 2 experts per record, the step's block 0 dispatch routes 2 x 1 samples of 2 tokens over 2
// RUN: not moe-opt %s --moe-simulate="profile=%S/Inputs/two-node-unit-profile.json routing-trace=%t.missing" -o /dev/null 2>&1 | FileCheck %s --check-prefix=MISSING
// MISSING: moe-simulate: {{.*}}missing

shard.grid @g(shape = 2x1)
func.func @moe_layer(%x: tensor<1x4x2xf32>, %i: tensor<1x4x1xi32>,
                     %w: tensor<1x4x1xf32>, %c: tensor<2xi32>,
                     %up: tensor<1x2x3xf32>, %down: tensor<1x3x2xf32>)
    -> tensor<1x4x2xf32> attributes {moe.schedule = "test"} {
  %d = moe.dispatch %x, %i, %c on @g axes = [0, 1] experts = 2 capacity = 8 {moe.stream = #moe.stream<comm>, moe.task = #moe.task<D, fwd, block = 0>} : (tensor<1x4x2xf32>, tensor<1x4x1xi32>, tensor<2xi32>) -> tensor<1x16x2xf32>
  %ed = moe.record_event on <comm>
  moe.wait_event %ed on <compute>
  %e = moe.expert relu %d up(%up) down(%down) {moe.stream = #moe.stream<compute>, moe.task = #moe.task<E, fwd, block = 0>} : (tensor<1x16x2xf32>, tensor<1x2x3xf32>, tensor<1x3x2xf32>) -> tensor<1x16x2xf32>
  %ee = moe.record_event on <compute>
  moe.wait_event %ee on <comm>
  %o = moe.combine %e, %i, %w, %c on @g axes = [0, 1] experts = 2 capacity = 8 {moe.stream = #moe.stream<comm>, moe.task = #moe.task<C, fwd, block = 0>} : (tensor<1x16x2xf32>, tensor<1x4x1xi32>, tensor<1x4x1xf32>, tensor<2xi32>) -> tensor<1x4x2xf32>
  return %o : tensor<1x4x2xf32>
}
