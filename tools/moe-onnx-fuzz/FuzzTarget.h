//===- FuzzTarget.h - one fuzz input through the ONNX importer --*- C++ -*-===//
#ifndef MOE_TOOLS_MOE_ONNX_FUZZ_FUZZTARGET_H
#define MOE_TOOLS_MOE_ONNX_FUZZ_FUZZTARGET_H

#include <cstddef>
#include <cstdint>

/// Imports `data` as an ONNX file; aborts on a contract violation (a module
/// that does not verify, a failure without an error). Returns 0.
int moeFuzzOneInput(const uint8_t *data, size_t size, bool verbose = false);

#endif
