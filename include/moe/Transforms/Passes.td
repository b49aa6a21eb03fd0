//===- Passes.td - moe passes ------------------------------*- tablegen -*-===//
//
// One def per pass; the C++ lives in lib/Transforms/<Name>.cpp, the test in
// test/Transforms/<pass-argument>.mlir and the doc in docs/passes/.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_TRANSFORMS_PASSES_TD
#define MOE_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

def MoeModelSummary : Pass<"moe-model-summary", "::mlir::ModuleOp"> {
  let summary = "Print each model's hyper-parameters, groups, parameter "
                "counts and per-block communication volumes";
  let description = [{
    For every function with a `moe.model` attribute, prints (to stdout, or
    to `output`) the FlowMoE Table 2 view of the model: L, B, N, M, H, E, k,
    f; the device grid and the sizes of its expert-parallel, data-parallel
    and intra-node groups; parameters split into replicated (MHA, gate,
    norms, embeddings, head: all-reduced) and expert (local to a rank) ones;
    and per block the gradient all-reduce bytes and the dispatch all-to-all
    bytes each rank sends. The IR is not changed.
  }];
  let options = [
    Option<"output", "output", "std::string", /*default=*/"\"-\"",
           "Where to write the summary ('-' for stdout)">,
    Option<"json", "json", "bool", /*default=*/"false",
           "Write JSON instead of text">
  ];
}

#endif // MOE_TRANSFORMS_PASSES_TD
