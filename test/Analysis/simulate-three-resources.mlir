// Three resources (FSMoE §4): compute, the inter-node link (dispatch and
// combine over one GPU per node, grid axis 0) and the intra-node link (ESP
// all-gather and reduce-scatter over a node, axis 1), in FSMoE's FIFO issue
// order for r = 2: inter D1 D2 C1 C2, intra AG1 AG2 RS1 RS2.
// RUN: moe-opt %s --moe-simulate="profile=%S/Inputs/two-node-unit-profile.json json=true" -o /dev/null | FileCheck %s
// RUN: moe-opt %s --moe-simulate="profile=%S/Inputs/two-node-unit-profile.json" --moe-trace=%t.json -o /dev/null | FileCheck %s --check-prefix=TEXT
// RUN: %python -c "import json,sys; t=json.load(open(sys.argv[1])); ev=[e for e in t['traceEvents'] if e['ph']=='X' and e['pid']==0]; print(sorted((e['ts'], e['name'], e['args']['link']) for e in ev)); print('tracks', sorted({a['args']['name'] for a in t['traceEvents'] if a['name']=='thread_name'}))" %t.json | FileCheck %s --check-prefix=TRACE
//
// Every task takes 64 us: a dispatch sends E C M 4 = 2*2*8*4 = 128 B, half
// of it to the other node; an all-gather's result and a reduce-scatter's
// operand hold 1*8*8*4 = 256 B at 0.25 us/B; an expert is 2*8*8*25*2 = 6400
// flops. By hand: D1 [0,64] D2 [64,128]; AG1 [64,128] AG2 [128,192];
// E1 [128,192] E2 [192,256]; RS1 queues behind AG2 [192,256], RS2
// [256,320]; C1 [256,320] C2 [320,384]. That is Algorithm 1's Case 4
// (t_a2a = t_ag, r t_exp = (r-1)(t_ag + t_rs)): 2*64 + 2*(64+64) = 384.
// CHECK: "comm_busy_us": 512,
// CHECK: "compute_busy_us": 128,
// CHECK: "inter_comm_busy_us": 256,
// CHECK: "intra_comm_busy_us": 256,
// CHECK: "iteration_us": 384,
// The busiest stream (each link 256 us), not compute + communication:
// CHECK: "lower_bound_us": 256,
// TEXT: inter-node links           0.256 ms ( 66.7%)
// TEXT-NEXT: intra-node links           0.256 ms ( 66.7%)
// TRACE: [(0, 'moe.dispatch', 'inter-node'), (64, 'moe.dispatch', 'inter-node'), (64, 'shard.all_gather', 'intra-node'), (128, 'moe.expert', 'none'), (128, 'shard.all_gather', 'intra-node'), (192, 'moe.expert', 'none'), (192, 'shard.reduce_scatter', 'intra-node'), (256, 'moe.combine', 'inter-node'), (256, 'shard.reduce_scatter', 'intra-node'), (320, 'moe.combine', 'inter-node')]
// TRACE: tracks ['comm (inter-node)', 'comm1 (intra-node)', 'compute']

shard.grid @g(shape = 2x2)
func.func @fsmoe_phase(%x1: tensor<1x4x8xf32>, %x2: tensor<1x4x8xf32>,
                       %i: tensor<1x4x1xi32>, %w: tensor<1x4x1xf32>,
                       %c: tensor<2xi32>, %up: tensor<1x8x25xf32>,
                       %down: tensor<1x25x8xf32>)
    -> (tensor<1x4x8xf32>, tensor<1x4x8xf32>) attributes {moe.schedule = "test"} {
  %d1 = moe.dispatch %x1, %i, %c on @g axes = [0] experts = 2 capacity = 2 {moe.stream = #moe.stream<comm>} : (tensor<1x4x8xf32>, tensor<1x4x1xi32>, tensor<2xi32>) -> tensor<1x4x8xf32>
  %ed1 = moe.record_event on <comm>
  %d2 = moe.dispatch %x2, %i, %c on @g axes = [0] experts = 2 capacity = 2 {moe.stream = #moe.stream<comm>} : (tensor<1x4x8xf32>, tensor<1x4x1xi32>, tensor<2xi32>) -> tensor<1x4x8xf32>
  %ed2 = moe.record_event on <comm>
  moe.wait_event %ed1 on <comm, 1>
  %g1 = shard.all_gather %d1 on @g grid_axes = [1] gather_axis = 1 {moe.stream = #moe.stream<comm, 1>} : tensor<1x4x8xf32> -> tensor<1x8x8xf32>
  %eg1 = moe.record_event on <comm, 1>
  moe.wait_event %ed2 on <comm, 1>
  %g2 = shard.all_gather %d2 on @g grid_axes = [1] gather_axis = 1 {moe.stream = #moe.stream<comm, 1>} : tensor<1x4x8xf32> -> tensor<1x8x8xf32>
  %eg2 = moe.record_event on <comm, 1>
  moe.wait_event %eg1 on <compute>
  %e1 = moe.expert gelu %g1 up(%up) down(%down) {moe.stream = #moe.stream<compute>} : (tensor<1x8x8xf32>, tensor<1x8x25xf32>, tensor<1x25x8xf32>) -> tensor<1x8x8xf32>
  %ee1 = moe.record_event on <compute>
  moe.wait_event %eg2 on <compute>
  %e2 = moe.expert gelu %g2 up(%up) down(%down) {moe.stream = #moe.stream<compute>} : (tensor<1x8x8xf32>, tensor<1x8x25xf32>, tensor<1x25x8xf32>) -> tensor<1x8x8xf32>
  %ee2 = moe.record_event on <compute>
  moe.wait_event %ee1 on <comm, 1>
  %s1 = shard.reduce_scatter %e1 on @g grid_axes = [1] scatter_axis = 1 {moe.stream = #moe.stream<comm, 1>} : tensor<1x8x8xf32> -> tensor<1x4x8xf32>
  %es1 = moe.record_event on <comm, 1>
  moe.wait_event %ee2 on <comm, 1>
  %s2 = shard.reduce_scatter %e2 on @g grid_axes = [1] scatter_axis = 1 {moe.stream = #moe.stream<comm, 1>} : tensor<1x8x8xf32> -> tensor<1x4x8xf32>
  %es2 = moe.record_event on <comm, 1>
  moe.wait_event %es1 on <comm>
  %c1 = moe.combine %s1, %i, %w, %c on @g axes = [0] experts = 2 capacity = 2 {moe.stream = #moe.stream<comm>} : (tensor<1x4x8xf32>, tensor<1x4x1xi32>, tensor<1x4x1xf32>, tensor<2xi32>) -> tensor<1x4x8xf32>
  moe.wait_event %es2 on <comm>
  %c2 = moe.combine %s2, %i, %w, %c on @g axes = [0] experts = 2 capacity = 2 {moe.stream = #moe.stream<comm>} : (tensor<1x4x8xf32>, tensor<1x4x1xi32>, tensor<1x4x1xf32>, tensor<2xi32>) -> tensor<1x4x8xf32>
  return %c1, %c2 : tensor<1x4x8xf32>, tensor<1x4x8xf32>
}
