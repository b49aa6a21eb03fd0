// moe.routing_counts (routing statistics): token-choice indices B x N x k
// in, the whole group's samples x experts out; the verifier checks both
// against the group.
// RUN: moe-opt %s -split-input-file -verify-diagnostics | FileCheck %s

shard.grid @grid(shape = 2x2)
// CHECK-LABEL: func.func @ok
// CHECK: moe.routing_counts %{{.*}} on @grid axes = [0, 1] experts = 8 : (tensor<2x64x2xi32>) -> tensor<8x8xi32>
func.func @ok(%idx: tensor<2x64x2xi32>) -> tensor<8x8xi32> {
  %n = moe.routing_counts %idx on @grid axes = [0, 1] experts = 8 : (tensor<2x64x2xi32>) -> tensor<8x8xi32>
  return %n : tensor<8x8xi32>
}

// -----

shard.grid @grid(shape = 2x2)
func.func @rows(%idx: tensor<2x64x2xi32>) {
  // expected-error @+1 {{'result' dimension 0 (group size x samples per rank) must be 8, got 4 in shape 4x8}}
  %n = moe.routing_counts %idx on @grid axes = [0, 1] experts = 8 : (tensor<2x64x2xi32>) -> tensor<4x8xi32>
  return
}

// -----

shard.grid @grid(shape = 2x2)
func.func @columns(%idx: tensor<2x64x2xi32>) {
  // expected-error @+1 {{'result' dimension 1 (experts E) must be 8, got 6 in shape 8x6}}
  %n = moe.routing_counts %idx on @grid axes = [0, 1] experts = 8 : (tensor<2x64x2xi32>) -> tensor<8x6xi32>
  return
}

// -----

shard.grid @grid(shape = 2x2)
func.func @expert_choice(%idx: tensor<8x16xi32>) {
  // expected-error @+1 {{counts token-choice routing: indices B x N x k and a samples x experts result, got 8x16 and 8x8}}
  %n = moe.routing_counts %idx on @grid axes = [0, 1] experts = 8 : (tensor<8x16xi32>) -> tensor<8x8xi32>
  return
}

// -----

shard.grid @grid(shape = 2x3)
func.func @uneven(%idx: tensor<2x64x2xi32>) {
  // expected-error @+1 {{8 experts cannot be spread evenly over a group of 6 ranks}}
  %n = moe.routing_counts %idx on @grid axes = [0, 1] experts = 8 : (tensor<2x64x2xi32>) -> tensor<12x8xi32>
  return
}
