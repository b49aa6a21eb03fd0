// --moe-convert-to-emitc on a small hand-written scheduled step: the
// declare function registers the grid, one buffer per tensor value, the
// arguments and results; the step function issues one moe_rt call per op
// in IR order, on the stream of its #moe.stream, with events between
// streams and all-reduce chunks on the group communicator.
// RUN: moe-opt %s --moe-convert-to-emitc | FileCheck %s
// Nothing but EmitC is left: no tensors, grids or func.func.
// RUN: moe-opt %s --moe-convert-to-emitc | FileCheck %s --check-prefix=GONE
// RUN: moe-opt %s --moe-convert-to-emitc | FileCheck %s --check-prefix=WRITTEN
// WRITTEN-COUNT-2: "moe_step_buffer_written"
// WRITTEN-NOT: "moe_step_buffer_written"
// GONE-NOT: tensor<
// GONE-NOT: shard.grid
// GONE-NOT: func.func
// The printed C++ compiles against the runtime headers.
// RUN: moe-opt %s --moe-convert-to-emitc="prefix=tiny_model" | mlir-translate --mlir-to-cpp | FileCheck %s --check-prefix=CPP
// RUN: moe-opt %s --moe-convert-to-emitc | mlir-translate --mlir-to-cpp -o %t.cpp
// RUN: c++ -std=c++17 -fsyntax-only -I %moe_src_root/runtime/include %t.cpp

// CHECK: emitc.include "moe_rt/step_support.h"
// CHECK: emitc.func @tiny_declare(%[[S:.*]]: !emitc.ptr<!emitc.opaque<"moe_step">>)
// CHECK: call_opaque "moe_step_grid"(%[[S]]) {args = [0 : index, #emitc.opaque<"\22cluster\22">, 1, 2]}
// Arguments first (ids 0-3), then every op result.
// CHECK: call_opaque "moe_step_buffer"(%[[S]]) {args = [0 : index, 0, #emitc.opaque<"MOE_RT_I64">, 2, 4]}
// CHECK: call_opaque "moe_step_buffer"(%[[S]]) {args = [0 : index, 2, #emitc.opaque<"MOE_RT_F32">, 16, 8]}
// CHECK: call_opaque "moe_step_buffer"(%[[S]]) {args = [0 : index, 4, #emitc.opaque<"MOE_RT_F32">, 2, 4, 8]}
// The loss is 0-d.
// CHECK: call_opaque "moe_step_buffer"(%[[S]]) {args = [0 : index, 9, #emitc.opaque<"MOE_RT_F32">]}
// The two moe.sgd results (their op writes every element) are not zeroed
// each step; nothing else here is marked.
// CHECK: call_opaque "moe_step_buffer"(%[[S]]) {args = [0 : index, 18, #emitc.opaque<"MOE_RT_F32">, 16, 8]}
// CHECK-NEXT: call_opaque "moe_step_buffer_written"(%[[S]]) {args = [0 : index, 18]}
// CHECK-NEXT: call_opaque "moe_step_buffer"(%[[S]]) {args = [0 : index, 19
// CHECK-NEXT: call_opaque "moe_step_buffer_written"(%[[S]]) {args = [0 : index, 19]}
// CHECK: call_opaque "moe_step_argument"(%[[S]]) {args = [0 : index, 0, #emitc.opaque<"NULL">]}
// CHECK: call_opaque "moe_step_argument"(%[[S]]) {args = [0 : index, 1, #emitc.opaque<"NULL">]}
// CHECK: call_opaque "moe_step_argument"(%[[S]]) {args = [0 : index, 2, #emitc.opaque<"\22embed.table\22">]}
// CHECK: call_opaque "moe_step_argument"(%[[S]]) {args = [0 : index, 3, #emitc.opaque<"\22lm_head.weight\22">]}
// CHECK: call_opaque "moe_step_result"(%[[S]]) {args = [0 : index, #emitc.opaque<"\22loss\22">, 9]}
// CHECK: call_opaque "moe_step_result"(%[[S]]) {args = [0 : index, #emitc.opaque<"\22embed.table\22">, 18]}
// CHECK: call_opaque "moe_step_result"(%[[S]]) {args = [0 : index, #emitc.opaque<"\22lm_head.weight\22">, 19]}
// CHECK: return

// CHECK: emitc.func @tiny_step(%[[S:.*]]: !emitc.ptr<!emitc.opaque<"moe_step">>)
// CHECK: call_opaque "moe_step_begin"(%[[S]])
// CHECK: %[[C:.*]] = call_opaque "moe_step_stream"(%[[S]]) {args = [0 : index, #emitc.opaque<"MOE_STEP_COMPUTE">, 0]}
// CHECK: %[[IDS:.*]] = call_opaque "moe_step_tensor"(%[[S]]) {args = [0 : index, 0]}
// CHECK: %[[TABLE:.*]] = call_opaque "moe_step_tensor"(%[[S]]) {args = [0 : index, 2]}
// CHECK: %[[X:.*]] = call_opaque "moe_step_tensor"(%[[S]]) {args = [0 : index, 4]}
// CHECK: %[[ST:.*]] = call_opaque "moe_rt_embedding"(%[[C]], %[[IDS]], %[[TABLE]], %[[X]])
// CHECK: call_opaque "moe_step_check"(%[[S]], %[[ST]]) {args = [0 : index, 1 : index, #emitc.opaque<"\22op 0 moe.embedding #moe.task<PRE, fwd>\22">]}
// Split: two copies out of one buffer, at element offsets 0 and 32.
// CHECK: %[[P0:.*]] = call_opaque "moe_step_tensor"(%[[S]]) {args = [0 : index, 5]}
// CHECK: call_opaque "moe_rt_copy"(%[[C]], %[[X]], %[[P0]]) {args = [0 : index, 1 : index, 0, 2 : index, 0, 32]}
// CHECK: %[[P1:.*]] = call_opaque "moe_step_tensor"(%[[S]]) {args = [0 : index, 6]}
// CHECK: call_opaque "moe_rt_copy"(%[[C]], %[[X]], %[[P1]]) {args = [0 : index, 1 : index, 32, 2 : index, 0, 32]}
// Merge: back at the same offsets.
// CHECK: call_opaque "moe_rt_copy"(%[[C]], %[[P0]], %[[M:.*]]) {args = [0 : index, 1 : index, 0, 2 : index, 0, 32]}
// CHECK: call_opaque "moe_rt_copy"(%[[C]], %[[P1]], %[[M]]) {args = [0 : index, 1 : index, 0, 2 : index, 32, 32]}
// No bias: NULL.
// CHECK: call_opaque "moe_rt_linear"(%[[C]], %[[M]], %{{.*}}, %{{.*}}) {args = [0 : index, 1 : index, 2 : index, #emitc.opaque<"NULL">, 3 : index]}
// CHECK: call_opaque "moe_rt_cross_entropy"
// The loss cotangent is a host constant.
// CHECK: %[[SEED:.*]] = call_opaque "moe_step_tensor"(%[[S]]) {args = [0 : index, 10]}
// CHECK: call_opaque "moe_step_fill_f32"(%[[S]], %[[SEED]]) {args = [0 : index, 1 : index, 5.000000e-01]}
// CHECK: call_opaque "moe_rt_cross_entropy_grad"
// CHECK: call_opaque "moe_rt_linear_grad"
// CHECK: call_opaque "moe_rt_embedding_grad"
// CHECK: %[[EV:.*]] = call_opaque "moe_step_record"(%[[S]], %[[C]]) {args = [0 : index, 0, 1 : index]}
// CHECK: %[[COMM:.*]] = call_opaque "moe_step_stream"(%[[S]]) {args = [0 : index, #emitc.opaque<"MOE_STEP_COMM">, 0]}
// CHECK: call_opaque "moe_step_wait"(%[[S]], %[[COMM]], %[[EV]])
// One communicator for the group, reused by every chunk.
// CHECK: %[[G:.*]] = call_opaque "moe_step_comm"(%[[S]]) {args = [0 : index, #emitc.opaque<"\22cluster\22">, 0, 1]}
// CHECK: call_opaque "moe_rt_all_reduce_into"(%[[COMM]], %[[G]], %{{.*}}, %{{.*}}) {args = [0 : index, 1 : index, 2 : index, 3 : index, 0, 256]}
// CHECK: call_opaque "moe_rt_all_reduce_into"(%[[COMM]], %[[G]], %{{.*}}, %{{.*}}) {args = [0 : index, 1 : index, 2 : index, 3 : index, 256, 256]}
// CHECK-NOT: moe_step_comm"
// CHECK: call_opaque "moe_rt_all_reduce_into"(%[[COMM]], %[[G]], %{{.*}}, %{{.*}}) {args = [0 : index, 1 : index, 2 : index, 3 : index, 0, -1]}
// CHECK: %[[EV2:.*]] = call_opaque "moe_step_record"(%[[S]], %[[COMM]]) {args = [0 : index, 1, 1 : index]}
// CHECK: call_opaque "moe_step_wait"(%[[S]], %[[C]], %[[EV2]])
// CHECK: call_opaque "moe_rt_sgd"(%[[C]], %[[TABLE]], {{.*}}) {args = [0 : index, 1 : index, 2 : index, 1.000000e+00, 3 : index]}
// CHECK: call_opaque "moe_rt_sgd"
// CHECK: call_opaque "moe_step_end"(%[[S]])
// CHECK-NEXT: return

// CPP: #include "moe_rt/step_support.h"
// CPP: void tiny_model_declare(moe_step* [[S:v[0-9]+]]) {
// CPP: moe_step_grid([[S]], "cluster", 1, 2);
// CPP: moe_step_buffer([[S]], 4, MOE_RT_F32, 2, 4, 8);
// CPP: moe_step_argument([[S]], 2, "embed.table");
// CPP: void tiny_model_step(moe_step* [[S:v[0-9]+]]) {
// CPP: moe_rt_status [[ST:v[0-9]+]] = moe_rt_embedding(
// CPP-NEXT: moe_step_check([[S]], [[ST]], "op 0 moe.embedding #moe.task<PRE, fwd>");
// CPP: moe_rt_all_reduce_into({{v[0-9]+}}, {{v[0-9]+}}, {{v[0-9]+}}, {{v[0-9]+}}, 256, 256);
// CPP: moe_step_end([[S]]);

module {
  shard.grid @cluster(shape = 1x2)
  func.func @tiny(%arg0: tensor<2x4xi64>, %arg1: tensor<2x4xi64>,
                  %arg2: tensor<16x8xf32> {moe.param = "embed.table"},
                  %arg3: tensor<8x16xf32> {moe.param = "lm_head.weight"})
      -> (tensor<f32>, tensor<16x8xf32>, tensor<8x16xf32>)
      attributes {moe.schedule = "flowmoe"} {
    %0 = moe.embedding %arg0, %arg2 {moe.stream = #moe.stream<compute>, moe.task = #moe.task<PRE, fwd>} : (tensor<2x4xi64>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
    %1:2 = moe.split %0 {moe.stream = #moe.stream<compute>, moe.task = #moe.task<PRE, fwd>} : tensor<2x4x8xf32> -> tensor<1x4x8xf32>, tensor<1x4x8xf32>
    %2 = moe.merge %1#0, %1#1 {moe.stream = #moe.stream<compute>, moe.task = #moe.task<HEAD, fwd>} : tensor<1x4x8xf32>, tensor<1x4x8xf32> -> tensor<2x4x8xf32>
    %3 = moe.linear %2, %arg3 {moe.stream = #moe.stream<compute>, moe.task = #moe.task<HEAD, fwd>} : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
    %4 = moe.cross_entropy %3, %arg1 {moe.stream = #moe.stream<compute>, moe.task = #moe.task<HEAD, fwd>} : (tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<f32>
    %cst = arith.constant {moe.task = #moe.task<HEAD, bwd>} dense<5.000000e-01> : tensor<f32>
    %5 = moe.vjp (%a = %3 : tensor<2x4x16xf32>, %b = %arg1 : tensor<2x4xi64>) cotangents(%cst : tensor<f32>) -> (tensor<2x4x16xf32>) attributes {moe.stream = #moe.stream<compute>, moe.task = #moe.task<HEAD, bwd>} {
      %l = moe.cross_entropy %a, %b : (tensor<2x4x16xf32>, tensor<2x4xi64>) -> tensor<f32>
      moe.yield %l : tensor<f32>
    }
    %6:2 = moe.vjp (%a = %2 : tensor<2x4x8xf32>, %b = %arg3 : tensor<8x16xf32>) cotangents(%5 : tensor<2x4x16xf32>) -> (tensor<2x4x8xf32>, tensor<8x16xf32>) attributes {moe.stream = #moe.stream<compute>, moe.task = #moe.task<HEAD, bwd>} {
      %y = moe.linear %a, %b : (tensor<2x4x8xf32>, tensor<8x16xf32>) -> tensor<2x4x16xf32>
      moe.yield %y : tensor<2x4x16xf32>
    }
    %7 = moe.vjp (%a = %arg0 : tensor<2x4xi64>, %b = %arg2 : tensor<16x8xf32>) cotangents(%6#0 : tensor<2x4x8xf32>) -> (tensor<16x8xf32>) attributes {moe.stream = #moe.stream<compute>, moe.task = #moe.task<PRE, bwd>} {
      %y = moe.embedding %a, %b : (tensor<2x4xi64>, tensor<16x8xf32>) -> tensor<2x4x8xf32>
      moe.yield %y : tensor<2x4x8xf32>
    }
    %e0 = moe.record_event on <compute>
    moe.wait_event %e0 on <comm>
    %8 = moe.all_reduce %7 on @cluster axes = [0, 1] bytes [0, 256] {moe.stream = #moe.stream<comm>, moe.task = #moe.task<AR, bwd>} : tensor<16x8xf32>
    %9 = moe.all_reduce %8 on @cluster axes = [0, 1] bytes [256, 256] {moe.stream = #moe.stream<comm>, moe.task = #moe.task<AR, bwd>} : tensor<16x8xf32>
    %10 = moe.all_reduce %6#1 on @cluster axes = [0, 1] {moe.stream = #moe.stream<comm>, moe.task = #moe.task<AR, bwd>} : tensor<8x16xf32>
    %e1 = moe.record_event on <comm>
    moe.wait_event %e1 on <compute>
    %11 = moe.sgd %arg2, %9 lr = 1.000000e+00 {moe.stream = #moe.stream<compute>, moe.task = #moe.task<OPT, bwd>} : tensor<16x8xf32>
    %12 = moe.sgd %arg3, %10 lr = 1.000000e+00 {moe.stream = #moe.stream<compute>, moe.task = #moe.task<OPT, bwd>} : tensor<8x16xf32>
    return %4, %11, %12 : tensor<f32>, tensor<16x8xf32>, tensor<8x16xf32>
  }
}
