// Collectives name a shard.grid and the axes of their group; the verifier
// checks both against the grid (upstream shard conventions).
// RUN: moe-opt %s -split-input-file -verify-diagnostics

func.func @no_grid(%g: tensor<16xf32>) {
  // expected-error @+1 {{device grid @nowhere is not defined (expected a shard.grid)}}
  %r = moe.all_reduce %g on @nowhere axes = [0] : tensor<16xf32>
  return
}

// -----

shard.grid @grid(shape = 2x4)
func.func @axis_range(%g: tensor<16xf32>) {
  // expected-error @+1 {{grid axis 2 is out of range for grid @grid of shape 2x4}}
  %r = moe.all_reduce %g on @grid axes = [2] : tensor<16xf32>
  return
}

// -----

shard.grid @grid(shape = 2x4)
func.func @axis_repeat(%g: tensor<16xf32>) {
  // expected-error @+1 {{grid axis 1 is repeated}}
  %r = moe.all_reduce %g on @grid axes = [1, 1] : tensor<16xf32>
  return
}

// -----

shard.grid @grid(shape = 2x?)
func.func @axis_dynamic(%g: tensor<16xf32>) {
  // expected-error @+1 {{grid @grid has a dynamic size on axis 1; a group needs a static size}}
  %r = moe.all_reduce %g on @grid axes = [1] : tensor<16xf32>
  return
}

// -----

shard.grid @grid(shape = 2x4)
func.func @no_axes(%g: tensor<16xf32>) {
  // expected-error @+1 {{needs at least one grid axis for its group}}
  %r = moe.all_reduce %g on @grid axes = [] : tensor<16xf32>
  return
}

// -----

shard.grid @grid(shape = 2x4)
func.func @experts_uneven(%x: tensor<2x8x16xf32>, %i: tensor<2x8x2xi32>, %c: tensor<6xi32>) {
  // expected-error @+1 {{6 experts cannot be spread evenly over a group of 4 ranks}}
  %d = moe.dispatch %x, %i, %c on @grid axes = [1] experts = 6 capacity = 6 : (tensor<2x8x16xf32>, tensor<2x8x2xi32>, tensor<6xi32>) -> tensor<1x24x16xf32>
  return
}

// -----

shard.grid @grid(shape = 2x4)
func.func @local_experts(%x: tensor<2x8x16xf32>, %i: tensor<2x8x2xi32>, %c: tensor<8xi32>) {
  // expected-error @+1 {{'result' dimension 0 (local experts E/G) must be 1, got 2 in shape 2x32x16}}
  %d = moe.dispatch %x, %i, %c on @grid axes = [0, 1] experts = 8 capacity = 4 : (tensor<2x8x16xf32>, tensor<2x8x2xi32>, tensor<8xi32>) -> tensor<2x32x16xf32>
  return
}

// -----

shard.grid @grid(shape = 2x4)
func.func @slots(%x: tensor<2x8x16xf32>, %i: tensor<2x8x2xi32>, %c: tensor<8xi32>) {
  // expected-error @+1 {{'result' dimension 1 (G x capacity slots) must be 32, got 16 in shape 1x16x16}}
  %d = moe.dispatch %x, %i, %c on @grid axes = [0, 1] experts = 8 capacity = 4 : (tensor<2x8x16xf32>, tensor<2x8x2xi32>, tensor<8xi32>) -> tensor<1x16x16xf32>
  return
}

// -----

shard.grid @grid(shape = 2x4)
func.func @combine_slots(%e: tensor<1x16x16xf32>, %i: tensor<2x8x2xi32>, %w: tensor<2x8x2xf32>, %c: tensor<8xi32>) {
  // expected-error @+1 {{'input' dimension 1 (G x capacity slots) must be 32, got 16 in shape 1x16x16}}
  %o = moe.combine %e, %i, %w, %c on @grid axes = [0, 1] experts = 8 capacity = 4 : (tensor<1x16x16xf32>, tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<8xi32>) -> tensor<2x8x16xf32>
  return
}

// -----

shard.grid @grid(shape = 2x4)
func.func @dispatch_dropless_static(%x: tensor<2x8x16xf32>, %i: tensor<2x8x2xi32>, %c: tensor<8xi32>) {
  // expected-error @+1 {{dropless routing needs a dynamic slot dimension (E_l x ? x M)}}
  %d = moe.dispatch %x, %i, %c on @grid axes = [0, 1] experts = 8 : (tensor<2x8x16xf32>, tensor<2x8x2xi32>, tensor<8xi32>) -> tensor<1x32x16xf32>
  return
}

// -----

shard.grid @grid(shape = 2x4)
func.func @dispatch_embed(%x: tensor<2x8x16xf32>, %i: tensor<2x8x2xi32>, %c: tensor<8xi32>) {
  // expected-error @+1 {{'result' dimension 2 (embedding M) must be 16, got 8 in shape 1x32x8}}
  %d = moe.dispatch %x, %i, %c on @grid axes = [0, 1] experts = 8 capacity = 4 : (tensor<2x8x16xf32>, tensor<2x8x2xi32>, tensor<8xi32>) -> tensor<1x32x8xf32>
  return
}

// -----

shard.grid @grid(shape = 2x4)
func.func @dispatch_indices(%x: tensor<2x8x16xf32>, %i: tensor<2x4x2xi32>, %c: tensor<8xi32>) {
  // expected-error @+1 {{'indices' dimension 1 (tokens N) must be 8, got 4 in shape 2x4x2}}
  %d = moe.dispatch %x, %i, %c on @grid axes = [0, 1] experts = 8 capacity = 4 : (tensor<2x8x16xf32>, tensor<2x4x2xi32>, tensor<8xi32>) -> tensor<1x32x16xf32>
  return
}

// -----

shard.grid @grid(shape = 2x4)
func.func @dispatch_indices_rank(%x: tensor<2x8x16xf32>, %i: tensor<16xi32>, %c: tensor<8xi32>) {
  // expected-error @+1 {{'indices' must be B x N x k (token choice) or E x C (expert choice), got 16}}
  %d = moe.dispatch %x, %i, %c on @grid axes = [0, 1] experts = 8 capacity = 4 : (tensor<2x8x16xf32>, tensor<16xi32>, tensor<8xi32>) -> tensor<1x32x16xf32>
  return
}

// -----

shard.grid @grid(shape = 2x4)
func.func @dispatch_ec_dropless(%x: tensor<2x8x16xf32>, %i: tensor<8x4xi32>, %c: tensor<8xi32>) {
  // expected-error @+1 {{expert-choice routing (E x C indices) needs a capacity}}
  %d = moe.dispatch %x, %i, %c on @grid axes = [0, 1] experts = 8 : (tensor<2x8x16xf32>, tensor<8x4xi32>, tensor<8xi32>) -> tensor<1x?x16xf32>
  return
}

// -----

shard.grid @grid(shape = 2x4)
func.func @dispatch_counts(%x: tensor<2x8x16xf32>, %i: tensor<2x8x2xi32>, %c: tensor<4xi32>) {
  // expected-error @+1 {{'counts' must have shape 8, got 4}}
  %d = moe.dispatch %x, %i, %c on @grid axes = [0, 1] experts = 8 capacity = 4 : (tensor<2x8x16xf32>, tensor<2x8x2xi32>, tensor<4xi32>) -> tensor<1x32x16xf32>
  return
}

// -----

shard.grid @grid(shape = 2x4)
func.func @dispatch_capacity(%x: tensor<2x8x16xf32>, %i: tensor<2x8x2xi32>, %c: tensor<8xi32>) {
  // expected-error @+1 {{capacity must be positive, got 0}}
  %d = moe.dispatch %x, %i, %c on @grid axes = [0, 1] experts = 8 capacity = 0 : (tensor<2x8x16xf32>, tensor<2x8x2xi32>, tensor<8xi32>) -> tensor<1x0x16xf32>
  return
}

// -----

shard.grid @grid(shape = 2x4)
func.func @combine_weights(%e: tensor<1x32x16xf32>, %i: tensor<2x8x2xi32>, %w: tensor<2x8x1xf32>, %c: tensor<8xi32>) {
  // expected-error @+1 {{'weights' must have the shape of 'indices' (2x8x2), got 2x8x1}}
  %o = moe.combine %e, %i, %w, %c on @grid axes = [0, 1] experts = 8 capacity = 4 : (tensor<1x32x16xf32>, tensor<2x8x2xi32>, tensor<2x8x1xf32>, tensor<8xi32>) -> tensor<2x8x16xf32>
  return
}

// -----

shard.grid @grid(shape = 2x4)
func.func @combine_tokens(%e: tensor<1x32x16xf32>, %i: tensor<2x8x2xi32>, %w: tensor<2x8x2xf32>, %c: tensor<8xi32>) {
  // expected-error @+1 {{'indices' dimension 0 (batch B) must be 4, got 2 in shape 2x8x2}}
  %o = moe.combine %e, %i, %w, %c on @grid axes = [0, 1] experts = 8 capacity = 4 : (tensor<1x32x16xf32>, tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<8xi32>) -> tensor<4x8x16xf32>
  return
}

// -----

// A token chunk's expert side holds G x the window's slots.
shard.grid @grid(shape = 2x4)
func.func @window_slots(%x: tensor<2x8x16xf32>, %i: tensor<2x8x2xi32>, %c: tensor<8xi32>) {
  // expected-error @+1 {{'result' dimension 1 (G x the window's slots) must be 8, got 32 in shape 1x32x16}}
  %d = moe.dispatch %x, %i, %c on @grid axes = [0, 1] experts = 8 capacity = 4 slots [1, 1] : (tensor<2x8x16xf32>, tensor<2x8x2xi32>, tensor<8xi32>) -> tensor<1x32x16xf32>
  return
}

// -----

shard.grid @grid(shape = 1x4)
func.func @combine_window_slots(%e: tensor<2x8x16xf32>, %i: tensor<2x8x2xi32>, %w: tensor<2x8x2xf32>, %c: tensor<8xi32>) {
  // expected-error @+1 {{'input' dimension 1 (G x the window's slots) must be 12, got 8 in shape 2x8x16}}
  %y = moe.combine %e, %i, %w, %c on @grid axes = [1] experts = 8 capacity = 8 slots [2, 3] : (tensor<2x8x16xf32>, tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<8xi32>) -> tensor<2x8x16xf32>
  return
}
