// What --moe-convert-to-emitc refuses, each with an error naming the op.
// RUN: moe-opt %s --split-input-file --moe-convert-to-emitc -verify-diagnostics

// expected-error @+1 {{'func.func' cannot be converted to EmitC: it is not a scheduled step (run moe-opt --moe-flowmoe-pipeline first)}}
func.func @plain(%x: tensor<2x4x8xf32>, %w: tensor<8x8xf32>) -> tensor<2x4x8xf32> {
  %0 = moe.linear %x, %w : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  return %0 : tensor<2x4x8xf32>
}

// -----

func.func @no_stream(%x: tensor<2x4x8xf32>, %w: tensor<8x8xf32>) -> tensor<2x4x8xf32> attributes {moe.schedule = "flowmoe"} {
  // expected-error @+1 {{'moe.linear' op is not on a stream: run moe-opt --moe-flowmoe-pipeline before --moe-convert-to-emitc}}
  %0 = moe.linear %x, %w : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
  return %0 : tensor<2x4x8xf32>
}

// -----

func.func @constant(%x: tensor<2xf32>) -> tensor<2xf32> attributes {moe.schedule = "flowmoe"} {
  // expected-error @+1 {{'arith.constant' op cannot be converted: only splat tensor constants are supported}}
  %c = arith.constant dense<[1.0, 2.0]> : tensor<2xf32>
  %0 = arith.addf %x, %c {moe.stream = #moe.stream<compute>} : tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

// expected-error @+1 {{cannot be converted: dynamic shape 'tensor<?x8xf32>' (dropless routing is not supported yet)}}
func.func @dynamic(%x: tensor<?x8xf32>, %w: tensor<8x8xf32>) -> tensor<?x8xf32> attributes {moe.schedule = "flowmoe"} {
  %0 = moe.linear %x, %w {moe.stream = #moe.stream<compute>} : (tensor<?x8xf32>, tensor<8x8xf32>) -> tensor<?x8xf32>
  return %0 : tensor<?x8xf32>
}

// -----

// expected-error @+1 {{'step.v2' is not a C identifier: name the generated functions with --moe-convert-to-emitc="prefix=..."}}
func.func @"step.v2"(%x: tensor<2xf32>) -> tensor<2xf32> attributes {moe.schedule = "flowmoe"} {
  %0 = arith.addf %x, %x {moe.stream = #moe.stream<compute>} : tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

// expected-error @+1 {{no scheduled step to convert (run moe-opt --moe-flowmoe-pipeline first)}}
module {
}
