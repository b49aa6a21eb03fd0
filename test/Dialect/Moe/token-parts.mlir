// Variable-count token chunks: `part [j, r]` on dispatch and combine and
// moe.rows_window round-trip; the verifier refuses what they cannot mean.
// RUN: moe-opt %s -split-input-file -verify-diagnostics | FileCheck %s

shard.grid @grid(shape = 1x4)
// CHECK-LABEL: func.func @parts
// CHECK: moe.dispatch {{.*}} experts = 8 bound = 64 part [1, 2] :
// CHECK: moe.rows_window %{{.*}}, %{{.*}} rows(%{{.*}}, %{{.*}}) part [3, 4] :
// CHECK: moe.combine {{.*}} rows(%{{.*}}) on @grid axes = [1] experts = 8 part [3, 4] :
func.func @parts(%x: tensor<2x16x32xf32>, %idx: tensor<2x16x2xi32>, %cnt: tensor<8xi32>, %w: tensor<2x16x2xf32>) -> tensor<2x16x32xf32> {
  %d0, %r0 = moe.dispatch %x, %idx, %cnt on @grid axes = [1] experts = 8 bound = 64 part [0, 2] : (tensor<2x16x32xf32>, tensor<2x16x2xi32>, tensor<8xi32>) -> (tensor<2x64x32xf32>, tensor<2x4xi32>)
  %d1, %r1 = moe.dispatch %x, %idx, %cnt on @grid axes = [1] experts = 8 bound = 64 part [1, 2] : (tensor<2x16x32xf32>, tensor<2x16x2xi32>, tensor<8xi32>) -> (tensor<2x64x32xf32>, tensor<2x4xi32>)
  %e, %r = moe.rows_window %d0, %d1 rows(%r0, %r1) part [3, 4] : (tensor<2x64x32xf32>, tensor<2x64x32xf32>, tensor<2x4xi32>, tensor<2x4xi32>) -> (tensor<2x64x32xf32>, tensor<2x4xi32>)
  %y = moe.combine %e, %idx, %w, %cnt rows(%r) on @grid axes = [1] experts = 8 part [3, 4] : (tensor<2x64x32xf32>, tensor<2x16x2xi32>, tensor<2x16x2xf32>, tensor<8xi32>, tensor<2x4xi32>) -> tensor<2x16x32xf32>
  return %y : tensor<2x16x32xf32>
}

// -----

shard.grid @grid(shape = 1x4)
func.func @part_with_capacity(%x: tensor<2x8x16xf32>, %i: tensor<2x8x2xi32>, %c: tensor<8xi32>) {
  // expected-error @+1 {{'part' needs variable-count routing ('rows' and a bound; moe-variable-dropless): with a capacity use 'slots'}}
  %d = moe.dispatch %x, %i, %c on @grid axes = [1] experts = 8 capacity = 4 part [0, 2] : (tensor<2x8x16xf32>, tensor<2x8x2xi32>, tensor<8xi32>) -> tensor<2x16x16xf32>
  return
}

// -----

shard.grid @grid(shape = 1x4)
func.func @part_out_of_range(%x: tensor<2x16x32xf32>, %idx: tensor<2x16x2xi32>, %cnt: tensor<8xi32>) {
  // expected-error @+1 {{'part' must be [j, r] with 0 <= j < r}}
  %d, %r = moe.dispatch %x, %idx, %cnt on @grid axes = [1] experts = 8 bound = 64 part [2, 2] : (tensor<2x16x32xf32>, tensor<2x16x2xi32>, tensor<8xi32>) -> (tensor<2x64x32xf32>, tensor<2x4xi32>)
  return
}

// -----

func.func @rows_window_counts(%a: tensor<2x64x32xf32>, %r: tensor<2x4xi32>) {
  // expected-error @+1 {{needs one 'rows' per input chunk, and at least one chunk; got 2 chunks and 1 rows}}
  %e, %s = moe.rows_window %a, %a rows(%r) part [0, 4] : (tensor<2x64x32xf32>, tensor<2x64x32xf32>, tensor<2x4xi32>) -> (tensor<2x64x32xf32>, tensor<2x4xi32>)
  return
}

// -----

func.func @rows_window_part(%a: tensor<2x64x32xf32>, %r: tensor<2x4xi32>) {
  // expected-error @+1 {{'part' must be [i, r] with 0 <= i < r}}
  %e, %s = moe.rows_window %a rows(%r) part [4, 4] : (tensor<2x64x32xf32>, tensor<2x4xi32>) -> (tensor<2x64x32xf32>, tensor<2x4xi32>)
  return
}

// -----

func.func @rows_window_types(%a: tensor<2x64x32xf32>, %b: tensor<2x32x32xf32>, %r: tensor<2x4xi32>) {
  // expected-error @+1 {{every input chunk must have the result's type}}
  %e, %s = moe.rows_window %a, %b rows(%r, %r) part [0, 4] : (tensor<2x64x32xf32>, tensor<2x32x32xf32>, tensor<2x4xi32>, tensor<2x4xi32>) -> (tensor<2x64x32xf32>, tensor<2x4xi32>)
  return
}

// -----

// One counts exchange per layer: the chunks read it as `all_counts`,
// forward and in a vjp (through the primal bound to the argument).
shard.grid @grid(shape = 1x4)
// CHECK-LABEL: func.func @shared_counts
// CHECK: %[[N:.*]] = moe.exchange_counts %{{.*}} on @grid axes = [1] experts = 8 : (tensor<2x16x2xi32>) -> tensor<4x8xi32>
// CHECK: moe.dispatch {{.*}} all_counts(%[[N]]) on @grid axes = [1] experts = 8 bound = 64 part [0, 2] :
// CHECK: moe.dispatch {{.*}} all_counts(%{{.*}}) on @grid axes = [1] experts = 8 bound = 64 part [1, 2] :
func.func @shared_counts(%x: tensor<2x16x32xf32>, %idx: tensor<2x16x2xi32>, %cnt: tensor<8xi32>, %dy: tensor<2x64x32xf32>) -> tensor<2x16x32xf32> {
  %n = moe.exchange_counts %idx on @grid axes = [1] experts = 8 : (tensor<2x16x2xi32>) -> tensor<4x8xi32>
  %d0, %r0 = moe.dispatch %x, %idx, %cnt all_counts(%n) on @grid axes = [1] experts = 8 bound = 64 part [0, 2] : (tensor<2x16x32xf32>, tensor<2x16x2xi32>, tensor<8xi32>, tensor<4x8xi32>) -> (tensor<2x64x32xf32>, tensor<2x4xi32>)
  %g = moe.vjp (%a = %x : tensor<2x16x32xf32>, %b = %idx : tensor<2x16x2xi32>, %c = %cnt : tensor<8xi32>, %m = %n : tensor<4x8xi32>) cotangents(%dy : tensor<2x64x32xf32>) -> (tensor<2x16x32xf32>) {
    %d1, %r1 = moe.dispatch %a, %b, %c all_counts(%m) on @grid axes = [1] experts = 8 bound = 64 part [1, 2] : (tensor<2x16x32xf32>, tensor<2x16x2xi32>, tensor<8xi32>, tensor<4x8xi32>) -> (tensor<2x64x32xf32>, tensor<2x4xi32>)
    moe.yield %d1, %r1 : tensor<2x64x32xf32>, tensor<2x4xi32>
  }
  return %g : tensor<2x16x32xf32>
}

// -----

// Counts exchanged for another layer's routing size the exchange wrong.
shard.grid @grid(shape = 1x4)
func.func @other_layers_counts(%x: tensor<2x16x32xf32>, %idx: tensor<2x16x2xi32>, %idx2: tensor<2x16x2xi32>, %cnt: tensor<8xi32>) {
  %n = moe.exchange_counts %idx2 on @grid axes = [1] experts = 8 : (tensor<2x16x2xi32>) -> tensor<4x8xi32>
  // expected-error @+1 {{reads 'all_counts' exchanged for other routing: the moe.exchange_counts must count this dispatch's own indices over its group}}
  %d, %r = moe.dispatch %x, %idx, %cnt all_counts(%n) on @grid axes = [1] experts = 8 bound = 64 part [0, 2] : (tensor<2x16x32xf32>, tensor<2x16x2xi32>, tensor<8xi32>, tensor<4x8xi32>) -> (tensor<2x64x32xf32>, tensor<2x4xi32>)
  return
}

// -----

// The same inside a vjp: the primals bound to the arguments are compared.
shard.grid @grid(shape = 1x4)
func.func @other_layers_counts_vjp(%x: tensor<2x16x32xf32>, %idx: tensor<2x16x2xi32>, %idx2: tensor<2x16x2xi32>, %cnt: tensor<8xi32>, %dy: tensor<2x64x32xf32>) {
  %n = moe.exchange_counts %idx2 on @grid axes = [1] experts = 8 : (tensor<2x16x2xi32>) -> tensor<4x8xi32>
  %g = moe.vjp (%a = %x : tensor<2x16x32xf32>, %b = %idx : tensor<2x16x2xi32>, %c = %cnt : tensor<8xi32>, %m = %n : tensor<4x8xi32>) cotangents(%dy : tensor<2x64x32xf32>) -> (tensor<2x16x32xf32>) {
    // expected-error @+1 {{reads 'all_counts' exchanged for other routing}}
    %d1, %r1 = moe.dispatch %a, %b, %c all_counts(%m) on @grid axes = [1] experts = 8 bound = 64 part [1, 2] : (tensor<2x16x32xf32>, tensor<2x16x2xi32>, tensor<8xi32>, tensor<4x8xi32>) -> (tensor<2x64x32xf32>, tensor<2x4xi32>)
    moe.yield %d1, %r1 : tensor<2x64x32xf32>, tensor<2x4xi32>
  }
  return
}

// -----

shard.grid @grid(shape = 1x4)
func.func @counts_shape(%x: tensor<2x16x32xf32>, %idx: tensor<2x16x2xi32>, %cnt: tensor<8xi32>) {
  %n = moe.exchange_counts %idx on @grid axes = [1] experts = 8 : (tensor<2x16x2xi32>) -> tensor<4x8xi32>
  %m = tensor.extract_slice %n[0, 0] [2, 8] [1, 1] : tensor<4x8xi32> to tensor<2x8xi32>
  // expected-error @+1 {{'all_counts'}}
  %d, %r = moe.dispatch %x, %idx, %cnt all_counts(%m) on @grid axes = [1] experts = 8 bound = 64 part [0, 2] : (tensor<2x16x32xf32>, tensor<2x16x2xi32>, tensor<8xi32>, tensor<2x8xi32>) -> (tensor<2x64x32xf32>, tensor<2x4xi32>)
  return
}

// -----

shard.grid @grid(shape = 1x4)
func.func @exchange_rows(%idx: tensor<2x16x2xi32>) {
  // expected-error @+1 {{'result'}}
  %n = moe.exchange_counts %idx on @grid axes = [1] experts = 8 : (tensor<2x16x2xi32>) -> tensor<2x8xi32>
  return
}
