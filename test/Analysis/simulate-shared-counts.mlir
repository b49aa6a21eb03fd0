// One counts exchange per layer (docs/variable-dropless.md): the token
// chunks of a variable-count layer read their sizes from the layer's
// moe.exchange_counts (`all_counts`), so the simulator charges the counts
// all-gather once, as that op, and none to the chunks; a chunk without
// `all_counts` pays its own.
// RUN: moe-opt %s --moe-verify-schedule --moe-simulate="profile=%S/Inputs/two-node-unit-profile.json json=true" --moe-trace=%t.shared.json -o /dev/null | FileCheck %s --check-prefix=SHARED
// RUN: %python -c "import json,sys; t=json.load(open(sys.argv[1])); print(sorted((e['ts'], e['ts'] + e['dur'], e['args']['op']) for e in t['traceEvents'] if e['ph'] == 'X' and e['pid'] == 0))" %t.shared.json | FileCheck %s --check-prefix=TRACE
// Each chunk exchanging its own counts (the step before this change):
// RUN: sed -e '/moe.exchange_counts/d' -e 's/ all_counts(%[a-z]*)//' -e 's/, tensor<4x8xi32>) ->/) ->/' -e 's/, %m = %n : tensor<4x8xi32>//' %s > %t.own.mlir
// RUN: moe-opt %t.own.mlir --moe-verify-schedule --moe-simulate="profile=%S/Inputs/two-node-unit-profile.json json=true" -o /dev/null | FileCheck %s --check-prefix=OWN
//
// By hand (2 x 2 ranks, the unit profile: all-to-all 1 us/B, all-gather
// 0.25 us/B, no latency; B = 2 samples of N = 16 tokens, k = 2, M = 8):
// - the exchange: G x E = 4 x 8 i32 counts, 128 B at 0.25 us/B = 32 us;
// - a chunk j of r = 2 (dispatch or its vjp): T k M 4 / r = 32 x 2 x 32 / 2
//   = 1024 B, half of it to the other node, at 1 us/B = 512 us;
// - one comm stream, in order: exchange [0, 32], D_0 [32, 544], D_1
//   [544, 1056], D'_0 [1056, 1568], D'_1 [1568, 2080].
// Without the shared exchange every chunk all-gathers its own counts:
// 4 x (512 + 32) = 2176 us. (Charging the exchange nothing gives 2048,
// charging it and the chunks too 2208.)
// SHARED: "comm_busy_us": 2080,
// SHARED: "iteration_us": 2080,
// TRACE: [(0, 32, 'moe.exchange_counts'), (32, 544, 'moe.dispatch'), (544, 1056, 'moe.dispatch'), (1056, 1568, 'moe.vjp'), (1568, 2080, 'moe.vjp')]
// OWN: "comm_busy_us": 2176,
// OWN: "iteration_us": 2176,

shard.grid @grid(shape = 2x2)
func.func @chunked_layer(%x: tensor<2x16x8xf32>, %idx: tensor<2x16x2xi32>,
                         %cnt: tensor<8xi32>, %dy: tensor<2x64x8xf32>)
    -> (tensor<2x64x8xf32>, tensor<2x64x8xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32>) attributes {moe.schedule = "test"} {
  %n = moe.exchange_counts %idx on @grid axes = [0, 1] experts = 8 {moe.stream = #moe.stream<comm>} : (tensor<2x16x2xi32>) -> tensor<4x8xi32>
  %d0, %r0 = moe.dispatch %x, %idx, %cnt all_counts(%n) on @grid axes = [0, 1] experts = 8 bound = 64 part [0, 2] {moe.stream = #moe.stream<comm>} : (tensor<2x16x8xf32>, tensor<2x16x2xi32>, tensor<8xi32>, tensor<4x8xi32>) -> (tensor<2x64x8xf32>, tensor<2x4xi32>)
  %d1, %r1 = moe.dispatch %x, %idx, %cnt all_counts(%n) on @grid axes = [0, 1] experts = 8 bound = 64 part [1, 2] {moe.stream = #moe.stream<comm>} : (tensor<2x16x8xf32>, tensor<2x16x2xi32>, tensor<8xi32>, tensor<4x8xi32>) -> (tensor<2x64x8xf32>, tensor<2x4xi32>)
  %g0 = moe.vjp (%a = %x : tensor<2x16x8xf32>, %b = %idx : tensor<2x16x2xi32>, %c = %cnt : tensor<8xi32>, %m = %n : tensor<4x8xi32>) cotangents(%dy : tensor<2x64x8xf32>) -> (tensor<2x16x8xf32>) attributes {moe.stream = #moe.stream<comm>} {
    %e, %s = moe.dispatch %a, %b, %c all_counts(%m) on @grid axes = [0, 1] experts = 8 bound = 64 part [0, 2] : (tensor<2x16x8xf32>, tensor<2x16x2xi32>, tensor<8xi32>, tensor<4x8xi32>) -> (tensor<2x64x8xf32>, tensor<2x4xi32>)
    moe.yield %e, %s : tensor<2x64x8xf32>, tensor<2x4xi32>
  }
  %g1 = moe.vjp (%a = %x : tensor<2x16x8xf32>, %b = %idx : tensor<2x16x2xi32>, %c = %cnt : tensor<8xi32>, %m = %n : tensor<4x8xi32>) cotangents(%dy : tensor<2x64x8xf32>) -> (tensor<2x16x8xf32>) attributes {moe.stream = #moe.stream<comm>} {
    %e, %s = moe.dispatch %a, %b, %c all_counts(%m) on @grid axes = [0, 1] experts = 8 bound = 64 part [1, 2] : (tensor<2x16x8xf32>, tensor<2x16x2xi32>, tensor<8xi32>, tensor<4x8xi32>) -> (tensor<2x64x8xf32>, tensor<2x4xi32>)
    moe.yield %e, %s : tensor<2x64x8xf32>, tensor<2x4xi32>
  }
  return %d0, %d1, %g0, %g1 : tensor<2x64x8xf32>, tensor<2x64x8xf32>, tensor<2x16x8xf32>, tensor<2x16x8xf32>
}
