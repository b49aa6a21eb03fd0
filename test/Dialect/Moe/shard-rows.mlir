// moe.gather_rows / moe.scatter_rows (expert sharding on the
// variable-count path) round-trip; the verifier refuses shapes they cannot
// mean, naming the operand.
// RUN: moe-opt %s -split-input-file -verify-diagnostics | FileCheck %s

shard.grid @grid(shape = 2x2)
// CHECK-LABEL: func.func @rows
// CHECK: moe.gather_rows %{{.*}}, %{{.*}} on @grid axes = [1] : (tensor<4x64x32xf32>, tensor<4x2xi32>) -> (tensor<4x64x32xf32>, tensor<4x4xi32>)
// CHECK: moe.scatter_rows %{{.*}}, %{{.*}} on @grid axes = [1] : (tensor<4x64x32xf32>, tensor<4x4xi32>) -> tensor<4x64x32xf32>
func.func @rows(%x: tensor<4x64x32xf32>, %r: tensor<4x2xi32>) -> tensor<4x64x32xf32> {
  %g, %gr = moe.gather_rows %x, %r on @grid axes = [1] : (tensor<4x64x32xf32>, tensor<4x2xi32>) -> (tensor<4x64x32xf32>, tensor<4x4xi32>)
  %s = moe.scatter_rows %g, %gr on @grid axes = [1] : (tensor<4x64x32xf32>, tensor<4x4xi32>) -> tensor<4x64x32xf32>
  return %s : tensor<4x64x32xf32>
}

// -----

shard.grid @grid(shape = 2x2)
func.func @gathered_columns(%x: tensor<4x64x32xf32>, %r: tensor<4x2xi32>) {
  // expected-error @+1 {{'gathered_rows' dimension 1 (the group's S ranks x the rows' G columns) must be 4, got 2}}
  %g, %gr = moe.gather_rows %x, %r on @grid axes = [1] : (tensor<4x64x32xf32>, tensor<4x2xi32>) -> (tensor<4x64x32xf32>, tensor<4x2xi32>)
  return
}

// -----

shard.grid @grid(shape = 2x2)
func.func @bound_changes(%x: tensor<4x64x32xf32>, %r: tensor<4x2xi32>) {
  // expected-error @+1 {{keeps the expert side's type}}
  %g, %gr = moe.gather_rows %x, %r on @grid axes = [1] : (tensor<4x64x32xf32>, tensor<4x2xi32>) -> (tensor<4x128x32xf32>, tensor<4x4xi32>)
  return
}

// -----

shard.grid @grid(shape = 2x2)
func.func @rows_experts(%x: tensor<4x64x32xf32>, %r: tensor<2x2xi32>) {
  // expected-error @+1 {{'rows' dimension 0 (local experts E_l) must be 4, got 2}}
  %g, %gr = moe.gather_rows %x, %r on @grid axes = [1] : (tensor<4x64x32xf32>, tensor<2x2xi32>) -> (tensor<4x64x32xf32>, tensor<4x4xi32>)
  return
}

// -----

shard.grid @grid(shape = 2x4)
func.func @scatter_not_gathered(%y: tensor<4x64x32xf32>, %r: tensor<4x2xi32>) {
  // expected-error @+1 {{'rows' must be gathered counts: 2 columns do not divide over the group's 4 ranks}}
  %s = moe.scatter_rows %y, %r on @grid axes = [1] : (tensor<4x64x32xf32>, tensor<4x2xi32>) -> tensor<4x64x32xf32>
  return
}
