//===- MoeInterfaces.td - moe op interfaces ----------------*- tablegen -*-===//

#ifndef MOE_INTERFACES_TD
#define MOE_INTERFACES_TD

include "mlir/IR/OpBase.td"

def Moe_TaskOpInterface : OpInterface<"TaskOpInterface"> {
  let cppNamespace = "::mlir::moe";
  let description = [{
    An op that is one task of the training step (FlowMoE §2.2): it occupies
    one resource, the compute or the communication stream, for its duration,
    and the scheduling passes may put it on a stream with `moe.stream`.
  }];
  let methods = [
    InterfaceMethod<
      "Whether the task runs on a communication stream.",
      "bool", "isCommunication", (ins), [{}], [{ return false; }]>
  ];
}

def Moe_CollectiveOpInterface : OpInterface<"CollectiveOpInterface"> {
  let cppNamespace = "::mlir::moe";
  let description = [{
    A collective over the group of ranks spanned by `axes` of the
    `shard.grid` named by `grid` (upstream `shard` conventions).
  }];
  let methods = [
    InterfaceMethod<"The grid symbol.", "::mlir::FlatSymbolRefAttr",
      "getGridAttr">,
    InterfaceMethod<"The grid axes that span the group.",
      "::llvm::ArrayRef<int16_t>", "getAxes">
  ];
}

// A host planner (docs/host-planners.md): an op whose work is a solve on
// the host CPU (NetMoE's placement; FlexMoE's and Pro-Prophet's plans),
// issued on a `#moe.stream<host>` thread so that it overlaps the streams it
// does not depend on. It moves no data: a collective group it names only
// gives the problem's shape.
def Moe_HostPlanner : NativeOpTrait<"HostPlanner"> {
  let cppNamespace = "::mlir::moe";
}

#endif // MOE_INTERFACES_TD
