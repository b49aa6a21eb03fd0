// FSMoE §5 causality in moe-verify-schedule: a gradient slice planned into
// a backward window (moe.gradient_window) may reduce only gradients that
// exist before that window. The backward runs HEAD', then per block
// l = L-1 .. 0 its MoE layer (E'^l window) and its dense part (AT'^l
// window), then PRE'.
// RUN: moe-opt %s --split-input-file --moe-verify-schedule --verify-diagnostics
// The planned steps of moe-fsmoe-plan verify (the pipeline ends with the
// verifier), and the check rejects one of them once a slice is moved one
// window too early: block 0's attention gradients into block 0's own MoE
// window, which runs before them.
// RUN: %python %moe_src_root/python/gen_model_mlir.py gpt-moe-2block --capacity-factor 1.0 --set seq=16 > %t.m4.mlir
// RUN: moe-opt %t.m4.mlir --moe-flowmoe-pipeline="degree=1 policy=fsmoe profile=%S/Inputs/fsmoe-toy-profile.json lr=1.0" -o %t.step.mlir
// RUN: grep -q 'moe.gradient_window = #moe.task<E, bwd, block = 0>' %t.step.mlir
// RUN: %python -c "import re,sys; print(re.sub(r'(moe\.all_reduce[^\n]*)(moe\.task = #moe\.task<AR, bwd, block = 0)', r'\1moe.gradient_window = #moe.task<E, bwd, block = 0>, \2', open(sys.argv[1]).read(), count=1))" %t.step.mlir > %t.bad.mlir
// RUN: not moe-opt %t.bad.mlir --moe-verify-schedule 2>&1 | FileCheck %s --check-prefix=MOVED
// MOVED: error: 'moe.all_reduce' op is a gradient slice 'moe.all_reduce' (AR^1.{{[0-9]+}}) on #moe.stream<comm> reduced in the window of E_1^1', before the gradient it covers (operand #0) exists: it is produced by {{.*}}(AT_1^1')

shard.grid @g(shape = 4)
// Block 0's attention gradient (AT'^1, the last block's dense part)
// reduced in block 1's MoE window (E'^2), which runs before it.
func.func @before_its_gradient(%a: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<8xf32> attributes {moe.schedule = "fsmoe"} {
  // expected-note @+1 {{producer: 'arith.addf' (AT_1^1') on #moe.stream<compute>}}
  %g = arith.addf %a, %b {moe.stream = #moe.stream<compute>, moe.task = #moe.task<AT, bwd, block = 0>} : tensor<8xf32>
  %e = moe.record_event on <compute>
  moe.wait_event %e on <comm>
  // expected-error @+1 {{is a gradient slice 'moe.all_reduce' (AR^1.0) on #moe.stream<comm> reduced in the window of E_1^2', before the gradient it covers (operand #0) exists: it is produced by 'arith.addf' (AT_1^1') on #moe.stream<compute>}}
  %r = moe.all_reduce %g on @g axes = [0] {moe.stream = #moe.stream<comm>, moe.task = #moe.task<AR, bwd, block = 0, chunk = 0>, moe.gradient_window = #moe.task<E, bwd, block = 1>} : tensor<8xf32>
  return %r : tensor<8xf32>
}

// -----

shard.grid @g(shape = 4)
// The second slice of a tensor is traced back through the first to the
// gradient's producer; its own window (block 0's MoE layer, E'^1) runs
// before block 0's dense part AT'^1 that produces the gradient.
func.func @second_slice(%a: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<8xf32> attributes {moe.schedule = "fsmoe"} {
  // expected-note @+1 {{producer}}
  %g = arith.addf %a, %b {moe.stream = #moe.stream<compute>, moe.task = #moe.task<AT, bwd, block = 0>} : tensor<8xf32>
  %e = moe.record_event on <compute>
  moe.wait_event %e on <comm>
  %r0 = moe.all_reduce %g on @g axes = [0] bytes [0, 16] {moe.stream = #moe.stream<comm>, moe.task = #moe.task<AR, bwd, block = 0, chunk = 0>} : tensor<8xf32>
  // expected-error @+1 {{reduced in the window of E_1^1', before the gradient it covers (operand #0) exists: it is produced by 'arith.addf' (AT_1^1')}}
  %r1 = moe.all_reduce %r0 on @g axes = [0] bytes [16, 16] {moe.stream = #moe.stream<comm>, moe.task = #moe.task<AR, bwd, block = 0, chunk = 1>, moe.gradient_window = #moe.task<E, bwd, block = 0>} : tensor<8xf32>
  return %r1 : tensor<8xf32>
}

// -----

shard.grid @g(shape = 4)
// Causal: block 1's attention gradient (AT'^2) in block 0's MoE window
// (E'^1), the head's (HEAD') in block 1's MoE window and block 1's dense
// window.
func.func @causal(%a: tensor<8xf32>, %b: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) attributes {moe.schedule = "fsmoe"} {
  %h = arith.addf %a, %b {moe.stream = #moe.stream<compute>, moe.task = #moe.task<HEAD, bwd>} : tensor<8xf32>
  %g = arith.addf %a, %h {moe.stream = #moe.stream<compute>, moe.task = #moe.task<AT, bwd, block = 1>} : tensor<8xf32>
  %e = moe.record_event on <compute>
  moe.wait_event %e on <comm>
  %h0 = moe.all_reduce %h on @g axes = [0] bytes [0, 16] {moe.stream = #moe.stream<comm>, moe.task = #moe.task<AR, bwd, chunk = 0>, moe.gradient_window = #moe.task<E, bwd, block = 1>} : tensor<8xf32>
  %h1 = moe.all_reduce %h0 on @g axes = [0] bytes [16, 16] {moe.stream = #moe.stream<comm>, moe.task = #moe.task<AR, bwd, chunk = 1>, moe.gradient_window = #moe.task<AT, bwd, block = 1>} : tensor<8xf32>
  %r = moe.all_reduce %g on @g axes = [0] {moe.stream = #moe.stream<comm>, moe.task = #moe.task<AR, bwd, block = 1, chunk = 0>, moe.gradient_window = #moe.task<E, bwd, block = 0>} : tensor<8xf32>
  return %h1, %r : tensor<8xf32>, tensor<8xf32>
}

// -----

shard.grid @g(shape = 4)
func.func @not_a_slice(%a: tensor<8xf32>) -> tensor<8xf32> attributes {moe.schedule = "fsmoe"} {
  // expected-error @+1 {{'moe.gradient_window' must be a backward E or AT task of a block on a moe.all_reduce}}
  %g = arith.addf %a, %a {moe.stream = #moe.stream<compute>, moe.gradient_window = #moe.task<E, bwd, block = 0>} : tensor<8xf32>
  return %g : tensor<8xf32>
}
