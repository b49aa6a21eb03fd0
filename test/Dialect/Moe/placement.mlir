// NetMoE's placement ops (docs/netmoe-in-the-step.md): the planner, the
// move of what follows a sample, and the placing combine; the verifier
// checks their shapes against the group.
// RUN: moe-opt %s -split-input-file -verify-diagnostics | FileCheck %s

shard.grid @grid(shape = 2x2)
// CHECK-LABEL: func.func @ok
// CHECK: moe.plan_placement %{{.*}} on @grid axes = [0, 1] experts = 8 : (tensor<8x8xi32>) -> tensor<8xi32>
// CHECK: moe.plan_placement %{{.*}} experts = 8 identity :
// CHECK: moe.plan_placement %{{.*}} experts = 8 gather_only :
// CHECK: moe.move_samples %{{.*}} to(%{{.*}}) on @grid axes = [0, 1] : (tensor<2x16xi64>, tensor<8xi32>) -> tensor<2x16xi64>
// CHECK: moe.combine {{.*}} rows(%{{.*}}) residual(%{{.*}}) to(%{{.*}}) on @grid
func.func @ok(%n: tensor<8x8xi32>, %labels: tensor<2x16xi64>,
              %y: tensor<2x128x32xf32>, %idx: tensor<2x16x2xi32>,
              %w: tensor<2x16x2xf32>, %cnt: tensor<8xi32>,
              %rows: tensor<2x4xi32>, %h: tensor<2x128x32xf32>) -> tensor<2x16x32xf32> {
  %p = moe.plan_placement %n on @grid axes = [0, 1] experts = 8 : (tensor<8x8xi32>) -> tensor<8xi32>
  %q = moe.plan_placement %n on @grid axes = [0, 1] experts = 8 identity : (tensor<8x8xi32>) -> tensor<8xi32>
  %g = moe.plan_placement %n on @grid axes = [0, 1] experts = 8 gather_only : (tensor<8x8xi32>) -> tensor<8xi32>
  %l = moe.move_samples %labels to(%p) on @grid axes = [0, 1] : (tensor<2x16xi64>, tensor<8xi32>) -> tensor<2x16xi64>
  %c = moe.combine %y, %idx, %w, %cnt rows(%rows) residual(%h) to(%p) on @grid axes = [0, 1] experts = 8 : (tensor<2x128x32xf32>, tensor<2x16x2xi32>, tensor<2x16x2xf32>, tensor<8xi32>, tensor<2x4xi32>, tensor<2x128x32xf32>, tensor<8xi32>) -> tensor<2x16x32xf32>
  return %c : tensor<2x16x32xf32>
}

// -----

shard.grid @grid(shape = 2x2)
func.func @uneven(%n: tensor<6x8xi32>) {
  // expected-error @+1 {{6 samples cannot be placed evenly on 4 ranks}}
  %p = moe.plan_placement %n on @grid axes = [0, 1] experts = 8 : (tensor<6x8xi32>) -> tensor<6xi32>
  return
}

// -----

shard.grid @grid(shape = 2x2)
func.func @samples(%n: tensor<8x8xi32>) {
  // expected-error @+1 {{'result' dimension 0 (samples (the counts' rows)) must be 8, got 4 in shape 4}}
  %p = moe.plan_placement %n on @grid axes = [0, 1] experts = 8 : (tensor<8x8xi32>) -> tensor<4xi32>
  return
}

// -----

shard.grid @grid(shape = 2x2)
func.func @move(%labels: tensor<2x16xi64>, %p: tensor<4xi32>) {
  // expected-error @+1 {{'placement' dimension 0 (group size x samples per rank) must be 8, got 4 in shape 4}}
  %l = moe.move_samples %labels to(%p) on @grid axes = [0, 1] : (tensor<2x16xi64>, tensor<4xi32>) -> tensor<2x16xi64>
  return
}

// -----

shard.grid @grid(shape = 2x2)
func.func @capacity(%y: tensor<2x16x32xf32>, %idx: tensor<2x16x2xi32>,
                    %w: tensor<2x16x2xf32>, %cnt: tensor<8xi32>, %p: tensor<8xi32>) {
  // expected-error @+1 {{places samples only in dropless routing}}
  %c = moe.combine %y, %idx, %w, %cnt to(%p) on @grid axes = [0, 1] experts = 8 capacity = 4 : (tensor<2x16x32xf32>, tensor<2x16x2xi32>, tensor<2x16x2xf32>, tensor<8xi32>, tensor<8xi32>) -> tensor<2x16x32xf32>
  return
}

// -----

shard.grid @grid(shape = 2x2)
func.func @residual_alone(%y: tensor<2x128x32xf32>, %idx: tensor<2x16x2xi32>,
                          %w: tensor<2x16x2xf32>, %cnt: tensor<8xi32>,
                          %rows: tensor<2x4xi32>, %h: tensor<2x128x32xf32>) {
  // expected-error @+1 {{an inlined residual needs a placement ('to')}}
  %c = moe.combine %y, %idx, %w, %cnt rows(%rows) residual(%h) on @grid axes = [0, 1] experts = 8 : (tensor<2x128x32xf32>, tensor<2x16x2xi32>, tensor<2x16x2xf32>, tensor<8xi32>, tensor<2x4xi32>, tensor<2x128x32xf32>) -> tensor<2x16x32xf32>
  return
}

// -----

shard.grid @grid(shape = 2x2)
func.func @place_size(%y: tensor<2x128x32xf32>, %idx: tensor<2x16x2xi32>,
                      %w: tensor<2x16x2xf32>, %cnt: tensor<8xi32>,
                      %rows: tensor<2x4xi32>, %p: tensor<2xi32>) {
  // expected-error @+1 {{'placement' dimension 0 (group size x samples per rank) must be 8, got 2 in shape 2}}
  %c = moe.combine %y, %idx, %w, %cnt rows(%rows) to(%p) on @grid axes = [0, 1] experts = 8 : (tensor<2x128x32xf32>, tensor<2x16x2xi32>, tensor<2x16x2xf32>, tensor<8xi32>, tensor<2x4xi32>, tensor<2xi32>) -> tensor<2x16x32xf32>
  return
}
