// A one-block model used by the pass tests: B = 4, N = 8, M = 16, H = 32,
// E = 8 experts over 4 ranks (E/P = 2), k = 2, f = 1.0 (C = 8).
shard.grid @cluster(shape = 1x4)
func.func @m(%ids: tensor<4x8xi64>, %labels: tensor<4x8xi64>,
             %table: tensor<32x16xf32> {moe.param = "embed"},
             %wq: tensor<16x16xf32> {moe.param = "wq"},
             %wk: tensor<16x8xf32> {moe.param = "wk"},
             %wv: tensor<16x8xf32> {moe.param = "wv"},
             %wo: tensor<16x16xf32> {moe.param = "wo"},
             %g: tensor<16xf32> {moe.param = "norm"},
             %wg: tensor<16x8xf32> {moe.param = "gate"},
             %up: tensor<2x16x32xf32> {moe.param = "up"},
             %down: tensor<2x32x16xf32> {moe.param = "down"},
             %head: tensor<16x32xf32> {moe.param = "head"}) -> tensor<f32>
    attributes {moe.model = #moe.model<layers = 1, batch = 4, seq = 8, embed = 16, hidden = 32, experts = 8, top_k = 2, capacity_factor = 1.0, grid = @cluster, ep_axes = [1], dp_axes = [1], intra_axes = [1]>} {
  %x = moe.embedding %ids, %table : (tensor<4x8xi64>, tensor<32x16xf32>) -> tensor<4x8x16xf32>
  %r = moe.block 0 (%h = %x : tensor<4x8x16xf32>) -> tensor<4x8x16xf32> {
    %a = moe.attention %h weights(%wq, %wk, %wv, %wo) heads = 4 kv_heads = 2 head_dim = 4 causal prenorm rms(%g) : (tensor<4x8x16xf32>, tensor<16x16xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<4x8x16xf32>
    %h1 = arith.addf %h, %a : tensor<4x8x16xf32>
    %idx, %w, %cnt = moe.gate softmax_topk %h1, %wg experts = 8 top_k = 2 capacity_factor = 1.0 capacity = 8 : (tensor<4x8x16xf32>, tensor<16x8xf32>) -> (tensor<4x8x2xi32>, tensor<4x8x2xf32>, tensor<8xi32>)
    %d = moe.dispatch %h1, %idx, %cnt on @cluster axes = [1] experts = 8 capacity = 8 : (tensor<4x8x16xf32>, tensor<4x8x2xi32>, tensor<8xi32>) -> tensor<2x32x16xf32>
    %e = moe.expert relu %d up(%up) down(%down) : (tensor<2x32x16xf32>, tensor<2x16x32xf32>, tensor<2x32x16xf32>) -> tensor<2x32x16xf32>
    %c = moe.combine %e, %idx, %w, %cnt on @cluster axes = [1] experts = 8 capacity = 8 : (tensor<2x32x16xf32>, tensor<4x8x2xi32>, tensor<4x8x2xf32>, tensor<8xi32>) -> tensor<4x8x16xf32>
    %o = arith.addf %h1, %c : tensor<4x8x16xf32>
    moe.yield %o : tensor<4x8x16xf32>
  }
  %logits = moe.linear %r, %head : (tensor<4x8x16xf32>, tensor<16x32xf32>) -> tensor<4x8x32xf32>
  %loss = moe.cross_entropy %logits, %labels : (tensor<4x8x32xf32>, tensor<4x8xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}
