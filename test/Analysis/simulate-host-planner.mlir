// A host planner is a resource of its own (docs/host-planners.md): NetMoE's
// solve runs on #moe.stream<host>, started by an event after its counts and
// joined by an event before the placing combine; the simulator charges it
// the profile's measured solve time (host_planners) at the op's shape.
// RUN: moe-opt %s --moe-verify-schedule --moe-simulate="profile=%S/Inputs/host-planner-fast.json json=true" --moe-trace=%t.fast.json -o /dev/null | FileCheck %s --check-prefix=FAST
// RUN: moe-opt %s --moe-simulate="profile=%S/Inputs/host-planner-slow.json json=true" --moe-trace=%t.slow.json -o /dev/null | FileCheck %s --check-prefix=SLOW
// RUN: moe-opt %s --moe-simulate="profile=%S/Inputs/host-planner-slow.json" -o /dev/null | FileCheck %s --check-prefix=TEXT
// RUN: %python -c "import json,sys; t=json.load(open(sys.argv[1])); ev=[e for e in t['traceEvents'] if e['ph']=='X' and e['pid']==0]; print(sorted((e['ts'], e['ts'] + e['dur'], e['name'], e['cat']) for e in ev)); print('tracks', sorted({a['args']['name'] for a in t['traceEvents'] if a['name']=='thread_name'}))" %t.fast.json | FileCheck %s --check-prefix=TRACE-FAST
// RUN: %python -c "import json,sys; t=json.load(open(sys.argv[1])); ev=[e for e in t['traceEvents'] if e['ph']=='X' and e['pid']==0]; print(sorted((e['ts'], e['ts'] + e['dur'], e['name'], e['cat']) for e in ev))" %t.slow.json | FileCheck %s --check-prefix=TRACE-SLOW
// A profile without the planner's measured solve cannot price it:
// RUN: not moe-opt %s --moe-simulate=profile=%S/Inputs/two-node-unit-profile.json -o /dev/null 2>&1 | FileCheck %s --check-prefix=UNMEASURED
//
// By hand (2 x 2 ranks, B = 2 samples of N = 16 tokens, k = 2, M = 8):
// - counts: an all-gather of the (G B) x E = 8 x 8 i32 counts, 256 B at
//   0.25 us/B over both nodes = 64 us: comm [0, 64];
// - the experts: 2 local experts x 128 rows x M 8 x H 32, two GEMMs,
//   2 * 2*128*8*32 * 2 = 262144 flops at 1/1024 us = 256 us: compute [0, 256];
// - the solve: 100 us (fast profile) or 500 us (slow), measured for
//   samples 8, nodes 2, ranks_per_node 2, experts 8; started by the counts'
//   event: host [64, 164] or [64, 564] (the 1024-sample entry, 9999 us,
//   must not be picked);
// - the placing combine: k B N M 4 = 2048 B, of which half leaves the node,
//   at 1/8 us/B = 128 us, after the experts' and the solve's events:
//   fast: [max(256, 164), +128] = [256, 384] -- the solve is hidden;
//   slow: [max(256, 564), +128] = [564, 692] -- the join delays it 308 us.
// FAST: "compute_busy_us": 256,
// FAST: "host_busy_us": 100,
// FAST: "iteration_us": 384,
// SLOW: "compute_busy_us": 256,
// SLOW: "host_busy_us": 500,
// SLOW: "iteration_us": 692,
// TEXT: host planners busy       0.500 ms ( 72.3%)
// TEXT: tasks                    4 (1 compute, 2 communication, 1 host planner)
// TRACE-FAST: [(0, 64, 'moe.routing_counts', 'comm'), (0, 256, 'moe.expert', 'compute'), (64, 164, 'moe.plan_placement', 'host'), (256, 384, 'moe.combine', 'comm')]
// TRACE-FAST: tracks ['comm', 'compute', 'host']
// TRACE-SLOW: [(0, 64, 'moe.routing_counts', 'comm'), (0, 256, 'moe.expert', 'compute'), (64, 564, 'moe.plan_placement', 'host'), (564, 692, 'moe.combine', 'comm')]
// UNMEASURED: error: 'moe.plan_placement' op is a host planner with no measured solve time in profile 'two-node-unit': add {"experts": 8, "nodes": 2, "ranks_per_node": 2, "samples": 8, "us": <time>} to host_planners."moe.plan_placement"

shard.grid @grid(shape = 2x2)
func.func @netmoe_block(%idx: tensor<2x16x2xi32>, %w: tensor<2x16x2xf32>,
                        %cnt: tensor<8xi32>, %rows: tensor<2x4xi32>,
                        %x: tensor<2x128x8xf32>, %up: tensor<2x8x32xf32>,
                        %down: tensor<2x32x8xf32>)
    -> tensor<2x16x8xf32> attributes {moe.schedule = "test"} {
  %n = moe.routing_counts %idx on @grid axes = [0, 1] experts = 8 {moe.stream = #moe.stream<comm>} : (tensor<2x16x2xi32>) -> tensor<8x8xi32>
  %counted = moe.record_event on <comm>
  // The start: the solve waits for the counts, not for the experts.
  moe.wait_event %counted on <host>
  %p = moe.plan_placement %n on @grid axes = [0, 1] experts = 8 {moe.stream = #moe.stream<host>} : (tensor<8x8xi32>) -> tensor<8xi32>
  %solved = moe.record_event on <host>
  %y = moe.expert gelu %x up(%up) down(%down) {moe.stream = #moe.stream<compute>} : (tensor<2x128x8xf32>, tensor<2x8x32xf32>, tensor<2x32x8xf32>) -> tensor<2x128x8xf32>
  %computed = moe.record_event on <compute>
  moe.wait_event %computed on <comm>
  // The join: the placing combine is the placement's first use.
  moe.wait_event %solved on <comm>
  %c = moe.combine %y, %idx, %w, %cnt rows(%rows) to(%p) on @grid axes = [0, 1] experts = 8 {moe.stream = #moe.stream<comm>} : (tensor<2x128x8xf32>, tensor<2x16x2xi32>, tensor<2x16x2xf32>, tensor<8xi32>, tensor<2x4xi32>, tensor<8xi32>) -> tensor<2x16x8xf32>
  return %c : tensor<2x16x8xf32>
}
