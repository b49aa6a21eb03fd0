// moe-bound-dropless: dropless gates get f = E/k (C >= the rank's tokens),
// dispatch / expert / combine get static slot counts, the model attribute
// the same f. Gates that already have a capacity are left alone.
// RUN: moe-opt %moe_src_root/examples/mixtral-style-2block.mlir --moe-bound-dropless | FileCheck %s
// E = 8, k = 3: f = 8/3 rounded up to 2.666667, C = ceil(f·3·64/8) = 65.
// RUN: %python %moe_src_root/python/gen_model_mlir.py mixtral-style-2block --set top_k=3 | moe-opt --moe-bound-dropless | FileCheck %s --check-prefix=K3
// RUN: moe-opt %moe_src_root/examples/gpt-moe-2block.mlir --moe-bound-dropless | FileCheck %s --check-prefix=CAPPED

// B = 2, N = 32: T = 64 tokens per rank, E = 8, k = 2: f = 4, C = 64;
// E_l = 2 experts per rank, G = 4 ranks: 2 x 256 slots.
// CHECK: capacity_factor = 4.0, grid = @cluster
// CHECK: moe.gate softmax_topk {{.*}} experts = 8 top_k = 2 capacity_factor = 4.0 capacity = 64 normalize
// CHECK: moe.dispatch {{.*}} capacity = 64 : {{.*}} -> tensor<2x256x64xf32>
// CHECK: moe.expert silu {{.*}} -> tensor<2x256x64xf32>
// CHECK: moe.combine {{.*}} capacity = 64 : (tensor<2x256x64xf32>
// CHECK-NOT: x?x

// K3: capacity_factor = 2.666667
// K3: moe.gate softmax_topk {{.*}} top_k = 3 capacity_factor = 2.666667 capacity = 65
// K3: moe.dispatch {{.*}} -> tensor<2x260x64xf32>

// CAPPED: capacity_factor = 1.2
// CAPPED: moe.gate softmax_topk {{.*}} capacity_factor = 1.2 capacity = 77
