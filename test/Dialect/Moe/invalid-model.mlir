// The #moe.model attribute and the other discardable moe attributes: the
// model's hyper-parameters must agree with every op in its body.
// RUN: moe-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{top_k (3) exceeds the number of experts (2)}}
func.func @f() attributes {moe.model = #moe.model<layers = 1, batch = 2, seq = 8, embed = 16, hidden = 32, experts = 2, top_k = 3, dropless, grid = @g, ep_axes = [0], dp_axes = [0], intra_axes = []>} {
  return
}

// -----

// expected-error @+1 {{model field 'hidden' must be positive, got 0}}
func.func @f() attributes {moe.model = #moe.model<layers = 1, batch = 2, seq = 8, embed = 16, hidden = 0, experts = 2, top_k = 1, dropless, grid = @g, ep_axes = [0], dp_axes = [0], intra_axes = []>} {
  return
}

// -----

// expected-error @+1 {{capacity_factor must be positive; write `dropless` for no capacity limit}}
func.func @f() attributes {moe.model = #moe.model<layers = 1, batch = 2, seq = 8, embed = 16, hidden = 8, experts = 2, top_k = 1, capacity_factor = 0.0, grid = @g, ep_axes = [0], dp_axes = [0], intra_axes = []>} {
  return
}

// -----

// expected-error @+1 {{dp_axes repeats grid axis 1}}
func.func @f() attributes {moe.model = #moe.model<layers = 1, batch = 2, seq = 8, embed = 16, hidden = 8, experts = 2, top_k = 1, dropless, grid = @g, ep_axes = [0], dp_axes = [1, 1], intra_axes = []>} {
  return
}

// -----

// expected-error @+1 {{device grid @g is not defined (expected a shard.grid)}}
func.func @f() attributes {moe.model = #moe.model<layers = 1, batch = 2, seq = 8, embed = 16, hidden = 8, experts = 2, top_k = 1, dropless, grid = @g, ep_axes = [0], dp_axes = [0], intra_axes = []>} {
  return
}

// -----

// Experts replicated over a data-parallel axis that is not expert-parallel
// (grid 2x2, ep_axes = [1]): nothing keeps the replicas equal, refused.
shard.grid @g(shape = 2x2)
// expected-error @+1 {{model replicates its experts over data-parallel axes [0] of @g, which are not in ep_axes [1]; expert replicas are not kept equal (no all-reduce of their gradients), so put those axes in ep_axes}}
func.func @f() attributes {moe.model = #moe.model<layers = 1, batch = 2, seq = 8, embed = 16, hidden = 8, experts = 2, top_k = 1, dropless, grid = @g, ep_axes = [1], dp_axes = [0, 1], intra_axes = [1]>} {
  return
}

// -----

// A grid axis of more than one rank outside dp_axes (grid 2x2, ep = dp =
// [1]): the dense weights' copies along axis 0 would train apart, refused.
shard.grid @g(shape = 2x2)
// expected-error @+1 {{grid axes [0] of @g have more than one rank but are not in dp_axes [1]: every rank reads its own samples, and the dense weights' copies along those axes would not be kept equal (no all-reduce of their gradients), so put them in dp_axes}}
func.func @f() attributes {moe.model = #moe.model<layers = 1, batch = 2, seq = 8, embed = 16, hidden = 8, experts = 2, top_k = 1, dropless, grid = @g, ep_axes = [1], dp_axes = [1], intra_axes = [1]>} {
  return
}

// -----

// An axis of one rank replicates nothing (grid 1x2, ep_axes = [1]): the
// verifier goes on to the blocks.
shard.grid @g(shape = 1x2)
// expected-error @+1 {{model declares 1 layers but its body has 0 moe.block ops}}
func.func @f() attributes {moe.model = #moe.model<layers = 1, batch = 2, seq = 8, embed = 16, hidden = 8, experts = 2, top_k = 1, dropless, grid = @g, ep_axes = [1], dp_axes = [0, 1], intra_axes = [1]>} {
  return
}

// -----

shard.grid @g(shape = 2x4)
// expected-error @+1 {{grid axis 3 is out of range for grid @g of shape 2x4}}
func.func @f() attributes {moe.model = #moe.model<layers = 1, batch = 2, seq = 8, embed = 16, hidden = 8, experts = 8, top_k = 1, dropless, grid = @g, ep_axes = [0, 1], dp_axes = [0, 1], intra_axes = [3]>} {
  return
}

// -----

shard.grid @g(shape = 2x4)
// expected-error @+1 {{model has 6 experts, which do not divide evenly over the 8 ranks of the expert-parallel group}}
func.func @f() attributes {moe.model = #moe.model<layers = 1, batch = 2, seq = 8, embed = 16, hidden = 8, experts = 6, top_k = 1, dropless, grid = @g, ep_axes = [0, 1], dp_axes = [0, 1], intra_axes = [1]>} {
  return
}

// -----

shard.grid @g(shape = 1x2)
// expected-error @+1 {{model declares 2 layers but its body has 1 moe.block ops}}
func.func @f(%x: tensor<2x8x16xf32>) attributes {moe.model = #moe.model<layers = 2, batch = 2, seq = 8, embed = 16, hidden = 8, experts = 2, top_k = 1, dropless, grid = @g, ep_axes = [1], dp_axes = [1], intra_axes = [1]>} {
  %y = moe.block 0 (%h = %x : tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
    moe.yield %h : tensor<2x8x16xf32>
  }
  return
}

// -----

shard.grid @g(shape = 1x2)
// expected-note @+1 {{model declared here}}
func.func @f(%x: tensor<2x8x16xf32>) attributes {moe.model = #moe.model<layers = 2, batch = 2, seq = 8, embed = 16, hidden = 8, experts = 2, top_k = 1, dropless, grid = @g, ep_axes = [1], dp_axes = [1], intra_axes = [1]>} {
  %y = moe.block 0 (%h = %x : tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
    moe.yield %h : tensor<2x8x16xf32>
  }
  // expected-error @+1 {{is block 2 but block 1 was expected next (blocks are numbered 0..L-1 in order)}}
  %z = moe.block 2 (%h = %y : tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
    moe.yield %h : tensor<2x8x16xf32>
  }
  return
}

// -----

shard.grid @g(shape = 1x2)
// expected-note @+1 {{model declared here}}
func.func @f(%x: tensor<2x8x16xf32>, %w: tensor<16x4xf32>) attributes {moe.model = #moe.model<layers = 1, batch = 2, seq = 8, embed = 16, hidden = 8, experts = 2, top_k = 1, dropless, grid = @g, ep_axes = [1], dp_axes = [1], intra_axes = [1]>} {
  %y = moe.block 0 (%h = %x : tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
    // expected-error @+1 {{routes to 4 experts but the model has 2}}
    %i, %wt, %c = moe.gate softmax_topk %h, %w experts = 4 top_k = 1 : (tensor<2x8x16xf32>, tensor<16x4xf32>) -> (tensor<2x8x1xi32>, tensor<2x8x1xf32>, tensor<4xi32>)
    moe.yield %h : tensor<2x8x16xf32>
  }
  return
}

// -----

shard.grid @g(shape = 1x2)
// expected-note @+1 {{model declared here}}
func.func @f(%x: tensor<2x8x16xf32>, %w: tensor<16x2xf32>) attributes {moe.model = #moe.model<layers = 1, batch = 2, seq = 8, embed = 16, hidden = 8, experts = 2, top_k = 1, dropless, grid = @g, ep_axes = [1], dp_axes = [1], intra_axes = [1]>} {
  %y = moe.block 0 (%h = %x : tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
    // expected-error @+1 {{has top_k = 2 but the model has k = 1}}
    %i, %wt, %c = moe.gate softmax_topk %h, %w experts = 2 top_k = 2 : (tensor<2x8x16xf32>, tensor<16x2xf32>) -> (tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<2xi32>)
    moe.yield %h : tensor<2x8x16xf32>
  }
  return
}

// -----

shard.grid @g(shape = 1x2)
// expected-note @+1 {{model declared here}}
func.func @f(%x: tensor<2x8x16xf32>, %w: tensor<16x2xf32>) attributes {moe.model = #moe.model<layers = 1, batch = 2, seq = 8, embed = 16, hidden = 8, experts = 2, top_k = 1, capacity_factor = 1.0, grid = @g, ep_axes = [1], dp_axes = [1], intra_axes = [1]>} {
  %y = moe.block 0 (%h = %x : tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
    // expected-error @+1 {{has capacity factor 2.0 but the model has 1.0}}
    %i, %wt, %c = moe.gate softmax_topk %h, %w experts = 2 top_k = 1 capacity_factor = 2.0 capacity = 16 : (tensor<2x8x16xf32>, tensor<16x2xf32>) -> (tensor<2x8x1xi32>, tensor<2x8x1xf32>, tensor<2xi32>)
    moe.yield %h : tensor<2x8x16xf32>
  }
  return
}

// -----

shard.grid @g(shape = 1x2)
// expected-note @+1 {{model declared here}}
func.func @f(%x: tensor<2x8x16xf32>, %w: tensor<16x2xf32>) attributes {moe.model = #moe.model<layers = 1, batch = 2, seq = 8, embed = 16, hidden = 8, experts = 2, top_k = 1, capacity_factor = 1.0, grid = @g, ep_axes = [1], dp_axes = [1], intra_axes = [1]>} {
  %y = moe.block 0 (%h = %x : tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
    // expected-error @+1 {{has capacity factor dropless but the model has 1.0}}
    %i, %wt, %c = moe.gate softmax_topk %h, %w experts = 2 top_k = 1 : (tensor<2x8x16xf32>, tensor<16x2xf32>) -> (tensor<2x8x1xi32>, tensor<2x8x1xf32>, tensor<2xi32>)
    moe.yield %h : tensor<2x8x16xf32>
  }
  return
}

// -----

shard.grid @g(shape = 1x2)
func.func @f(%x: tensor<2x4x16xf32>, %w: tensor<16x2xf32>) attributes {moe.model = #moe.model<layers = 1, batch = 2, seq = 8, embed = 16, hidden = 8, experts = 2, top_k = 1, dropless, grid = @g, ep_axes = [1], dp_axes = [1], intra_axes = [1]>} {
  %y = moe.block 0 (%h = %x : tensor<2x4x16xf32>) -> tensor<2x4x16xf32> {
    // expected-error @+1 {{'input' must have shape ?x8x16, got 2x4x16}}
    %i, %wt, %c = moe.gate softmax_topk %h, %w experts = 2 top_k = 1 : (tensor<2x4x16xf32>, tensor<16x2xf32>) -> (tensor<2x4x1xi32>, tensor<2x4x1xf32>, tensor<2xi32>)
    moe.yield %h : tensor<2x4x16xf32>
  }
  return
}

// -----

shard.grid @g(shape = 1x2)
// expected-note @+1 {{model declared here}}
func.func @f(%x: tensor<3x8x16xf32>, %w: tensor<16x2xf32>) attributes {moe.model = #moe.model<layers = 1, batch = 4, seq = 8, embed = 16, hidden = 8, experts = 2, top_k = 1, dropless, grid = @g, ep_axes = [1], dp_axes = [1], intra_axes = [1]>} {
  %y = moe.block 0 (%h = %x : tensor<3x8x16xf32>) -> tensor<3x8x16xf32> {
    // expected-error @+1 {{sees a batch of 3 samples, which is not the model's B = 4 or a micro-batch of it}}
    %i, %wt, %c = moe.gate softmax_topk %h, %w experts = 2 top_k = 1 : (tensor<3x8x16xf32>, tensor<16x2xf32>) -> (tensor<3x8x1xi32>, tensor<3x8x1xf32>, tensor<2xi32>)
    moe.yield %h : tensor<3x8x16xf32>
  }
  return
}

// -----

shard.grid @g(shape = 1x2)
// expected-note @+1 {{model declared here}}
func.func @f(%x: tensor<2x8x16xf32>, %up: tensor<1x16x4xf32>, %down: tensor<1x4x16xf32>) attributes {moe.model = #moe.model<layers = 1, batch = 2, seq = 8, embed = 16, hidden = 8, experts = 2, top_k = 1, dropless, grid = @g, ep_axes = [1], dp_axes = [1], intra_axes = [1]>} {
  %y = moe.block 0 (%h = %x : tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
    %d = tensor.empty() : tensor<1x16x16xf32>
    // expected-error @+1 {{has hidden size 4 but the model has H = 8}}
    %e = moe.expert relu %d up(%up) down(%down) : (tensor<1x16x16xf32>, tensor<1x16x4xf32>, tensor<1x4x16xf32>) -> tensor<1x16x16xf32>
    moe.yield %h : tensor<2x8x16xf32>
  }
  return
}

// -----

shard.grid @g(shape = 1x2)
// expected-note @+1 {{model declared here}}
func.func @f(%x: tensor<2x8x16xf32>, %up: tensor<2x16x8xf32>, %down: tensor<2x8x16xf32>) attributes {moe.model = #moe.model<layers = 1, batch = 2, seq = 8, embed = 16, hidden = 8, experts = 2, top_k = 1, dropless, grid = @g, ep_axes = [1], dp_axes = [1], intra_axes = [1]>} {
  %y = moe.block 0 (%h = %x : tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
    %d = tensor.empty() : tensor<2x16x16xf32>
    // expected-error @+1 {{holds 2 local experts but the model spreads 2 experts over 2 ranks (1 per rank)}}
    %e = moe.expert relu %d up(%up) down(%down) : (tensor<2x16x16xf32>, tensor<2x16x8xf32>, tensor<2x8x16xf32>) -> tensor<2x16x16xf32>
    moe.yield %h : tensor<2x8x16xf32>
  }
  return
}

// -----

shard.grid @g(shape = 2x2)
// expected-note @+1 {{model declared here}}
func.func @f(%x: tensor<2x8x16xf32>, %i: tensor<2x8x1xi32>, %c: tensor<4xi32>) attributes {moe.model = #moe.model<layers = 1, batch = 2, seq = 8, embed = 16, hidden = 8, experts = 4, top_k = 1, dropless, grid = @g, ep_axes = [0, 1], dp_axes = [0, 1], intra_axes = [1]>} {
  %y = moe.block 0 (%h = %x : tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
    // expected-error @+1 {{must run on the model's expert-parallel group (@g axes [0, 1])}}
    %d = moe.dispatch %h, %i, %c on @g axes = [1] experts = 4 : (tensor<2x8x16xf32>, tensor<2x8x1xi32>, tensor<4xi32>) -> tensor<2x?x16xf32>
    moe.yield %h : tensor<2x8x16xf32>
  }
  return
}

// -----

shard.grid @g(shape = 2x2)
// expected-note @+1 {{model declared here}}
func.func @f(%x: tensor<2x8x16xf32>, %i: tensor<2x8x1xi32>, %c: tensor<8xi32>) attributes {moe.model = #moe.model<layers = 1, batch = 2, seq = 8, embed = 16, hidden = 8, experts = 4, top_k = 1, dropless, grid = @g, ep_axes = [0, 1], dp_axes = [0, 1], intra_axes = [1]>} {
  %y = moe.block 0 (%h = %x : tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
    // expected-error @+1 {{routes to 8 experts but the model has 4}}
    %d = moe.dispatch %h, %i, %c on @g axes = [0, 1] experts = 8 : (tensor<2x8x16xf32>, tensor<2x8x1xi32>, tensor<8xi32>) -> tensor<2x?x16xf32>
    moe.yield %h : tensor<2x8x16xf32>
  }
  return
}

// -----

shard.grid @g(shape = 2x2x2)
// expected-note @+1 {{model declared here}}
func.func @f(%w: tensor<16xf32>) attributes {moe.model = #moe.model<layers = 1, batch = 2, seq = 8, embed = 16, hidden = 8, experts = 8, top_k = 1, dropless, grid = @g, ep_axes = [0, 1, 2], dp_axes = [0, 1, 2], intra_axes = [2]>} {
  moe.block 0 () {
  }
  // expected-error @+1 {{must run on the model's data-parallel group (@g axes [0, 1, 2]), its nodes (axes [0, 1]) or a node's ranks (axes [2])}}
  %r = moe.all_reduce %w on @g axes = [1] : tensor<16xf32>
  return
}

// -----

// expected-error @+1 {{'moe.model' must be a #moe.model attribute}}
func.func @f() attributes {moe.model = 3 : i64} {
  return
}

// -----

shard.grid @g(shape = 1x2)
// expected-error @+1 {{'moe.model' belongs on a function}}
module attributes {moe.model = #moe.model<layers = 1, batch = 2, seq = 8, embed = 16, hidden = 8, experts = 2, top_k = 1, dropless, grid = @g, ep_axes = [1], dp_axes = [1], intra_axes = [1]>} {
}

// -----

func.func @f(%x: tensor<2xf32>) {
  // expected-error @+1 {{only tasks (compute ops, plumbing and collectives) can be put on a stream}}
  moe.block 0 () attributes {moe.stream = #moe.stream<compute>} {
  }
  return
}

// -----

func.func @f(%x: tensor<2xf32>) {
  // Plumbing (a residual add) runs on the compute stream.
  %y = arith.addf %x, %x {moe.stream = #moe.stream<compute>} : tensor<2xf32>
  return
}

// -----

// expected-error @+1 {{'moe.task' must be a #moe.task attribute}}
func.func @f() attributes {moe.task = 1 : i64} {
  return
}

// -----

// expected-error @+1 {{'moe.schedule' must be a policy name on a function}}
module attributes {moe.schedule = "flowmoe"} {
}

// -----

shard.grid @g(shape = 4)
func.func @f(%x: tensor<16xf32>) {
  // expected-error @+1 {{a collective cannot run on a compute stream}}
  %r = moe.all_reduce %x on @g axes = [0] {moe.stream = #moe.stream<compute>} : tensor<16xf32>
  return
}

// -----

func.func @f(%x: tensor<4x16xf32>, %s: tensor<16xf32>) {
  // expected-error @+1 {{a compute task cannot run on a communication stream}}
  %n = moe.norm rms %x, %s {moe.stream = #moe.stream<comm>} : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  return
}

// -----

// A host planner runs on a host thread, and only host planners run there
// (docs/host-planners.md).
shard.grid @g(shape = 2x2)
func.func @f(%n: tensor<8x8xi32>) {
  // expected-error @+1 {{a host planner runs on a host stream (#moe.stream<host>), not on a compute or communication stream}}
  %p = moe.plan_placement %n on @g axes = [0, 1] experts = 8 {moe.stream = #moe.stream<comm>} : (tensor<8x8xi32>) -> tensor<8xi32>
  return
}

// -----

func.func @f(%x: tensor<4x16xf32>, %s: tensor<16xf32>) {
  // expected-error @+1 {{only a host planner (an op with the HostPlanner trait) can run on a host stream}}
  %n = moe.norm rms %x, %s {moe.stream = #moe.stream<host>} : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  return
}

// -----

shard.grid @g(shape = 4)
func.func @f(%x: tensor<4x16xf32>) {
  // An upstream shard collective counts as communication.
  %r = shard.all_gather %x on @g grid_axes = [0] gather_axis = 0 {moe.stream = #moe.stream<comm, 1>} : tensor<4x16xf32> -> tensor<16x16xf32>
  return
}

// -----

func.func @f(%x: tensor<4x16xf32>, %s: tensor<16xf32>) {
  // expected-error @+1 {{'moe.stream' must be a #moe.stream attribute}}
  %n = moe.norm rms %x, %s {moe.stream = "comm"} : (tensor<4x16xf32>, tensor<16xf32>) -> tensor<4x16xf32>
  return
}

// -----

// expected-error @+1 {{unknown moe dialect attribute 'moe.priority'}}
func.func @f() attributes {moe.priority = 1 : i64} {
  return
}

// -----

// expected-error @+1 {{'moe.param' of argument #0 must be a non-empty string}}
func.func @f(%x: tensor<2xf32> {moe.param = ""}) {
  return
}

// -----

// expected-error @+1 {{unknown moe dialect argument attribute 'moe.weight'}}
func.func @f(%x: tensor<2xf32> {moe.weight = "w"}) {
  return
}
