//===- MoeTypes.td - moe dialect types ---------------------*- tablegen -*-===//

#ifndef MOE_TYPES_TD
#define MOE_TYPES_TD

include "MoeDialect.td"

class Moe_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<Moe_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

def Moe_EventType : Moe_Type<"Event", "event"> {
  let summary = "a point in a stream's issue order";
  let description = [{
    Produced by `moe.record_event` on one stream and consumed by
    `moe.wait_event` on another: the waiting stream does not start its next
    task before every task issued on the recording stream before the record
    has completed. Lowers to `cudaEvent_t` on GPU and to a completion counter
    on the CPU runtime.
  }];
}

#endif // MOE_TYPES_TD
