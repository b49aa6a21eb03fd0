//===- Passes.td - moe-convert-to-emitc --------------------*- tablegen -*-===//
//
// Generated C++ out of the moe dialect. The C++ lives in lib/Target/EmitC,
// the tests in test/Conversion/, the design in docs/codegen.md.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_TARGET_EMITC_PASSES_TD
#define MOE_TARGET_EMITC_PASSES_TD

include "mlir/Pass/PassBase.td"

def MoeConvertToEmitC : Pass<"moe-convert-to-emitc", "::mlir::ModuleOp"> {
  let summary = "Lower scheduled training steps to EmitC calls into the "
                "moe runtime";
  let description = [{
    Replaces every scheduled step (a function with `moe.schedule`, the
    output of `moe-flowmoe-pipeline`) by two `emitc.func`s that
    `mlir-translate --mlir-to-cpp` prints as C++:

      * `<prefix>_declare(moe_step *s)`: the step's buffers (shape, dtype),
        its arguments and parameters (names, expert or replicated), its
        results and the device grid, registered with the support library
        (moe_rt/step_support.h);
      * `<prefix>_step(moe_step *s)`: one training step, op by op in IR
        order, exactly as `moe-run` executes it: one runtime stream per
        `#moe.stream`, `moe.record_event`/`moe.wait_event` as runtime
        events, every op and `moe.vjp` as its moe_rt/ops.h call (status
        checked), collectives on the group communicator of their grid axes,
        all-reduce chunks on the communication pool.

    The shard grids go too, so the module holds only EmitC. An op the
    runtime cannot execute (or a dynamic shape, dropless dispatch, a
    non-splat constant) is an error naming it.
  }];
  let options = [
    Option<"prefix", "prefix", "std::string", /*default=*/"\"\"",
           "Name prefix of the generated functions (default: the step "
           "function's name; only with a single step)">
  ];
  let dependentDialects = ["::mlir::emitc::EmitCDialect"];
}

#endif // MOE_TARGET_EMITC_PASSES_TD
