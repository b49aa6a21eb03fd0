// `moe.source` on a parameter argument: where an imported weight's values
// are (docs/frontend/builder.md). Well-formed ones round-trip; every
// malformed one is refused with the key at fault.
// RUN: moe-opt %s -split-input-file -verify-diagnostics | FileCheck %s

// CHECK-LABEL: func.func @ok
// CHECK-SAME: moe.source = {file = "m.onnx", names = ["e0", "e1"], scale = 5.000000e-01 : f64, slice = array<i64: 0, 2, 2>, stacked, transpose}
func.func @ok(%w: tensor<2x2x4xf32> {moe.param = "block0.experts.up", moe.source = {file = "m.onnx", names = ["e0", "e1"], stacked, transpose, slice = array<i64: 0, 2, 2>, scale = 0.5 : f64}}) {
  return
}

// -----

// expected-error @+1 {{'moe.source' of argument #0 needs `file`, a non-empty string}}
func.func @f(%w: tensor<4xf32> {moe.source = {names = ["w"]}}) {
  return
}

// -----

// expected-error @+1 {{'moe.source' of argument #0 needs `names`, a non-empty list of initializer names}}
func.func @f(%w: tensor<4xf32> {moe.source = {file = "m.onnx", names = []}}) {
  return
}

// -----

// expected-error @+1 {{'moe.source' of argument #0 lists 2 initializers but is not `stacked`}}
func.func @f(%w: tensor<4xf32> {moe.source = {file = "m.onnx", names = ["a", "b"]}}) {
  return
}

// -----

// expected-error @+1 {{'moe.source' of argument #0 `slice` must be array<i64: axis, begin, size> with size > 0}}
func.func @f(%w: tensor<4xf32> {moe.source = {file = "m.onnx", names = ["a"], slice = array<i64: 0, 1>}}) {
  return
}

// -----

// expected-error @+1 {{'moe.source' of argument #0 has an unknown key 'offset'}}
func.func @f(%w: tensor<4xf32> {moe.source = {file = "m.onnx", names = ["a"], offset = 3}}) {
  return
}

// -----

// expected-error @+1 {{'moe.source' of argument #0 must be a dictionary}}
func.func @f(%w: tensor<4xf32> {moe.source = "m.onnx"}) {
  return
}
