// The expert placement operand (docs/load-aware.md §2): `expert_slots(%t)`
// on variable-count dispatch and combine, a G x S slot table (S = E/G, one
// slot per expert); the verifier checks its shape against the group and
// refuses it on padded routing. Its values (a permutation of the experts)
// are data: test/Runtime/expert-placement.test checks those.
// RUN: moe-opt %s -split-input-file -verify-diagnostics | FileCheck %s

shard.grid @grid(shape = 2x2)
// CHECK-LABEL: func.func @ok
// CHECK: moe.dispatch %{{.*}}, %{{.*}}, %{{.*}} expert_slots(%{{.*}}) on @grid axes = [0, 1] experts = 8 bound = 64
// CHECK: moe.combine {{.*}} rows(%{{.*}}) expert_slots(%{{.*}}) on @grid
// CHECK: moe.combine {{.*}} rows(%{{.*}}) residual(%{{.*}}) to(%{{.*}}) expert_slots(%{{.*}}) on @grid
func.func @ok(%x: tensor<2x16x32xf32>, %idx: tensor<2x16x2xi32>,
              %w: tensor<2x16x2xf32>, %cnt: tensor<8xi32>,
              %t: tensor<4x2xi64>, %p: tensor<8xi32>) -> tensor<2x16x32xf32> {
  %d, %rows = moe.dispatch %x, %idx, %cnt expert_slots(%t) on @grid axes = [0, 1] experts = 8 bound = 64 : (tensor<2x16x32xf32>, tensor<2x16x2xi32>, tensor<8xi32>, tensor<4x2xi64>) -> (tensor<2x64x32xf32>, tensor<2x4xi32>)
  %c = moe.combine %d, %idx, %w, %cnt rows(%rows) expert_slots(%t) on @grid axes = [0, 1] experts = 8 : (tensor<2x64x32xf32>, tensor<2x16x2xi32>, tensor<2x16x2xf32>, tensor<8xi32>, tensor<2x4xi32>, tensor<4x2xi64>) -> tensor<2x16x32xf32>
  %n = moe.combine %d, %idx, %w, %cnt rows(%rows) residual(%d) to(%p) expert_slots(%t) on @grid axes = [0, 1] experts = 8 : (tensor<2x64x32xf32>, tensor<2x16x2xi32>, tensor<2x16x2xf32>, tensor<8xi32>, tensor<2x4xi32>, tensor<2x64x32xf32>, tensor<8xi32>, tensor<4x2xi64>) -> tensor<2x16x32xf32>
  return %c : tensor<2x16x32xf32>
}

// -----

shard.grid @grid(shape = 2x2)
func.func @groups(%x: tensor<2x16x32xf32>, %idx: tensor<2x16x2xi32>,
                  %cnt: tensor<8xi32>, %t: tensor<2x4xi64>) {
  // expected-error @+1 {{'expert_slots' dimension 0 (group size G) must be 4, got 2 in shape 2x4}}
  %d, %rows = moe.dispatch %x, %idx, %cnt expert_slots(%t) on @grid axes = [0, 1] experts = 8 bound = 64 : (tensor<2x16x32xf32>, tensor<2x16x2xi32>, tensor<8xi32>, tensor<2x4xi64>) -> (tensor<2x64x32xf32>, tensor<2x4xi32>)
  return
}

// -----

shard.grid @grid(shape = 2x2)
func.func @slots(%y: tensor<2x64x32xf32>, %idx: tensor<2x16x2xi32>,
                 %w: tensor<2x16x2xf32>, %cnt: tensor<8xi32>,
                 %rows: tensor<2x4xi32>, %t: tensor<4x3xi64>) {
  // expected-error @+1 {{'expert_slots' dimension 1 (slots per rank S = E/G (one slot per expert)) must be 2, got 3 in shape 4x3}}
  %c = moe.combine %y, %idx, %w, %cnt rows(%rows) expert_slots(%t) on @grid axes = [0, 1] experts = 8 : (tensor<2x64x32xf32>, tensor<2x16x2xi32>, tensor<2x16x2xf32>, tensor<8xi32>, tensor<2x4xi32>, tensor<4x3xi64>) -> tensor<2x16x32xf32>
  return
}

// -----

shard.grid @grid(shape = 2x2)
func.func @rank(%x: tensor<2x16x32xf32>, %idx: tensor<2x16x2xi32>,
                %cnt: tensor<8xi32>, %t: tensor<8xi64>) {
  // expected-error @+1 {{'expert_slots' must have rank 2}}
  %d, %rows = moe.dispatch %x, %idx, %cnt expert_slots(%t) on @grid axes = [0, 1] experts = 8 bound = 64 : (tensor<2x16x32xf32>, tensor<2x16x2xi32>, tensor<8xi32>, tensor<8xi64>) -> (tensor<2x64x32xf32>, tensor<2x4xi32>)
  return
}

// -----

shard.grid @grid(shape = 2x2)
func.func @padded(%y: tensor<2x16x32xf32>, %idx: tensor<2x16x2xi32>,
                  %w: tensor<2x16x2xf32>, %cnt: tensor<8xi32>, %t: tensor<4x2xi64>) {
  // expected-error @+1 {{'expert_slots' needs variable-count routing ('rows'; moe-variable-dropless)}}
  %c = moe.combine %y, %idx, %w, %cnt expert_slots(%t) on @grid axes = [0, 1] experts = 8 capacity = 4 : (tensor<2x16x32xf32>, tensor<2x16x2xi32>, tensor<2x16x2xf32>, tensor<8xi32>, tensor<4x2xi64>) -> tensor<2x16x32xf32>
  return
}
