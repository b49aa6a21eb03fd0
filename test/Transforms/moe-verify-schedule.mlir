// RUN: moe-opt %s --split-input-file --moe-verify-schedule --verify-diagnostics
// Every policy's output of the pipeline verifies:
// RUN: for p in pipe-moe flowmoe-at flowmoe centralized-ar; do moe-opt %moe_src_root/examples/gpt-moe-2block.mlir --moe-flowmoe-pipeline="degree=2 chunk-bytes=64KiB policy=$p" -o /dev/null || exit 1; done
// RUN: moe-opt %moe_src_root/examples/gpt-moe-2block.mlir --moe-flowmoe-pipeline="degree=1 policy=vanilla" -o /dev/null
// RUN: moe-opt %moe_src_root/examples/mixtral-style-2block.mlir --moe-flowmoe-pipeline="degree=2" -o /dev/null
// Without syncs, a scheduled step is rejected.
// RUN: not moe-opt %moe_src_root/examples/gpt-moe-2block.mlir --moe-microbatch --moe-build-train-step --moe-schedule --moe-verify-schedule 2>&1 | FileCheck %s --check-prefix=NOSYNC
// NOSYNC: error: 'moe.dispatch' op uses a value produced by 'moe.norm' (AT_1^1) on #moe.stream<compute> without waiting for it
// NOSYNC: note: producer: 'moe.norm' (AT_1^1) on #moe.stream<compute>
// RUN: echo 'func.func @f() { return }' | not moe-opt --moe-verify-schedule 2>&1 | FileCheck %s --check-prefix=NONE
// NONE: no scheduled step

shard.grid @g(shape = 4)
func.func @missing_wait(%x: tensor<8xf32>) -> tensor<8xf32> attributes {moe.schedule = "test"} {
  // expected-note @+1 {{producer: 'arith.addf' on #moe.stream<compute>}}
  %a = arith.addf %x, %x {moe.stream = #moe.stream<compute>} : tensor<8xf32>
  // expected-error @+1 {{uses a value produced by 'arith.addf' on #moe.stream<compute> without waiting for it}}
  %r = moe.all_reduce %a on @g axes = [0] {moe.stream = #moe.stream<comm>} : tensor<8xf32>
  return %r : tensor<8xf32>
}

// -----

shard.grid @g(shape = 4)
// A wait recorded before the producer does not order it.
func.func @early_record(%x: tensor<8xf32>) -> tensor<8xf32> attributes {moe.schedule = "test"} {
  %e = moe.record_event on <compute>
  // expected-note @+1 {{producer}}
  %a = arith.addf %x, %x {moe.stream = #moe.stream<compute>} : tensor<8xf32>
  moe.wait_event %e on <comm>
  // expected-error @+1 {{without waiting for it}}
  %r = moe.all_reduce %a on @g axes = [0] {moe.stream = #moe.stream<comm>} : tensor<8xf32>
  return %r : tensor<8xf32>
}

// -----

shard.grid @g(shape = 4)
func.func @ok(%x: tensor<8xf32>) -> tensor<8xf32> attributes {moe.schedule = "test"} {
  %a = arith.addf %x, %x {moe.stream = #moe.stream<compute>} : tensor<8xf32>
  %e = moe.record_event on <compute>
  moe.wait_event %e on <comm>
  %r = moe.all_reduce %a on @g axes = [0] {moe.stream = #moe.stream<comm>} : tensor<8xf32>
  return %r : tensor<8xf32>
}

// -----

shard.grid @g(shape = 4)
func.func @unrecorded(%x: tensor<8xf32>, %e: !moe.event) -> tensor<8xf32> attributes {moe.schedule = "test"} {
  // expected-error @+1 {{waits on an event that is not recorded before it in this step; the stream could wait forever}}
  moe.wait_event %e on <comm>
  %r = moe.all_reduce %x on @g axes = [0] {moe.stream = #moe.stream<comm>} : tensor<8xf32>
  return %r : tensor<8xf32>
}

// -----

shard.grid @g(shape = 4)
func.func @no_stream(%x: tensor<8xf32>) -> tensor<8xf32> attributes {moe.schedule = "test"} {
  // expected-error @+1 {{is not on a stream in a scheduled step}}
  %a = arith.addf %x, %x : tensor<8xf32>
  return %a : tensor<8xf32>
}

// -----

shard.grid @g(shape = 4)
// Two all-reduces of one group on two communication streams with nothing
// ordering them: ranks may issue them in different orders.
func.func @unordered(%x: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) attributes {moe.schedule = "test"} {
  // expected-note @+1 {{other collective: 'moe.all_reduce' on #moe.stream<comm>}}
  %a = moe.all_reduce %x on @g axes = [0] {moe.stream = #moe.stream<comm>} : tensor<8xf32>
  // expected-error @+1 {{is a collective on the same group as 'moe.all_reduce' on #moe.stream<comm> but nothing orders the two; ranks may issue them in different orders and deadlock}}
  %b = moe.all_reduce %x on @g axes = [0] {moe.stream = #moe.stream<comm, 1>} : tensor<8xf32>
  return %a, %b : tensor<8xf32>, tensor<8xf32>
}

// -----

shard.grid @g(shape = 4)
// Ordered by an event: fine. Different groups: no constraint.
func.func @ordered(%x: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) attributes {moe.schedule = "test"} {
  %a = moe.all_reduce %x on @g axes = [0] {moe.stream = #moe.stream<comm>} : tensor<8xf32>
  %e = moe.record_event on <comm>
  moe.wait_event %e on <comm, 1>
  %b = moe.all_reduce %x on @g axes = [0] {moe.stream = #moe.stream<comm, 1>} : tensor<8xf32>
  %c = shard.all_gather %x on @g grid_axes = [0] gather_axis = 0 {moe.stream = #moe.stream<comm, 2>} : tensor<8xf32> -> tensor<32xf32>
  %d = moe.all_reduce %x on @g axes = [0] {moe.stream = #moe.stream<comm, 1>} : tensor<8xf32>
  return %a, %b, %d : tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}

// -----

// Host planners (docs/host-planners.md): the start (after the counts), the
// join (before the placement's first use), and the join after the start.
shard.grid @g(shape = 2x2)
func.func @planner_starts_before_counts(%idx: tensor<2x16x2xi32>, %labels: tensor<2x16xi64>) -> tensor<2x16xi64> attributes {moe.schedule = "test"} {
  // expected-note @+1 {{producer: 'moe.routing_counts' on #moe.stream<comm>}}
  %n = moe.routing_counts %idx on @g axes = [0, 1] experts = 8 {moe.stream = #moe.stream<comm>} : (tensor<2x16x2xi32>) -> tensor<8x8xi32>
  // expected-error @+1 {{is a host planner 'moe.plan_placement' on #moe.stream<host> that starts before its input (operand #0) exists: it is produced by 'moe.routing_counts' on #moe.stream<comm>}}
  %p = moe.plan_placement %n on @g axes = [0, 1] experts = 8 {moe.stream = #moe.stream<host>} : (tensor<8x8xi32>) -> tensor<8xi32>
  %solved = moe.record_event on <host>
  moe.wait_event %solved on <comm>
  %l = moe.move_samples %labels to(%p) on @g axes = [0, 1] {moe.stream = #moe.stream<comm>} : (tensor<2x16xi64>, tensor<8xi32>) -> tensor<2x16xi64>
  return %l : tensor<2x16xi64>
}

// -----

shard.grid @g(shape = 2x2)
func.func @use_before_join(%idx: tensor<2x16x2xi32>, %labels: tensor<2x16xi64>) -> tensor<2x16xi64> attributes {moe.schedule = "test"} {
  %n = moe.routing_counts %idx on @g axes = [0, 1] experts = 8 {moe.stream = #moe.stream<comm>} : (tensor<2x16x2xi32>) -> tensor<8x8xi32>
  %counted = moe.record_event on <comm>
  moe.wait_event %counted on <host>
  // expected-note @+1 {{producer: 'moe.plan_placement' on #moe.stream<host>}}
  %p = moe.plan_placement %n on @g axes = [0, 1] experts = 8 {moe.stream = #moe.stream<host>} : (tensor<8x8xi32>) -> tensor<8xi32>
  // expected-error @+1 {{reads the result of host planner 'moe.plan_placement' on #moe.stream<host> before joining it}}
  %l = moe.move_samples %labels to(%p) on @g axes = [0, 1] {moe.stream = #moe.stream<comm>} : (tensor<2x16xi64>, tensor<8xi32>) -> tensor<2x16xi64>
  return %l : tensor<2x16xi64>
}

// -----

shard.grid @g(shape = 2x2)
func.func @join_before_start(%idx: tensor<2x16x2xi32>, %labels: tensor<2x16xi64>) -> tensor<2x16xi64> attributes {moe.schedule = "test"} {
  %n = moe.routing_counts %idx on @g axes = [0, 1] experts = 8 {moe.stream = #moe.stream<comm>} : (tensor<2x16x2xi32>) -> tensor<8x8xi32>
  %counted = moe.record_event on <comm>
  // expected-error @+1 {{joins #moe.stream<host> before any host planner started on it}}
  %early = moe.record_event on <host>
  moe.wait_event %counted on <host>
  %p = moe.plan_placement %n on @g axes = [0, 1] experts = 8 {moe.stream = #moe.stream<host>} : (tensor<8x8xi32>) -> tensor<8xi32>
  moe.wait_event %early on <comm>
  %l = moe.move_samples %labels to(%p) on @g axes = [0, 1] {moe.stream = #moe.stream<comm>} : (tensor<2x16xi64>, tensor<8xi32>) -> tensor<2x16xi64>
  return %l : tensor<2x16xi64>
}

// -----

// Both edges present: verifies (and the planner's group, which only gives
// its problem's shape, is not a collective to order against the others).
shard.grid @g(shape = 2x2)
func.func @planner_ok(%idx: tensor<2x16x2xi32>, %labels: tensor<2x16xi64>) -> tensor<2x16xi64> attributes {moe.schedule = "test"} {
  %n = moe.routing_counts %idx on @g axes = [0, 1] experts = 8 {moe.stream = #moe.stream<comm>} : (tensor<2x16x2xi32>) -> tensor<8x8xi32>
  %counted = moe.record_event on <comm>
  moe.wait_event %counted on <host>
  %p = moe.plan_placement %n on @g axes = [0, 1] experts = 8 {moe.stream = #moe.stream<host>} : (tensor<8x8xi32>) -> tensor<8xi32>
  %solved = moe.record_event on <host>
  %m = moe.routing_counts %idx on @g axes = [0, 1] experts = 8 {moe.stream = #moe.stream<comm>} : (tensor<2x16x2xi32>) -> tensor<8x8xi32>
  moe.wait_event %solved on <comm>
  %l = moe.move_samples %labels to(%p) on @g axes = [0, 1] {moe.stream = #moe.stream<comm>} : (tensor<2x16xi64>, tensor<8xi32>) -> tensor<2x16xi64>
  return %l : tensor<2x16xi64>
}

// -----

// One counts exchange per layer (docs/variable-dropless.md): a token chunk
// that reads the exchanged counts on another stream before an event orders
// the exchange before it is refused, naming the exchange.
shard.grid @g(shape = 2x2)
func.func @part_reads_counts_before_exchange(%x: tensor<2x16x32xf32>, %idx: tensor<2x16x2xi32>, %cnt: tensor<8xi32>) -> tensor<2x64x32xf32> attributes {moe.schedule = "test"} {
  // expected-note @+1 {{producer: 'moe.exchange_counts' on #moe.stream<comm, 1>}}
  %n = moe.exchange_counts %idx on @g axes = [0, 1] experts = 8 {moe.stream = #moe.stream<comm, 1>} : (tensor<2x16x2xi32>) -> tensor<4x8xi32>
  // expected-error @+1 {{reads the counts of 'moe.exchange_counts' on #moe.stream<comm, 1> (operand #3) before that exchange completes: no event orders it before this op, whose exchange is sized by those counts}}
  %d, %r = moe.dispatch %x, %idx, %cnt all_counts(%n) on @g axes = [0, 1] experts = 8 bound = 64 part [0, 2] {moe.stream = #moe.stream<comm>} : (tensor<2x16x32xf32>, tensor<2x16x2xi32>, tensor<8xi32>, tensor<4x8xi32>) -> (tensor<2x64x32xf32>, tensor<2x4xi32>)
  return %d : tensor<2x64x32xf32>
}

// -----

// Ordered by an event, the same chunk is accepted.
shard.grid @g(shape = 2x2)
func.func @part_after_exchange(%x: tensor<2x16x32xf32>, %idx: tensor<2x16x2xi32>, %cnt: tensor<8xi32>) -> tensor<2x64x32xf32> attributes {moe.schedule = "test"} {
  %n = moe.exchange_counts %idx on @g axes = [0, 1] experts = 8 {moe.stream = #moe.stream<comm, 1>} : (tensor<2x16x2xi32>) -> tensor<4x8xi32>
  %exchanged = moe.record_event on <comm, 1>
  moe.wait_event %exchanged on <comm>
  %d, %r = moe.dispatch %x, %idx, %cnt all_counts(%n) on @g axes = [0, 1] experts = 8 bound = 64 part [0, 2] {moe.stream = #moe.stream<comm>} : (tensor<2x16x32xf32>, tensor<2x16x2xi32>, tensor<8xi32>, tensor<4x8xi32>) -> (tensor<2x64x32xf32>, tensor<2x4xi32>)
  return %d : tensor<2x64x32xf32>
}
