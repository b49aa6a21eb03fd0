// Round-trip of every moe op, attribute and type: the printed form parses
// back to the same IR, in custom and in generic form.
// RUN: moe-opt %s | moe-opt | FileCheck %s
// RUN: moe-opt %s --mlir-print-op-generic | moe-opt | FileCheck %s

shard.grid @grid(shape = 2x2)

// CHECK-LABEL: func.func @dense
func.func @dense(%ids: tensor<2x8xi64>, %table: tensor<32x16xf32>,
                 %s: tensor<16xf32>, %b: tensor<16xf32>,
                 %w: tensor<16x32xf32>, %wb: tensor<32xf32>) -> tensor<f32> {
  // CHECK: moe.embedding %{{.*}}, %{{.*}} : (tensor<2x8xi64>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
  %h0 = moe.embedding %ids, %table : (tensor<2x8xi64>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
  // CHECK: moe.position_embedding %{{.*}}, %{{.*}} : (tensor<2x8x16xf32>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
  %h = moe.position_embedding %h0, %table : (tensor<2x8x16xf32>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
  // CHECK: moe.norm layer %{{.*}}, %{{.*}}, %{{.*}} : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  %n = moe.norm layer %h, %s, %b : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  // CHECK: moe.norm rms %{{.*}}, %{{.*}} {epsilon = 9.9999999999999995E-7 : f64}
  %r = moe.norm rms %n, %s {epsilon = 1.0e-6 : f64} : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  // CHECK: moe.linear %{{.*}}, %{{.*}} : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  %l0 = moe.linear %r, %w : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x32xf32>
  // CHECK: moe.linear %{{.*}}, %{{.*}} bias(%{{.*}}) : (tensor<2x8x16xf32>, tensor<16x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  %l1 = moe.linear %r, %w bias(%wb) : (tensor<2x8x16xf32>, tensor<16x32xf32>, tensor<32xf32>) -> tensor<2x8x32xf32>
  // CHECK: moe.cross_entropy %{{.*}}, %{{.*}} : (tensor<2x8x32xf32>, tensor<2x8xi64>) -> tensor<f32>
  %loss = moe.cross_entropy %l1, %ids : (tensor<2x8x32xf32>, tensor<2x8xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}

// CHECK-LABEL: func.func @attention
func.func @attention(%x: tensor<2x8x16xf32>, %wq: tensor<16x16xf32>,
                     %wkv: tensor<16x8xf32>, %wo: tensor<16x16xf32>,
                     %s: tensor<16xf32>, %b: tensor<16xf32>)
    -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>) {
  // CHECK: moe.attention %{{.*}} weights(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}) heads = 2 kv_heads = 2 head_dim = 8 :
  %a = moe.attention %x weights(%wq, %wq, %wq, %wo) heads = 2 kv_heads = 2 head_dim = 8 : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  // CHECK: heads = 4 kv_heads = 2 head_dim = 4 causal rotary prenorm rms(%{{.*}}) :
  %g = moe.attention %x weights(%wq, %wkv, %wkv, %wo) heads = 4 kv_heads = 2 head_dim = 4 causal rotary prenorm rms(%s) : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  // CHECK: heads = 2 kv_heads = 2 head_dim = 8 causal prenorm layer(%{{.*}}, %{{.*}}) :
  %l = moe.attention %x weights(%wq, %wq, %wq, %wo) heads = 2 kv_heads = 2 head_dim = 8 causal prenorm layer(%s, %b) : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  return %a, %g, %l : tensor<2x8x16xf32>, tensor<2x8x16xf32>, tensor<2x8x16xf32>
}

// Rotary base and layout, Q/K/V and output biases (Qwen2, nn.MHA).
// CHECK-LABEL: func.func @attention_variants
func.func @attention_variants(%x: tensor<2x8x16xf32>, %wq: tensor<16x16xf32>,
                              %wkv: tensor<16x8xf32>, %wo: tensor<16x16xf32>,
                              %s: tensor<16xf32>, %bkv: tensor<8xf32>)
    -> (tensor<2x8x16xf32>, tensor<2x8x16xf32>) {
  // CHECK: causal rotary layout = interleaved theta = 1.000000e+06 prenorm rms(%{{.*}}) qkv_bias(%{{.*}}, %{{.*}}, %{{.*}}) out_bias(%{{.*}}) :
  %a = moe.attention %x weights(%wq, %wkv, %wkv, %wo) heads = 4 kv_heads = 2 head_dim = 4 causal rotary layout = interleaved theta = 1.0e6 prenorm rms(%s) qkv_bias(%s, %bkv, %bkv) out_bias(%s) : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<8xf32>, tensor<8xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  // CHECK: causal rotary layout = rotate_half qkv_bias(%{{.*}}, %{{.*}}, %{{.*}}) :
  %b = moe.attention %x weights(%wq, %wkv, %wkv, %wo) heads = 4 kv_heads = 2 head_dim = 4 causal rotary layout = rotate_half qkv_bias(%s, %bkv, %bkv) : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x16xf32>, tensor<16xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8x16xf32>
  return %a, %b : tensor<2x8x16xf32>, tensor<2x8x16xf32>
}

// Qwen2-MoE's shared-expert gate.
// CHECK-LABEL: func.func @sigmoid_gate
func.func @sigmoid_gate(%x: tensor<2x8x16xf32>, %w: tensor<16x1xf32>,
                        %y: tensor<2x8x16xf32>) -> tensor<2x8x16xf32> {
  // CHECK: moe.sigmoid_gate %{{.*}}, %{{.*}} scales %{{.*}} : (tensor<2x8x16xf32>, tensor<16x1xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  %g = moe.sigmoid_gate %x, %w scales %y : (tensor<2x8x16xf32>, tensor<16x1xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  return %g : tensor<2x8x16xf32>
}

// Every gate kind. 2 x 8 tokens, 4 experts, k = 2, f = 1.0: C = ceil(32/4) = 8.
// CHECK-LABEL: func.func @gates
func.func @gates(%x: tensor<2x8x16xf32>, %w: tensor<16x4xf32>,
                 %proj: tensor<16x6xf32>, %emb: tensor<6x4xf32>) {
  // CHECK: moe.gate softmax_topk %{{.*}}, %{{.*}} experts = 4 top_k = 2 capacity_factor = 1.0 capacity = 8 normalize :
  %i0, %w0, %c0 = moe.gate softmax_topk %x, %w experts = 4 top_k = 2 capacity_factor = 1.0 capacity = 8 normalize : (tensor<2x8x16xf32>, tensor<16x4xf32>) -> (tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<4xi32>)
  // CHECK: moe.gate noisy_topk %{{.*}}, %{{.*}} aux(%{{.*}}) experts = 4 top_k = 2 capacity_factor = 1.25 capacity = 10 :
  %i1, %w1, %c1 = moe.gate noisy_topk %x, %w aux(%w) experts = 4 top_k = 2 capacity_factor = 1.25 capacity = 10 : (tensor<2x8x16xf32>, tensor<16x4xf32>, tensor<16x4xf32>) -> (tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<4xi32>)
  // CHECK: moe.gate sigmoid %{{.*}}, %{{.*}} experts = 4 top_k = 1 :
  %i2, %w2, %c2 = moe.gate sigmoid %x, %w experts = 4 top_k = 1 : (tensor<2x8x16xf32>, tensor<16x4xf32>) -> (tensor<2x8x1xi64>, tensor<2x8x1xf32>, tensor<4xi64>)
  // CHECK: moe.gate cosine %{{.*}}, %{{.*}} aux(%{{.*}}) experts = 4 top_k = 2 :
  %i3, %w3, %c3 = moe.gate cosine %x, %emb aux(%proj) experts = 4 top_k = 2 : (tensor<2x8x16xf32>, tensor<6x4xf32>, tensor<16x6xf32>) -> (tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<4xi32>)
  // CHECK: moe.gate expert_choice %{{.*}}, %{{.*}} experts = 4 top_k = 2 capacity_factor = 1.0 capacity = 8 : {{.*}} -> (tensor<4x8xi32>, tensor<4x8xf32>, tensor<4xi32>)
  %i4, %w4, %c4 = moe.gate expert_choice %x, %w experts = 4 top_k = 2 capacity_factor = 1.0 capacity = 8 : (tensor<2x8x16xf32>, tensor<16x4xf32>) -> (tensor<4x8xi32>, tensor<4x8xf32>, tensor<4xi32>)
  // cosine's temperature and noisy_topk's first sample in the batch.
  // CHECK: moe.gate cosine %{{.*}}, %{{.*}} aux(%{{.*}}) experts = 4 top_k = 2 tau = 2.000000e-01 :
  %i5, %w5, %c5 = moe.gate cosine %x, %emb aux(%proj) experts = 4 top_k = 2 tau = 0.2 : (tensor<2x8x16xf32>, tensor<6x4xf32>, tensor<16x6xf32>) -> (tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<4xi32>)
  // CHECK: moe.gate noisy_topk %{{.*}}, %{{.*}} aux(%{{.*}}) experts = 4 top_k = 2 normalize sample_offset = 6 :
  %i6, %w6, %c6 = moe.gate noisy_topk %x, %w aux(%w) experts = 4 top_k = 2 normalize sample_offset = 6 : (tensor<2x8x16xf32>, tensor<16x4xf32>, tensor<16x4xf32>) -> (tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<4xi32>)
  return
}

// A block with capacity routing; experts spread over the 4 ranks (E_l = 1),
// G x C = 4 x 8 = 32 slots per local expert.
// CHECK-LABEL: func.func @block
func.func @block(%x: tensor<2x8x16xf32>, %w: tensor<16x4xf32>,
                 %up: tensor<1x16x32xf32>, %down: tensor<1x32x16xf32>,
                 %sup: tensor<16x24xf32>, %sdown: tensor<24x16xf32>)
    -> tensor<2x8x16xf32> {
  // CHECK: moe.block 3 (%[[ARG:.*]] = %{{.*}} : tensor<2x8x16xf32>) -> tensor<2x8x16xf32> attributes {tag} {
  %y = moe.block 3 (%h = %x : tensor<2x8x16xf32>) -> tensor<2x8x16xf32> attributes {tag} {
    %i, %wt, %c = moe.gate softmax_topk %h, %w experts = 4 top_k = 2 capacity_factor = 1.0 capacity = 8 : (tensor<2x8x16xf32>, tensor<16x4xf32>) -> (tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<4xi32>)
    // CHECK: moe.dispatch %[[ARG]], %{{.*}}, %{{.*}} on @grid axes = [0, 1] experts = 4 capacity = 8 : {{.*}} -> tensor<1x32x16xf32>
    %d = moe.dispatch %h, %i, %c on @grid axes = [0, 1] experts = 4 capacity = 8 : (tensor<2x8x16xf32>, tensor<2x8x2xi32>, tensor<4xi32>) -> tensor<1x32x16xf32>
    // CHECK: moe.expert relu %{{.*}} up(%{{.*}}) down(%{{.*}}) : (tensor<1x32x16xf32>, tensor<1x16x32xf32>, tensor<1x32x16xf32>) -> tensor<1x32x16xf32>
    %e = moe.expert relu %d up(%up) down(%down) : (tensor<1x32x16xf32>, tensor<1x16x32xf32>, tensor<1x32x16xf32>) -> tensor<1x32x16xf32>
    // CHECK: moe.combine %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} on @grid axes = [0, 1] experts = 4 capacity = 8 : {{.*}} -> tensor<2x8x16xf32>
    %o = moe.combine %e, %i, %wt, %c on @grid axes = [0, 1] experts = 4 capacity = 8 : (tensor<1x32x16xf32>, tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<4xi32>) -> tensor<2x8x16xf32>
    // CHECK: moe.shared_expert gelu %[[ARG]] up(%{{.*}}) down(%{{.*}}) : (tensor<2x8x16xf32>, tensor<16x24xf32>, tensor<24x16xf32>) -> tensor<2x8x16xf32>
    %s = moe.shared_expert gelu %h up(%sup) down(%sdown) : (tensor<2x8x16xf32>, tensor<16x24xf32>, tensor<24x16xf32>) -> tensor<2x8x16xf32>
    %sum = arith.addf %o, %s : tensor<2x8x16xf32>
    // CHECK: moe.yield %{{.*}} : tensor<2x8x16xf32>
    moe.yield %sum : tensor<2x8x16xf32>
  }
  return %y : tensor<2x8x16xf32>
}

// Dropless routing on the intra-node axis only (G = 2, E_l = 2), SwiGLU
// experts, and expert-choice dispatch.
// CHECK-LABEL: func.func @dropless
func.func @dropless(%x: tensor<2x8x16xf32>, %w: tensor<16x4xf32>,
                    %up: tensor<2x16x32xf32>, %down: tensor<2x32x16xf32>) {
  %i, %wt, %c = moe.gate softmax_topk %x, %w experts = 4 top_k = 2 : (tensor<2x8x16xf32>, tensor<16x4xf32>) -> (tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<4xi32>)
  // CHECK: moe.dispatch {{.*}} on @grid axes = [1] experts = 4 : {{.*}} -> tensor<2x?x16xf32>
  %d = moe.dispatch %x, %i, %c on @grid axes = [1] experts = 4 : (tensor<2x8x16xf32>, tensor<2x8x2xi32>, tensor<4xi32>) -> tensor<2x?x16xf32>
  // CHECK: moe.expert silu %{{.*}} up(%{{.*}}) gate(%{{.*}}) down(%{{.*}})
  %e = moe.expert silu %d up(%up) gate(%up) down(%down) : (tensor<2x?x16xf32>, tensor<2x16x32xf32>, tensor<2x16x32xf32>, tensor<2x32x16xf32>) -> tensor<2x?x16xf32>
  %o = moe.combine %e, %i, %wt, %c on @grid axes = [1] experts = 4 : (tensor<2x?x16xf32>, tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<4xi32>) -> tensor<2x8x16xf32>
  %ei, %ew, %ec = moe.gate expert_choice %x, %w experts = 4 top_k = 2 capacity_factor = 1.0 capacity = 8 : (tensor<2x8x16xf32>, tensor<16x4xf32>) -> (tensor<4x8xi32>, tensor<4x8xf32>, tensor<4xi32>)
  // CHECK: moe.dispatch {{.*}} experts = 4 capacity = 8 : (tensor<2x8x16xf32>, tensor<4x8xi32>, tensor<4xi32>) -> tensor<2x16x16xf32>
  %ed = moe.dispatch %x, %ei, %ec on @grid axes = [1] experts = 4 capacity = 8 : (tensor<2x8x16xf32>, tensor<4x8xi32>, tensor<4xi32>) -> tensor<2x16x16xf32>
  return
}

// Token chunks (moe-token-pipeline): windows of the capacity slots, and a
// window re-cut from two chunks (G = 4).
// CHECK-LABEL: func.func @token_chunks
func.func @token_chunks(%x: tensor<2x8x16xf32>, %w: tensor<16x4xf32>) {
  %i, %wt, %c = moe.gate softmax_topk %x, %w experts = 4 top_k = 2 capacity_factor = 1.0 capacity = 8 : (tensor<2x8x16xf32>, tensor<16x4xf32>) -> (tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<4xi32>)
  // CHECK: moe.dispatch {{.*}} experts = 4 capacity = 8 slots [0, 3] : {{.*}} -> tensor<1x12x16xf32>
  %d0 = moe.dispatch %x, %i, %c on @grid axes = [0, 1] experts = 4 capacity = 8 slots [0, 3] : (tensor<2x8x16xf32>, tensor<2x8x2xi32>, tensor<4xi32>) -> tensor<1x12x16xf32>
  %d1 = moe.dispatch %x, %i, %c on @grid axes = [0, 1] experts = 4 capacity = 8 slots [3, 5] : (tensor<2x8x16xf32>, tensor<2x8x2xi32>, tensor<4xi32>) -> tensor<1x20x16xf32>
  // CHECK: moe.slot_window %{{.*}}, %{{.*}} groups = 4 from = 0 window [2, 4] : tensor<1x12x16xf32>, tensor<1x20x16xf32> -> tensor<1x16x16xf32>
  %s = moe.slot_window %d0, %d1 groups = 4 from = 0 window [2, 4] : tensor<1x12x16xf32>, tensor<1x20x16xf32> -> tensor<1x16x16xf32>
  // CHECK: moe.combine {{.*}} experts = 4 capacity = 8 slots [3, 5] : {{.*}} -> tensor<2x8x16xf32>
  %y = moe.combine %d1, %i, %wt, %c on @grid axes = [0, 1] experts = 4 capacity = 8 slots [3, 5] : (tensor<1x20x16xf32>, tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<4xi32>) -> tensor<2x8x16xf32>
  return
}

// CHECK-LABEL: func.func @schedule
func.func @schedule(%g0: tensor<16x16xf32>, %g1: tensor<16xf32>,
                    %x: tensor<4x8x16xf32>) -> tensor<4x8x16xf32> {
  // CHECK: %{{.*}}:2 = moe.all_reduce %{{.*}}, %{{.*}} on @grid axes = [0, 1] : tensor<16x16xf32>, tensor<16xf32>
  %r:2 = moe.all_reduce %g0, %g1 on @grid axes = [0, 1] : tensor<16x16xf32>, tensor<16xf32>
  // CHECK: moe.all_reduce %{{.*}} on @grid axes = [0, 1] bytes [512, 512] {moe.stream = #moe.stream<comm>} : tensor<16x16xf32>
  %c = moe.all_reduce %g0 on @grid axes = [0, 1] bytes [512, 512] {moe.stream = #moe.stream<comm>} : tensor<16x16xf32>
  // CHECK: %[[EV:.*]] = moe.record_event on <comm, 1>
  %ev = moe.record_event on <comm, 1>
  // CHECK: moe.wait_event %[[EV]] on <compute>
  moe.wait_event %ev on <compute>
  // CHECK: moe.split %{{.*}} : tensor<4x8x16xf32> -> tensor<2x8x16xf32>, tensor<2x8x16xf32>
  %p:2 = moe.split %x : tensor<4x8x16xf32> -> tensor<2x8x16xf32>, tensor<2x8x16xf32>
  // CHECK: moe.merge %{{.*}}#0, %{{.*}}#1 : tensor<2x8x16xf32>, tensor<2x8x16xf32> -> tensor<4x8x16xf32>
  %m = moe.merge %p#0, %p#1 : tensor<2x8x16xf32>, tensor<2x8x16xf32> -> tensor<4x8x16xf32>
  return %m : tensor<4x8x16xf32>
}

// CHECK-LABEL: func.func @event_type
// CHECK-SAME: !moe.event
func.func @event_type(%e: !moe.event) {
  moe.wait_event %e on <comm>
  return
}

// CHECK-LABEL: func.func @training
func.func @training(%x: tensor<1x32x16xf32>, %up: tensor<1x16x32xf32>,
                    %down: tensor<1x32x16xf32>, %dy: tensor<1x32x16xf32>)
    -> tensor<1x16x32xf32> {
  // CHECK: %{{.*}}:3 = moe.vjp (%[[A:.*]] = %{{.*}} : tensor<1x32x16xf32>, %[[B:.*]] = %{{.*}} : tensor<1x16x32xf32>, %[[C:.*]] = %{{.*}} : tensor<1x32x16xf32>) cotangents(%{{.*}} : tensor<1x32x16xf32>) -> (tensor<1x32x16xf32>, tensor<1x16x32xf32>, tensor<1x32x16xf32>) attributes {moe.task = #moe.task<E, bwd, block = 3, micro = 1>} {
  // CHECK-NEXT: moe.expert relu %[[A]] up(%[[B]]) down(%[[C]])
  // CHECK-NEXT: moe.yield
  %g:3 = moe.vjp (%a = %x : tensor<1x32x16xf32>, %b = %up : tensor<1x16x32xf32>, %c = %down : tensor<1x32x16xf32>) cotangents(%dy : tensor<1x32x16xf32>) -> (tensor<1x32x16xf32>, tensor<1x16x32xf32>, tensor<1x32x16xf32>) attributes {moe.task = #moe.task<E, bwd, block = 3, micro = 1>} {
    %y = moe.expert relu %a up(%b) down(%c) : (tensor<1x32x16xf32>, tensor<1x16x32xf32>, tensor<1x32x16xf32>) -> tensor<1x32x16xf32>
    moe.yield %y : tensor<1x32x16xf32>
  }
  // CHECK: moe.sgd %{{.*}}, %{{.*}}#1 lr = 1.000000e-01 {moe.task = #moe.task<OPT, bwd>} : tensor<1x16x32xf32>
  %n = moe.sgd %up, %g#1 lr = 0.1 {moe.task = #moe.task<OPT, bwd>} : tensor<1x16x32xf32>
  // CHECK: moe.task = #moe.task<AR, bwd, block = 0, chunk = 2>
  %e = moe.record_event on <comm> {moe.task = #moe.task<AR, bwd, block = 0, chunk = 2>}
  // CHECK: moe.task = #moe.task<HEAD, fwd, micro = 1>
  %f = moe.record_event on <comm> {moe.task = #moe.task<HEAD, fwd, micro = 1>}
  return %n : tensor<1x16x32xf32>
}
