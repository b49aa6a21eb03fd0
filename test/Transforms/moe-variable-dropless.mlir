// moe-variable-dropless: a dropless dispatch gets a static bound R and a
// `rows : E_l x G` result, which its expert and combine take; nothing is
// padded to a capacity. Gates with a capacity are left alone.
// RUN: moe-opt %moe_src_root/examples/mixtral-style-2block.mlir --moe-variable-dropless | FileCheck %s
// RUN: moe-opt %moe_src_root/examples/mixtral-style-2block.mlir --moe-variable-dropless=bound=100 | FileCheck %s --check-prefix=BOUND
// RUN: moe-opt %moe_src_root/examples/gpt-moe-2block.mlir --moe-variable-dropless | FileCheck %s --check-prefix=CAPPED
// The named pipeline runs it after moe-microbatch: R = 2 halves the tokens.
// RUN: moe-opt %moe_src_root/examples/mixtral-style-2block.mlir --moe-flowmoe-pipeline="degree=2 chunk-bytes=64KiB" | FileCheck %s --check-prefix=PIPE
// RUN: not moe-opt %moe_src_root/examples/mixtral-style-2block.mlir --moe-variable-dropless=bound=-3 2>&1 | FileCheck %s --check-prefix=NEG
// The verifier wants both halves of the variable form.
// RUN: moe-opt %moe_src_root/examples/mixtral-style-2block.mlir --moe-variable-dropless | sed -e 's/ bound = 256//' | not moe-opt 2>&1 | FileCheck %s --check-prefix=HALF

// B = 2, N = 32: T = 64 tokens per rank; E = 8 over G = 4 ranks, E_l = 2.
// The worst case: every rank sends all its 64 tokens to one expert, 256.
// CHECK: dropless, grid = @cluster
// CHECK: moe.gate softmax_topk {{.*}} experts = 8 top_k = 2 normalize :
// CHECK: %[[D:[a-z0-9_]+]], %[[R:[a-z0-9_]+]] = moe.dispatch {{.*}} experts = 8 bound = 256 : {{.*}} -> (tensor<2x256x64xf32>, tensor<2x4xi32>)
// CHECK: moe.expert silu %[[D]] {{.*}} rows(%[[R]]) : {{.*}} -> tensor<2x256x64xf32>
// CHECK: moe.combine {{.*}} rows(%[[R]]) on @cluster
// CHECK-NOT: x?x

// BOUND: moe.dispatch {{.*}} bound = 100 : {{.*}} -> (tensor<2x100x64xf32>, tensor<2x4xi32>)

// CAPPED-NOT: bound =
// CAPPED-NOT: rows(
// CAPPED: moe.dispatch {{.*}} capacity = 77

// PIPE: moe.dispatch {{.*}} bound = 128 : {{.*}} -> (tensor<2x128x64xf32>, tensor<2x4xi32>)
// PIPE: rows(
// PIPE-NOT: x?x

// NEG: bound must be positive (or 0 for the worst case), got -3

// HALF: variable-count dispatch needs both a 'bound' and a 'rows' result
