// Every local verifier error of the moe ops, with the message a user sees.
// RUN: moe-opt %s -split-input-file -verify-diagnostics

func.func @embedding_table_rank(%ids: tensor<2x8xi64>, %t: tensor<32xf32>) {
  // expected-error @+1 {{'table' must have rank 2, got 32}}
  %h = moe.embedding %ids, %t : (tensor<2x8xi64>, tensor<32xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @embedding_result(%ids: tensor<2x8xi64>, %t: tensor<32x16xf32>) {
  // expected-error @+1 {{'result' must have shape 2x8x16, got 2x8x32}}
  %h = moe.embedding %ids, %t : (tensor<2x8xi64>, tensor<32x16xf32>) -> tensor<2x8x32xf32>
  return
}

// -----

func.func @position_rank(%x: tensor<16x16xf32>, %t: tensor<8x16xf32>) {
  // expected-error @+1 {{'input' must have rank 3, got 16x16}}
  %h = moe.position_embedding %x, %t : (tensor<16x16xf32>, tensor<8x16xf32>) -> tensor<16x16xf32>
  return
}

// -----

func.func @position_width(%x: tensor<2x8x16xf32>, %t: tensor<8x32xf32>) {
  // expected-error @+1 {{'table'}}
  %h = moe.position_embedding %x, %t : (tensor<2x8x16xf32>, tensor<8x32xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @position_too_few(%x: tensor<2x8x16xf32>, %t: tensor<4x16xf32>) {
  // expected-error @+1 {{table has 4 positions, fewer than the sequence length 8}}
  %h = moe.position_embedding %x, %t : (tensor<2x8x16xf32>, tensor<4x16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @norm_scale(%x: tensor<2x8x16xf32>, %s: tensor<8xf32>) {
  // expected-error @+1 {{'scale' must have shape 16, got 8}}
  %n = moe.norm layer %x, %s : (tensor<2x8x16xf32>, tensor<8xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @rms_bias(%x: tensor<2x8x16xf32>, %s: tensor<16xf32>) {
  // expected-error @+1 {{rms norm takes no bias}}
  %n = moe.norm rms %x, %s, %s : (tensor<2x8x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @norm_epsilon(%x: tensor<2x8x16xf32>, %s: tensor<16xf32>) {
  // expected-error @+1 {{epsilon must be positive}}
  %n = moe.norm rms %x, %s {epsilon = 0.0 : f64} : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @norm_result(%x: tensor<2x8x16xf32>, %s: tensor<16xf32>) {
  // expected-error @+1 {{result type must equal the input type}}
  %n = moe.norm rms %x, %s : (tensor<2x8x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf16>
  return
}

// -----

func.func @linear_features(%x: tensor<2x8x16xf32>, %w: tensor<8x32xf32>) {
  // expected-error @+1 {{'weight' dimension 0 (input features) must be 16, got 8 in shape 8x32}}
  %l = moe.linear %x, %w : (tensor<2x8x16xf32>, tensor<8x32xf32>) -> tensor<2x8x32xf32>
  return
}

// -----

func.func @linear_bias(%x: tensor<2x8x16xf32>, %w: tensor<16x32xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{'bias' must have shape 32, got 16}}
  %l = moe.linear %x, %w bias(%b) : (tensor<2x8x16xf32>, tensor<16x32xf32>, tensor<16xf32>) -> tensor<2x8x32xf32>
  return
}

// -----

func.func @linear_result(%x: tensor<2x8x16xf32>, %w: tensor<16x32xf32>) {
  // expected-error @+1 {{'result' must have shape 2x8x32, got 2x8x16}}
  %l = moe.linear %x, %w : (tensor<2x8x16xf32>, tensor<16x32xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @cross_entropy_labels(%l: tensor<2x8x32xf32>, %y: tensor<2x4xi64>) {
  // expected-error @+1 {{'labels' must have shape 2x8, got 2x4}}
  %loss = moe.cross_entropy %l, %y : (tensor<2x8x32xf32>, tensor<2x4xi64>) -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_rank(%l: tensor<32xf32>, %y: tensor<i64>) {
  // expected-error @+1 {{'logits' must have rank >= 2 (tokens x vocab)}}
  %loss = moe.cross_entropy %l, %y : (tensor<32xf32>, tensor<i64>) -> tensor<f32>
  return
}

// -----

func.func @attention_rank(%x: tensor<8x16xf32>, %w: tensor<16x16xf32>) {
  // expected-error @+1 {{'input' must have rank 3, got 8x16}}
  %a = moe.attention %x weights(%w, %w, %w, %w) heads = 2 kv_heads = 2 head_dim = 8 : (tensor<8x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<8x16xf32>
  return
}

// -----

func.func @attention_gqa(%x: tensor<2x8x16xf32>, %w: tensor<16x16xf32>) {
  // expected-error @+1 {{num_heads (4) must be a multiple of num_kv_heads (3)}}
  %a = moe.attention %x weights(%w, %w, %w, %w) heads = 4 kv_heads = 3 head_dim = 4 : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @attention_wk(%x: tensor<2x8x16xf32>, %w: tensor<16x16xf32>) {
  // expected-error @+1 {{'wk' must have shape 16x8, got 16x16}}
  %a = moe.attention %x weights(%w, %w, %w, %w) heads = 4 kv_heads = 2 head_dim = 4 : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @attention_wq(%x: tensor<2x8x16xf32>, %w: tensor<16x16xf32>, %q: tensor<16x32xf32>) {
  // expected-error @+1 {{'wq' must have shape 16x16, got 16x32}}
  %a = moe.attention %x weights(%q, %w, %w, %w) heads = 2 kv_heads = 2 head_dim = 8 : (tensor<2x8x16xf32>, tensor<16x32xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @attention_wo(%x: tensor<2x8x16xf32>, %w: tensor<16x16xf32>, %o: tensor<16x8xf32>) {
  // expected-error @+1 {{'wo' must have shape 16x16, got 16x8}}
  %a = moe.attention %x weights(%w, %w, %w, %o) heads = 2 kv_heads = 2 head_dim = 8 : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x8xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @attention_rms_bias(%x: tensor<2x8x16xf32>, %w: tensor<16x16xf32>, %s: tensor<16xf32>) {
  // expected-error @+1 {{rms prenorm takes a scale, got 2 parameters}}
  %a = moe.attention %x weights(%w, %w, %w, %w) heads = 2 kv_heads = 2 head_dim = 8 prenorm rms(%s, %s) : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @attention_norm_shape(%x: tensor<2x8x16xf32>, %w: tensor<16x16xf32>, %s: tensor<8xf32>) {
  // expected-error @+1 {{'prenorm parameter' must have shape 16, got 8}}
  %a = moe.attention %x weights(%w, %w, %w, %w) heads = 2 kv_heads = 2 head_dim = 8 prenorm layer(%s) : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<8xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @attention_params_without_kind(%x: tensor<2x8x16xf32>, %w: tensor<16x16xf32>, %s: tensor<16xf32>) {
  // expected-error @+1 {{has norm parameters but no prenorm kind}}
  %a = "moe.attention"(%x, %w, %w, %w, %w, %s) <{num_heads = 2 : i64, num_kv_heads = 2 : i64, head_dim = 8 : i64, operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 0, 0>}> : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @attention_heads_positive(%x: tensor<2x8x16xf32>, %w: tensor<16x16xf32>) {
  // expected-error @+1 {{attribute 'num_heads' failed to satisfy constraint}}
  %a = moe.attention %x weights(%w, %w, %w, %w) heads = 0 kv_heads = 2 head_dim = 8 : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @gate_topk(%x: tensor<2x8x16xf32>, %w: tensor<16x2xf32>) {
  // expected-error @+1 {{top_k (k = 3) exceeds the number of experts (2)}}
  %i, %wt, %c = moe.gate softmax_topk %x, %w experts = 2 top_k = 3 : (tensor<2x8x16xf32>, tensor<16x2xf32>) -> (tensor<2x8x3xi32>, tensor<2x8x3xf32>, tensor<2xi32>)
  return
}

// -----

func.func @gate_weight(%x: tensor<2x8x16xf32>, %w: tensor<16x4xf32>) {
  // expected-error @+1 {{'weight' must have shape 16x8, got 16x4}}
  %i, %wt, %c = moe.gate softmax_topk %x, %w experts = 8 top_k = 2 : (tensor<2x8x16xf32>, tensor<16x4xf32>) -> (tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<8xi32>)
  return
}

// -----

func.func @gate_capacity(%x: tensor<2x8x16xf32>, %w: tensor<16x4xf32>) {
  // expected-error @+1 {{capacity 9 does not match ceil(f*k*B*N/E) = ceil(1.0*2*2*8/4) = 8}}
  %i, %wt, %c = moe.gate softmax_topk %x, %w experts = 4 top_k = 2 capacity_factor = 1.0 capacity = 9 : (tensor<2x8x16xf32>, tensor<16x4xf32>) -> (tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<4xi32>)
  return
}

// -----

// f = 1.1 is inexact in binary; ceil(1.1*2*2*8/4) = ceil(8.8) = 9, and
// ceil(1.1 * 1 * 10 * 10 / 11) = 10 exactly (not 11).
func.func @gate_capacity_inexact(%x: tensor<2x8x16xf32>, %w: tensor<16x4xf32>, %y: tensor<10x10x16xf32>, %v: tensor<16x11xf32>) {
  %i, %wt, %c = moe.gate softmax_topk %x, %w experts = 4 top_k = 2 capacity_factor = 1.1 capacity = 9 : (tensor<2x8x16xf32>, tensor<16x4xf32>) -> (tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<4xi32>)
  %i2, %wt2, %c2 = moe.gate softmax_topk %y, %v experts = 11 top_k = 1 capacity_factor = 1.1 capacity = 10 : (tensor<10x10x16xf32>, tensor<16x11xf32>) -> (tensor<10x10x1xi32>, tensor<10x10x1xf32>, tensor<11xi32>)
  // expected-error @+1 {{capacity 11 does not match ceil(f*k*B*N/E) = ceil(1.1*1*10*10/11) = 10}}
  %i3, %wt3, %c3 = moe.gate softmax_topk %y, %v experts = 11 top_k = 1 capacity_factor = 1.1 capacity = 11 : (tensor<10x10x16xf32>, tensor<16x11xf32>) -> (tensor<10x10x1xi32>, tensor<10x10x1xf32>, tensor<11xi32>)
  return
}

// -----

func.func @gate_capacity_alone(%x: tensor<2x8x16xf32>, %w: tensor<16x4xf32>) {
  // expected-error @+1 {{capacity_factor and capacity must be given together (or neither, for dropless routing)}}
  %i, %wt, %c = moe.gate softmax_topk %x, %w experts = 4 top_k = 2 capacity = 8 : (tensor<2x8x16xf32>, tensor<16x4xf32>) -> (tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<4xi32>)
  return
}

// -----

func.func @gate_factor_negative(%x: tensor<2x8x16xf32>, %w: tensor<16x4xf32>) {
  // expected-error @+1 {{capacity_factor must be positive}}
  %i, %wt, %c = moe.gate softmax_topk %x, %w experts = 4 top_k = 2 capacity_factor = -1.0 capacity = 8 : (tensor<2x8x16xf32>, tensor<16x4xf32>) -> (tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<4xi32>)
  return
}

// -----

func.func @gate_noisy_needs_aux(%x: tensor<2x8x16xf32>, %w: tensor<16x4xf32>) {
  // expected-error @+1 {{noisy_topk gate needs the noise weight W_noise (M x E) as aux}}
  %i, %wt, %c = moe.gate noisy_topk %x, %w experts = 4 top_k = 2 : (tensor<2x8x16xf32>, tensor<16x4xf32>) -> (tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<4xi32>)
  return
}

// -----

func.func @gate_noise_shape(%x: tensor<2x8x16xf32>, %w: tensor<16x4xf32>, %n: tensor<16x8xf32>) {
  // expected-error @+1 {{'aux' must have shape 16x4, got 16x8}}
  %i, %wt, %c = moe.gate noisy_topk %x, %w aux(%n) experts = 4 top_k = 2 : (tensor<2x8x16xf32>, tensor<16x4xf32>, tensor<16x8xf32>) -> (tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<4xi32>)
  return
}

// -----

func.func @gate_cosine_needs_aux(%x: tensor<2x8x16xf32>, %w: tensor<6x4xf32>) {
  // expected-error @+1 {{cosine gate needs the projection W_proj (M x d) as aux}}
  %i, %wt, %c = moe.gate cosine %x, %w experts = 4 top_k = 2 : (tensor<2x8x16xf32>, tensor<6x4xf32>) -> (tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<4xi32>)
  return
}

// -----

func.func @gate_cosine_proj(%x: tensor<2x8x16xf32>, %w: tensor<6x4xf32>, %p: tensor<16x5xf32>) {
  // expected-error @+1 {{'weight' must have shape 5x4, got 6x4}}
  %i, %wt, %c = moe.gate cosine %x, %w aux(%p) experts = 4 top_k = 2 : (tensor<2x8x16xf32>, tensor<6x4xf32>, tensor<16x5xf32>) -> (tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<4xi32>)
  return
}

// -----

func.func @gate_aux_unexpected(%x: tensor<2x8x16xf32>, %w: tensor<16x4xf32>) {
  // expected-error @+1 {{sigmoid gate takes no aux weight}}
  %i, %wt, %c = moe.gate sigmoid %x, %w aux(%w) experts = 4 top_k = 1 : (tensor<2x8x16xf32>, tensor<16x4xf32>, tensor<16x4xf32>) -> (tensor<2x8x1xi32>, tensor<2x8x1xf32>, tensor<4xi32>)
  return
}

// -----

func.func @gate_normalize(%x: tensor<2x8x16xf32>, %w: tensor<16x4xf32>) {
  // expected-error @+1 {{normalize applies to softmax_topk and noisy_topk gates only}}
  %i, %wt, %c = moe.gate sigmoid %x, %w experts = 4 top_k = 1 normalize : (tensor<2x8x16xf32>, tensor<16x4xf32>) -> (tensor<2x8x1xi32>, tensor<2x8x1xf32>, tensor<4xi32>)
  return
}

// -----

func.func @gate_tau_not_cosine(%x: tensor<2x8x16xf32>, %w: tensor<16x4xf32>) {
  // expected-error @+1 {{tau applies to cosine gates only}}
  %i, %wt, %c = moe.gate softmax_topk %x, %w experts = 4 top_k = 1 tau = 0.5 : (tensor<2x8x16xf32>, tensor<16x4xf32>) -> (tensor<2x8x1xi32>, tensor<2x8x1xf32>, tensor<4xi32>)
  return
}

// -----

func.func @gate_tau_zero(%x: tensor<2x8x16xf32>, %emb: tensor<6x4xf32>, %proj: tensor<16x6xf32>) {
  // expected-error @+1 {{tau must be positive, got 0}}
  %i, %wt, %c = moe.gate cosine %x, %emb aux(%proj) experts = 4 top_k = 1 tau = 0.0 : (tensor<2x8x16xf32>, tensor<6x4xf32>, tensor<16x6xf32>) -> (tensor<2x8x1xi32>, tensor<2x8x1xf32>, tensor<4xi32>)
  return
}

// -----

func.func @gate_tau_negative(%x: tensor<2x8x16xf32>, %emb: tensor<6x4xf32>, %proj: tensor<16x6xf32>) {
  // expected-error @+1 {{tau must be positive, got -0.5}}
  %i, %wt, %c = moe.gate cosine %x, %emb aux(%proj) experts = 4 top_k = 1 tau = -0.5 : (tensor<2x8x16xf32>, tensor<6x4xf32>, tensor<16x6xf32>) -> (tensor<2x8x1xi32>, tensor<2x8x1xf32>, tensor<4xi32>)
  return
}

// -----

func.func @gate_sample_offset_not_noisy(%x: tensor<2x8x16xf32>, %w: tensor<16x4xf32>) {
  // expected-error @+1 {{sample_offset applies to noisy_topk gates only}}
  %i, %wt, %c = moe.gate sigmoid %x, %w experts = 4 top_k = 1 sample_offset = 2 : (tensor<2x8x16xf32>, tensor<16x4xf32>) -> (tensor<2x8x1xi32>, tensor<2x8x1xf32>, tensor<4xi32>)
  return
}

// -----

func.func @gate_sample_offset_negative(%x: tensor<2x8x16xf32>, %w: tensor<16x4xf32>) {
  // expected-error @+1 {{sample_offset must not be negative, got -2}}
  %i, %wt, %c = moe.gate noisy_topk %x, %w aux(%w) experts = 4 top_k = 1 sample_offset = -2 : (tensor<2x8x16xf32>, tensor<16x4xf32>, tensor<16x4xf32>) -> (tensor<2x8x1xi32>, tensor<2x8x1xf32>, tensor<4xi32>)
  return
}

// -----

func.func @gate_expert_choice_dropless(%x: tensor<2x8x16xf32>, %w: tensor<16x4xf32>) {
  // expected-error @+1 {{expert_choice gate needs a capacity_factor}}
  %i, %wt, %c = moe.gate expert_choice %x, %w experts = 4 top_k = 2 : (tensor<2x8x16xf32>, tensor<16x4xf32>) -> (tensor<4x8xi32>, tensor<4x8xf32>, tensor<4xi32>)
  return
}

// -----

func.func @gate_indices(%x: tensor<2x8x16xf32>, %w: tensor<16x4xf32>) {
  // expected-error @+1 {{'indices' must have shape 2x8x2, got 2x8x1}}
  %i, %wt, %c = moe.gate softmax_topk %x, %w experts = 4 top_k = 2 : (tensor<2x8x16xf32>, tensor<16x4xf32>) -> (tensor<2x8x1xi32>, tensor<2x8x2xf32>, tensor<4xi32>)
  return
}

// -----

func.func @gate_counts(%x: tensor<2x8x16xf32>, %w: tensor<16x4xf32>) {
  // expected-error @+1 {{'counts' must have shape 4, got 8}}
  %i, %wt, %c = moe.gate softmax_topk %x, %w experts = 4 top_k = 2 : (tensor<2x8x16xf32>, tensor<16x4xf32>) -> (tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<8xi32>)
  return
}

// -----

func.func @gate_expert_choice_shape(%x: tensor<2x8x16xf32>, %w: tensor<16x4xf32>) {
  // expected-error @+1 {{'indices' must have shape 4x8, got 2x8x2}}
  %i, %wt, %c = moe.gate expert_choice %x, %w experts = 4 top_k = 2 capacity_factor = 1.0 capacity = 8 : (tensor<2x8x16xf32>, tensor<16x4xf32>) -> (tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<4xi32>)
  return
}

// -----

func.func @gate_kind(%x: tensor<2x8x16xf32>, %w: tensor<16x4xf32>) {
  // expected-error @+2 {{expected ::mlir::moe::GateKind to be one of: softmax_topk, noisy_topk, sigmoid, cosine, expert_choice}}
  // expected-error @+1 {{failed to parse Moe_GateKindAttr parameter 'value'}}
  %i, %wt, %c = moe.gate hash %x, %w experts = 4 top_k = 2 : (tensor<2x8x16xf32>, tensor<16x4xf32>) -> (tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<4xi32>)
  return
}

// -----

func.func @expert_up(%x: tensor<2x8x16xf32>, %up: tensor<2x8x32xf32>, %down: tensor<2x32x16xf32>) {
  // expected-error @+1 {{'up' must have shape 2x16x32, got 2x8x32}}
  %e = moe.expert relu %x up(%up) down(%down) : (tensor<2x8x16xf32>, tensor<2x8x32xf32>, tensor<2x32x16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @expert_local(%x: tensor<2x8x16xf32>, %up: tensor<1x16x32xf32>, %down: tensor<1x32x16xf32>) {
  // expected-error @+1 {{'up' must have shape 2x16x32, got 1x16x32}}
  %e = moe.expert relu %x up(%up) down(%down) : (tensor<2x8x16xf32>, tensor<1x16x32xf32>, tensor<1x32x16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @expert_down(%x: tensor<2x8x16xf32>, %up: tensor<2x16x32xf32>, %down: tensor<2x16x16xf32>) {
  // expected-error @+1 {{'down' must have shape 2x32x16, got 2x16x16}}
  %e = moe.expert relu %x up(%up) down(%down) : (tensor<2x8x16xf32>, tensor<2x16x32xf32>, tensor<2x16x16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @expert_gate(%x: tensor<2x8x16xf32>, %up: tensor<2x16x32xf32>, %g: tensor<2x16x16xf32>, %down: tensor<2x32x16xf32>) {
  // expected-error @+1 {{'gate' must have shape 2x16x32, got 2x16x16}}
  %e = moe.expert silu %x up(%up) gate(%g) down(%down) : (tensor<2x8x16xf32>, tensor<2x16x32xf32>, tensor<2x16x16xf32>, tensor<2x32x16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @expert_result(%x: tensor<2x8x16xf32>, %up: tensor<2x16x32xf32>, %down: tensor<2x32x16xf32>) {
  // expected-error @+1 {{result type must equal the input type}}
  %e = moe.expert relu %x up(%up) down(%down) : (tensor<2x8x16xf32>, tensor<2x16x32xf32>, tensor<2x32x16xf32>) -> tensor<2x4x16xf32>
  return
}

// -----

func.func @shared_expert_rank(%x: tensor<2x8x16xf32>, %up: tensor<1x16x32xf32>, %down: tensor<32x16xf32>) {
  // expected-error @+1 {{'up' must have rank 2, got 1x16x32}}
  %e = moe.shared_expert gelu %x up(%up) down(%down) : (tensor<2x8x16xf32>, tensor<1x16x32xf32>, tensor<32x16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @shared_expert_down(%x: tensor<2x8x16xf32>, %up: tensor<16x32xf32>, %down: tensor<32x8xf32>) {
  // expected-error @+1 {{'down' must have shape 32x16, got 32x8}}
  %e = moe.shared_expert gelu %x up(%up) down(%down) : (tensor<2x8x16xf32>, tensor<16x32xf32>, tensor<32x8xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @all_reduce_result(%g: tensor<16xf32>) {
  // expected-error @+1 {{result types must equal the operand types}}
  %r = "moe.all_reduce"(%g) <{grid = @grid, axes = array<i16: 0>}> : (tensor<16xf32>) -> tensor<8xf32>
  return
}

// -----

func.func @all_reduce_empty() {
  // expected-error @+1 {{needs at least one tensor to reduce}}
  "moe.all_reduce"() <{grid = @grid, axes = array<i16: 0>}> : () -> ()
  return
}

// -----

func.func @chunk_two_tensors(%g: tensor<16xf32>) {
  // expected-error @+1 {{a byte-range (chunk) all-reduce takes exactly one tensor, got 2}}
  %r:2 = moe.all_reduce %g, %g on @grid axes = [0] bytes [0, 16] : tensor<16xf32>, tensor<16xf32>
  return
}

// -----

func.func @chunk_range(%g: tensor<16xf32>) {
  // expected-error @+1 {{chunk [32, 96) is outside the tensor's 64 bytes}}
  %r = moe.all_reduce %g on @grid axes = [0] bytes [32, 64] : tensor<16xf32>
  return
}

// -----

func.func @chunk_empty(%g: tensor<16xf32>) {
  // expected-error @+1 {{chunk [0, 0) is outside the tensor's 64 bytes}}
  %r = moe.all_reduce %g on @grid axes = [0] bytes [0, 0] : tensor<16xf32>
  return
}

// -----

func.func @chunk_align(%g: tensor<16xf32>) {
  // expected-error @+1 {{chunk [2, 10) must align to whole 4-byte elements}}
  %r = moe.all_reduce %g on @grid axes = [0] bytes [2, 8] : tensor<16xf32>
  return
}

// -----

func.func @chunk_dynamic(%g: tensor<?xf32>) {
  // expected-error @+1 {{a chunk needs a static-shaped tensor}}
  %r = moe.all_reduce %g on @grid axes = [0] bytes [0, 4] : tensor<?xf32>
  return
}

// -----

func.func @chunk_format(%g: tensor<16xf32>) {
  // expected-error @+1 {{bytes must be [offset, size]}}
  %r = moe.all_reduce %g on @grid axes = [0] bytes [0] : tensor<16xf32>
  return
}

// -----

func.func @split_uneven(%x: tensor<5x8xf32>) {
  // expected-error @+1 {{dimension 0 of size 5 does not split into 2 micro-batches of 2}}
  %p:2 = moe.split %x : tensor<5x8xf32> -> tensor<2x8xf32>, tensor<2x8xf32>
  return
}

// -----

func.func @split_types(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{micro-batches must all have one type}}
  %p:2 = moe.split %x : tensor<4x8xf32> -> tensor<2x8xf32>, tensor<2x4xf32>
  return
}

// -----

func.func @split_inner(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{micro-batches may only differ in dimension 0}}
  %p:2 = moe.split %x : tensor<4x8xf32> -> tensor<2x4xf32>, tensor<2x4xf32>
  return
}

// -----

func.func @split_element(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{micro-batch type 'tensor<2x8xf16>' does not match 'tensor<4x8xf32>'}}
  %p:2 = moe.split %x : tensor<4x8xf32> -> tensor<2x8xf16>, tensor<2x8xf16>
  return
}

// -----

func.func @split_none(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{needs at least one micro-batch}}
  "moe.split"(%x) : (tensor<4x8xf32>) -> ()
  return
}

// -----

func.func @merge_sum(%a: tensor<2x8xf32>) {
  // expected-error @+1 {{dimension 0 of size 6 does not split into 2 micro-batches of 2}}
  %m = moe.merge %a, %a : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<6x8xf32>
  return
}

// -----

func.func @wait_same_stream() {
  %e = moe.record_event on <compute>
  // expected-error @+1 {{waits on an event recorded on the same stream #moe.stream<compute>; stream order already implies it}}
  moe.wait_event %e on <compute>
  // A communication stream's two queues (all-to-alls, all-reduces) are
  // ordered by events only: this is allowed (FSMoE's slice placement).
  %c = moe.record_event on <comm>
  moe.wait_event %c on <comm>
  return
}

// -----

func.func @stream_index() {
  // expected-error @+1 {{stream index must be non-negative, got -1}}
  %e = moe.record_event on <comm, -1>
  return
}

// -----

func.func @block_yield(%x: tensor<2xf32>) {
  %y = moe.block 0 (%h = %x : tensor<2xf32>) -> tensor<2xf32> {
    // expected-error @+1 {{yields 0 values whose types do not match the 1 results of the enclosing moe.block}}
    moe.yield
  }
  return
}

// -----

func.func @block_args(%x: tensor<2xf32>) {
  // expected-error @+1 {{region argument #0 has type 'tensor<4xf32>' but input #0 has type 'tensor<2xf32>'}}
  "moe.block"(%x) <{index = 0 : i64}> ({
  ^bb0(%h: tensor<4xf32>):
    "moe.yield"() : () -> ()
  }) : (tensor<2xf32>) -> ()
  return
}

// -----

func.func @block_arg_count(%x: tensor<2xf32>) {
  // expected-error @+1 {{has 1 inputs but its region takes 0 arguments}}
  "moe.block"(%x) <{index = 0 : i64}> ({
    "moe.yield"() : () -> ()
  }) : (tensor<2xf32>) -> ()
  return
}

// -----

func.func @yield_outside() {
  // expected-error @+1 {{expects parent op to be one of 'moe.block, moe.vjp'}}
  moe.yield
}

// -----

func.func @vjp_two_ops(%x: tensor<4xf32>, %dy: tensor<4xf32>) {
  // expected-error @+1 {{body must hold exactly one op and moe.yield}}
  %dx = moe.vjp (%a = %x : tensor<4xf32>) cotangents(%dy : tensor<4xf32>) -> (tensor<4xf32>) {
    %b = arith.addf %a, %a : tensor<4xf32>
    %c = arith.addf %b, %b : tensor<4xf32>
    moe.yield %c : tensor<4xf32>
  }
  return
}

// -----

func.func @vjp_operands(%x: tensor<4xf32>, %dy: tensor<4xf32>) {
  // expected-error @+1 {{the body op must take the body arguments, in order, as its operands}}
  %dx:2 = moe.vjp (%a = %x : tensor<4xf32>, %b = %x : tensor<4xf32>) cotangents(%dy : tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
    %c = arith.addf %b, %a : tensor<4xf32>
    moe.yield %c : tensor<4xf32>
  }
  return
}

// -----

func.func @vjp_cotangents(%x: tensor<4xf32>, %dy: tensor<8xf32>) {
  // expected-error @+1 {{needs one cotangent per floating-point result of 'arith.addf' (1), with its type}}
  %dx:2 = moe.vjp (%a = %x : tensor<4xf32>, %b = %x : tensor<4xf32>) cotangents(%dy : tensor<8xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
    %c = arith.addf %a, %b : tensor<4xf32>
    moe.yield %c : tensor<4xf32>
  }
  return
}

// -----

func.func @vjp_gradients(%x: tensor<4xf32>, %dy: tensor<4xf32>) {
  // expected-error @+1 {{returns one gradient per floating-point operand of 'arith.addf' (2), with its type}}
  %dx = moe.vjp (%a = %x : tensor<4xf32>, %b = %x : tensor<4xf32>) cotangents(%dy : tensor<4xf32>) -> (tensor<4xf32>) {
    %c = arith.addf %a, %b : tensor<4xf32>
    moe.yield %c : tensor<4xf32>
  }
  return
}

// -----

func.func @vjp_yield(%x: tensor<4xf32>, %dy: tensor<4xf32>) {
  // expected-error @+1 {{the body must yield the results of its op}}
  %dx:2 = moe.vjp (%a = %x : tensor<4xf32>, %b = %x : tensor<4xf32>) cotangents(%dy : tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
    %c = arith.addf %a, %b : tensor<4xf32>
    moe.yield %a : tensor<4xf32>
  }
  return
}

// -----

func.func @task_kind() {
  // expected-error @+1 {{expected a task kind (PRE, AT, D, E, C, HEAD, AR, OPT) and a phase (fwd, bwd)}}
  %e = moe.record_event on <comm> {moe.task = #moe.task<XY, fwd>}
  return
}

// -----

func.func @task_field() {
  // expected-error @+1 {{expected block, micro or chunk}}
  %e = moe.record_event on <comm> {moe.task = #moe.task<AT, fwd, layer = 2>}
  return
}

// -----

func.func @sgd_types(%p: tensor<4xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{failed to verify that all of {param, grad, result} have same type}}
  %n = "moe.sgd"(%p, %g) <{lr = 1.0 : f64}> : (tensor<4xf32>, tensor<8xf32>) -> tensor<4xf32>
  return
}

// -----

shard.grid @grid(shape = 1x4)
func.func @slots_outside(%x: tensor<2x8x16xf32>, %i: tensor<2x8x2xi32>, %c: tensor<8xi32>) {
  // expected-error @+1 {{slots [6, 4] are not a non-empty window inside the capacity 8}}
  %d = moe.dispatch %x, %i, %c on @grid axes = [1] experts = 8 capacity = 8 slots [6, 4] : (tensor<2x8x16xf32>, tensor<2x8x2xi32>, tensor<8xi32>) -> tensor<2x16x16xf32>
  return
}

// -----

func.func @attention_theta_without_rotary(%x: tensor<2x8x16xf32>, %w: tensor<16x16xf32>) {
  // expected-error @+1 {{has a rotary layout or theta but no rotary}}
  %a = moe.attention %x weights(%w, %w, %w, %w) heads = 2 kv_heads = 2 head_dim = 8 theta = 1.0e6 : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

shard.grid @grid(shape = 1x4)
func.func @slots_empty(%e: tensor<2x8x16xf32>, %i: tensor<2x8x2xi32>, %w: tensor<2x8x2xf32>, %c: tensor<8xi32>) {
  // expected-error @+1 {{slots [0, 0] are not a non-empty window inside the capacity 8}}
  %y = moe.combine %e, %i, %w, %c on @grid axes = [1] experts = 8 capacity = 8 slots [0, 0] : (tensor<2x8x16xf32>, tensor<2x8x2xi32>, tensor<2x8x2xf32>, tensor<8xi32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @attention_theta_negative(%x: tensor<2x8x16xf32>, %w: tensor<16x16xf32>) {
  // expected-error @+1 {{rotary theta must be positive and finite, got -5}}
  %a = moe.attention %x weights(%w, %w, %w, %w) heads = 2 kv_heads = 2 head_dim = 8 rotary theta = -5.0 : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

shard.grid @grid(shape = 1x4)
func.func @slots_dropless(%x: tensor<2x8x16xf32>, %i: tensor<2x8x2xi32>, %c: tensor<8xi32>) {
  // expected-error @+1 {{'slots' needs a capacity: dropless routing has no slots to chunk}}
  %d = moe.dispatch %x, %i, %c on @grid axes = [1] experts = 8 slots [0, 2] : (tensor<2x8x16xf32>, tensor<2x8x2xi32>, tensor<8xi32>) -> tensor<2x?x16xf32>
  return
}

// -----

func.func @attention_rotary_odd(%x: tensor<2x8x15xf32>, %w: tensor<15x15xf32>) {
  // expected-error @+1 {{rotary needs an even head_dim, got 5}}
  %a = moe.attention %x weights(%w, %w, %w, %w) heads = 3 kv_heads = 3 head_dim = 5 rotary : (tensor<2x8x15xf32>, tensor<15x15xf32>, tensor<15x15xf32>, tensor<15x15xf32>, tensor<15x15xf32>) -> tensor<2x8x15xf32>
  return
}

// -----

shard.grid @grid(shape = 1x4)
func.func @slots_expert_choice(%x: tensor<2x8x16xf32>, %i: tensor<8x4xi32>, %c: tensor<8xi32>) {
  // expected-error @+1 {{'slots' needs token-choice routing (B x N x k indices)}}
  %d = moe.dispatch %x, %i, %c on @grid axes = [1] experts = 8 capacity = 4 slots [0, 2] : (tensor<2x8x16xf32>, tensor<8x4xi32>, tensor<8xi32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @attention_two_biases(%x: tensor<2x8x16xf32>, %w: tensor<16x16xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{qkv_bias takes the Q, K and V biases (3), got 2}}
  %a = moe.attention %x weights(%w, %w, %w, %w) heads = 2 kv_heads = 2 head_dim = 8 qkv_bias(%b, %b) : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16x16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

shard.grid @grid(shape = 1x4)
func.func @slots_arity(%x: tensor<2x8x16xf32>, %i: tensor<2x8x2xi32>, %c: tensor<8xi32>) {
  // expected-error @+1 {{'slots' must be [first, count]}}
  %d = moe.dispatch %x, %i, %c on @grid axes = [1] experts = 8 capacity = 8 slots [0] : (tensor<2x8x16xf32>, tensor<2x8x2xi32>, tensor<8xi32>) -> tensor<2x16x16xf32>
  return
}

// -----

func.func @attention_bias_shape(%x: tensor<2x8x16xf32>, %wq: tensor<16x16xf32>, %wkv: tensor<16x8xf32>, %b: tensor<16xf32>) {
  // expected-error @+1 {{'bk' must have shape 8, got 16}}
  %a = moe.attention %x weights(%wq, %wkv, %wkv, %wq) heads = 4 kv_heads = 2 head_dim = 4 qkv_bias(%b, %b, %b) : (tensor<2x8x16xf32>, tensor<16x16xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x16xf32>, tensor<16xf32>, tensor<16xf32>, tensor<16xf32>) -> tensor<2x8x16xf32>
  return
}

// -----

func.func @slot_window_outside(%a: tensor<2x8x16xf32>, %b: tensor<2x8x16xf32>) {
  // expected-error @+1 {{window [3, 2] is not inside the inputs' slots [0, 4)}}
  %w = moe.slot_window %a, %b groups = 4 from = 0 window [3, 2] : tensor<2x8x16xf32>, tensor<2x8x16xf32> -> tensor<2x8x16xf32>
  return
}

// -----

func.func @slot_window_groups(%a: tensor<2x6x16xf32>) {
  // expected-error @+1 {{input dimension 1 (6) is not a multiple of groups = 4}}
  %w = moe.slot_window %a groups = 4 from = 0 window [0, 1] : tensor<2x6x16xf32> -> tensor<2x4x16xf32>
  return
}

// -----

func.func @slot_window_result(%a: tensor<2x8x16xf32>, %b: tensor<2x8x16xf32>) {
  // expected-error @+1 {{result dimension 1 must be groups x count = 12, got 8}}
  %w = moe.slot_window %a, %b groups = 4 from = 2 window [3, 3] : tensor<2x8x16xf32>, tensor<2x8x16xf32> -> tensor<2x8x16xf32>
  return
}

// -----

func.func @slot_window_shape(%a: tensor<2x8x16xf32>, %b: tensor<1x8x16xf32>) {
  // expected-error @+1 {{inputs must be static E_l x (G slots) x M tensors like the result, got 'tensor<1x8x16xf32>'}}
  %w = moe.slot_window %a, %b groups = 4 from = 0 window [1, 2] : tensor<2x8x16xf32>, tensor<1x8x16xf32> -> tensor<2x8x16xf32>
  return
}

// -----

func.func @sigmoid_gate_weight(%x: tensor<2x8x16xf32>, %w: tensor<16x2xf32>) {
  // expected-error @+1 {{'weight' must have shape 16x1, got 16x2}}
  %g = moe.sigmoid_gate %x, %w scales %x : (tensor<2x8x16xf32>, tensor<16x2xf32>, tensor<2x8x16xf32>) -> tensor<2x8x16xf32>
  return
}
