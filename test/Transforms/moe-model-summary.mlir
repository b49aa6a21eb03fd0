// RUN: moe-opt %s --moe-model-summary -o /dev/null | FileCheck %s
// RUN: moe-opt %s --moe-model-summary="json=true" -o /dev/null | FileCheck %s --check-prefix=JSON
// RUN: moe-opt %moe_src_root/examples/gpt2-tiny-moe.mlir --moe-model-summary -o /dev/null | FileCheck %s --check-prefix=TINY
// RUN: not moe-opt %s --moe-model-summary="output=/nonexistent/dir/x" -o /dev/null 2>&1 | FileCheck %s --check-prefix=BADOUT
// RUN: echo 'func.func @f() { return }' | not moe-opt --moe-model-summary -o /dev/null 2>&1 | FileCheck %s --check-prefix=NOMODEL

// A hand-computable model: 1 block, M = 16, H = 32, E = 8 on a 1x4 grid
// (E/P = 2), k = 2, f = 1.0, B = 2, N = 8: C = ceil(2*16/8) = 4.
// Dense per block: wq 256 + wk 128 + wv 128 + wo 256 + rms scale 16 +
// gate 128 = 912 params = 3648 bytes. Local experts: 3 x 2x16x32 = 3072
// params; all ranks: 4 x 3072 = 12288. Dispatch: E x C x M x 4 B =
// 8 x 4 x 16 x 4 = 2048 bytes per rank. Outside blocks: the 32x16 table.

// CHECK:      model @m
// CHECK-NEXT:   L=1 B=2 N=8 M=16 H=32 E=8 k=2 f=1 C=4
// CHECK-NEXT:   grid @cluster: 4 ranks; expert-parallel 4, data-parallel 4, intra-node 4; E/P=2
// CHECK-NEXT:   params: replicated 1424 (blocks 912, outside blocks 512), experts on all ranks 12288
// CHECK-NEXT:   block 0: dense 912 params, all-reduce 3648 B, local experts 3072 params, dispatch 2048 B/rank x1

// JSON: "all_reduce_bytes": 3648
// JSON: "capacity": 4
// JSON: "dense_params": 1424
// JSON: "expert_params": 12288
// JSON: "outer_dense_params": 512

// FlowMoE Table 2, GPT2-Tiny-MoE on 16 GPUs: MHA+gate 3.2M (12 x (4 x 256^2
// + 256 x 16) + norms 12 x 4 x 256 = 3207168), experts 50.3M without biases
// (12 x 16 x 2 x 256 x 512 = 50331648; the paper's 50.4M includes biases).
// TINY: L=12 B=4 N=256 M=256 H=512 E=16 k=2 f=1 C=128
// TINY: grid @cluster: 16 ranks; expert-parallel 16, data-parallel 16, intra-node 8; E/P=1
// TINY: params: replicated {{[0-9]+}} (blocks 3207168, outside blocks {{[0-9]+}}), experts on all ranks 50331648
// TINY: block 11: dense 267264 params, all-reduce 1069056 B, local experts 262144 params, dispatch 2097152 B/rank x1

// BADOUT: moe-model-summary: {{.*}}
// NOMODEL: no function carries a #moe.model attribute

shard.grid @cluster(shape = 1x4)
func.func @m(%ids: tensor<2x8xi64>, %table: tensor<32x16xf32>,
             %wq: tensor<16x16xf32>, %wk: tensor<16x8xf32>,
             %wv: tensor<16x8xf32>, %wo: tensor<16x16xf32>,
             %g: tensor<16xf32>, %wg: tensor<16x8xf32>,
             %up: tensor<2x16x32xf32>, %gp: tensor<2x16x32xf32>,
             %down: tensor<2x32x16xf32>) -> tensor<2x8x16xf32>
    attributes {moe.model = #moe.model<layers = 1, batch = 2, seq = 8, embed = 16, hidden = 32, experts = 8, top_k = 2, capacity_factor = 1.0, grid = @cluster, ep_axes = [1], dp_axes = [1], intra_axes = [1]>} {
  %x = moe.embedding %ids, %table : (tensor<2x8xi64>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
  %r = moe.block 0 (%h = %x : tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
    %a = moe.attention %h weights(%wq, %wk, %wv, %wo) heads = 4 kv_heads = 2 head_dim = 4 causal prenorm rms(%g) : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
    %h1 = arith.addf %h, %a : tensor<2x8x16xf32>
    %idx, %w, %cnt = moe.gate softmax_topk %h1, %wg experts = 8 top_k = 2 capacity_factor = 1.0 capacity = 4 : (tensor<2x8x16xf32>, tensor<16x8xf32>) -> (tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<8xi32>)
    %d = moe.dispatch %h1, %idx, %cnt on @cluster axes = [1] experts = 8 capacity = 4 : (tensor<2x8x16xf32>, tensor<2x8x2xi32>, tensor<8xi32>) -> tensor<2x16x16xf32>
    %e = moe.expert silu %d up(%up) gate(%gp) down(%down) : (tensor<2x16x16xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>, tensor<2x32x16xf32>) -> tensor<2x16x16xf32>
    %c = moe.combine %e, %idx, %w, %cnt on @cluster axes = [1] experts = 8 capacity = 4 : (tensor<2x16x16xf32>, tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<8xi32>) -> tensor<2x8x16xf32>
    %o = arith.addf %h1, %c : tensor<2x8x16xf32>
    moe.yield %o : tensor<2x8x16xf32>
  }
  return %r : tensor<2x8x16xf32>
}
