// `moe.source` on a parameter argument: where an imported weight's values
// are, a #moe.source (docs/dialect/MoeDialect.md, docs/frontend/builder.md).
// Well-formed ones round-trip, the optional keys in any order; every
// malformed one is refused with the key at fault.
// RUN: moe-opt %s -split-input-file -verify-diagnostics | FileCheck %s

// CHECK-LABEL: func.func @ok
// CHECK-SAME: moe.source = #moe.source<file = "m.onnx", names = ["e0", "e1"], scale = 5.000000e-01, slice = [0, 2, 2], stacked, transpose>
func.func @ok(%w: tensor<2x2x4xf32> {moe.param = "block0.experts.up", moe.source = #moe.source<file = "m.onnx", names = ["e0", "e1"], stacked, transpose, slice = [0, 2, 2], scale = 0.5>}) {
  return
}

// One parameter holding both experts (DBRX's w1): named once per expert,
// expert n's rows start at 0 + n * 4.
// CHECK-LABEL: func.func @strided
// CHECK-SAME: moe.source = #moe.source<file = "m.onnx", names = ["w1", "w1"], slice = [0, 0, 4, 4], stacked, transpose>
func.func @strided(%w: tensor<2x3x4xf32> {moe.param = "block0.experts.gate", moe.source = #moe.source<file = "m.onnx", names = ["w1", "w1"], slice = [0, 0, 4, 4], stacked, transpose>}) {
  return
}

// CHECK-LABEL: func.func @plain
// CHECK-SAME: moe.source = #moe.source<file = "dir/m.onnx", names = ["w"]>
func.func @plain(%w: tensor<4xf32> {moe.param = "w", moe.source = #moe.source<file = "dir/m.onnx", names = ["w"]>}) {
  return
}

// -----

// expected-error @+1 {{#moe.source needs `file`, a non-empty string}}
func.func @f(%w: tensor<4xf32> {moe.source = #moe.source<file = "", names = ["w"]>}) {
  return
}

// -----

// expected-error @+1 {{expected 'file'}}
func.func @f(%w: tensor<4xf32> {moe.source = #moe.source<names = ["w"]>}) {
  return
}

// -----

// expected-error @+1 {{#moe.source needs `names`, a non-empty list of initializer names}}
func.func @f(%w: tensor<4xf32> {moe.source = #moe.source<file = "m.onnx", names = []>}) {
  return
}

// -----

// expected-error @+1 {{#moe.source lists 2 initializers but is not `stacked`}}
func.func @f(%w: tensor<4xf32> {moe.source = #moe.source<file = "m.onnx", names = ["a", "b"]>}) {
  return
}

// -----

// expected-error @+1 {{#moe.source `slice` must be [axis, begin, size] or [axis, begin, size, stride] with size > 0}}
func.func @f(%w: tensor<4xf32> {moe.source = #moe.source<file = "m.onnx", names = ["a"], slice = [0, 1]>}) {
  return
}

// -----

// expected-error @+1 {{#moe.source `slice` has a stride (initializer n of a stack starts at begin + n * stride) but is not `stacked`}}
func.func @f(%w: tensor<4xf32> {moe.source = #moe.source<file = "m.onnx", names = ["a"], slice = [0, 0, 4, 4]>}) {
  return
}

// -----

// expected-error @+1 {{#moe.source `slice` has a stride (initializer n of a stack starts at begin + n * stride) but it is not positive}}
func.func @f(%w: tensor<2x4xf32> {moe.source = #moe.source<file = "m.onnx", names = ["a", "a"], slice = [0, 0, 4, 0], stacked>}) {
  return
}

// -----

// expected-error @+1 {{#moe.source has an unknown key 'offset' (expected scale, slice, stacked or transpose)}}
func.func @f(%w: tensor<4xf32> {moe.source = #moe.source<file = "m.onnx", names = ["a"], offset = 3>}) {
  return
}

// -----

// expected-error @+1 {{#moe.source repeats `stacked`}}
func.func @f(%w: tensor<4xf32> {moe.source = #moe.source<file = "m.onnx", names = ["a"], stacked, stacked>}) {
  return
}

// -----

// expected-error @+1 {{'moe.source' of argument #0 must be a #moe.source attribute}}
func.func @f(%w: tensor<4xf32> {moe.source = {file = "m.onnx", names = ["a"]}}) {
  return
}
