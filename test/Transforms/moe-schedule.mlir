// FlowMoE Fig. 2 task orders for L = 2 blocks, R = 2, on both streams,
// forward and backward, for every policy; then R = 1, 4, 8 (Eqs. 2-5).
// The model is examples/gpt-moe-2block.mlir (2 blocks, B = 4).
//
// RUN: moe-opt %moe_src_root/examples/gpt-moe-2block.mlir --moe-microbatch=degree=1 --moe-build-train-step --moe-schedule=policy=vanilla --moe-print-schedule -o /dev/null | FileCheck %s --check-prefix=VANILLA
// RUN: moe-opt %moe_src_root/examples/gpt-moe-2block.mlir --moe-microbatch=degree=2 --moe-build-train-step --moe-schedule=policy=pipe-moe --moe-print-schedule -o /dev/null | FileCheck %s --check-prefix=PIPE
// RUN: moe-opt %moe_src_root/examples/gpt-moe-2block.mlir --moe-microbatch=degree=2 --moe-build-train-step --moe-schedule=policy=flowmoe-at --moe-print-schedule -o /dev/null | FileCheck %s --check-prefix=AT
// RUN: moe-opt %moe_src_root/examples/gpt-moe-2block.mlir --moe-microbatch=degree=2 --moe-build-train-step --moe-schedule=policy=flowmoe --moe-print-schedule -o /dev/null | FileCheck %s --check-prefix=FLOW
// RUN: moe-opt %moe_src_root/examples/gpt-moe-2block.mlir --moe-microbatch=degree=2 --moe-build-train-step --moe-schedule=policy=centralized-ar --moe-print-schedule -o /dev/null | FileCheck %s --check-prefix=CENTRAL
// RUN: moe-opt %moe_src_root/examples/gpt-moe-2block.mlir --moe-microbatch=degree=1 --moe-build-train-step --moe-schedule=policy=flowmoe --moe-print-schedule -o /dev/null | FileCheck %s --check-prefix=R1
// RUN: moe-opt %moe_src_root/examples/gpt-moe-2block.mlir --moe-microbatch=degree=4 --moe-build-train-step --moe-schedule --moe-print-schedule -o /dev/null | FileCheck %s --check-prefix=R4
// RUN: %python %moe_src_root/python/gen_model_mlir.py gpt-moe-2block --set batch=8 --set seq=16 | moe-opt --moe-microbatch=degree=8 --moe-build-train-step --moe-schedule --moe-print-schedule -o /dev/null | FileCheck %s --check-prefix=R8
//
// Fig. 2(a)/(b): vanillaEP, no pipelining, all-reduce after the backward.
// VANILLA:      fwd compute: PRE AT_1^1 E_1^1 AT_1^2 E_1^2 HEAD{{$}}
// VANILLA-NEXT: fwd comm: D_1^1 C_1^1 D_1^2 C_1^2{{$}}
// VANILLA-NEXT: bwd compute: HEAD' E_1^2' AT_1^2' E_1^1' AT_1^1' PRE' OPT{{$}}
// VANILLA-NEXT: bwd comm: C_1^2' D_1^2' C_1^1' D_1^1' AR^2 AR^1 AR{{$}}
//
// Fig. 2(c)/(d): R = 2 in the MoE layer only (Tutel / ScheMoE).
// PIPE:      fwd compute: PRE AT_1^1 AT_2^1 E_1^1 E_2^1 AT_1^2 AT_2^2 E_1^2 E_2^2 HEAD{{$}}
// PIPE-NEXT: fwd comm: D_1^1 D_2^1 C_1^1 C_2^1 D_1^2 D_2^2 C_1^2 C_2^2{{$}}
// PIPE-NEXT: bwd compute: HEAD' E_2^2' E_1^2' AT_2^2' AT_1^2' E_2^1' E_1^1' AT_2^1' AT_1^1' PRE' OPT{{$}}
// PIPE-NEXT: bwd comm: C_2^2' C_1^2' D_2^2' D_1^2' C_2^1' C_1^1' D_2^1' D_1^1' AR^2 AR^1 AR{{$}}
//
// Fig. 2(e): R = 2 in the MHA and the MoE layer, Eqs. 2-3; backward Eqs. 4-5.
// AT:      fwd compute: PRE AT_1^1 AT_2^1 E_1^1 E_2^1 AT_1^2 AT_2^2 E_1^2 E_2^2 HEAD{{$}}
// AT-NEXT: fwd comm: D_1^1 D_2^1 C_1^1 C_2^1 D_1^2 D_2^2 C_1^2 C_2^2{{$}}
// AT-NEXT: bwd compute: HEAD' E_2^2' E_1^2' AT_2^2' AT_1^2' E_2^1' E_1^1' AT_2^1' AT_1^1' PRE' OPT{{$}}
// AT-NEXT: bwd comm: C_2^2' C_1^2' D_2^2' D_1^2' C_2^1' C_1^1' D_2^1' D_1^1' AR^2 AR^1 AR{{$}}
//
// Fig. 2(f): as (e), with AR^(l) in the gap after block l's A2As (Theorem 1).
// FLOW:      fwd compute: PRE AT_1^1 AT_2^1 E_1^1 E_2^1 AT_1^2 AT_2^2 E_1^2 E_2^2 HEAD{{$}}
// FLOW-NEXT: fwd comm: D_1^1 D_2^1 C_1^1 C_2^1 D_1^2 D_2^2 C_1^2 C_2^2{{$}}
// FLOW-NEXT: bwd compute: HEAD' E_2^2' E_1^2' AT_2^2' AT_1^2' E_2^1' E_1^1' AT_2^1' AT_1^1' PRE' OPT{{$}}
// FLOW-NEXT: bwd comm: C_2^2' C_1^2' D_2^2' D_1^2' AR^2 C_2^1' C_1^1' D_2^1' D_1^1' AR^1 AR{{$}}
//
// CENTRAL:      bwd compute: HEAD' E_2^2' E_1^2' AT_2^2' AT_1^2' E_2^1' E_1^1' AT_2^1' AT_1^1' PRE' OPT{{$}}
// CENTRAL-NEXT: bwd comm: C_2^2' C_1^2' D_2^2' D_1^2' C_2^1' C_1^1' D_2^1' D_1^1' AR^2 AR^1 AR{{$}}
//
// R1:      fwd compute: PRE AT_1^1 E_1^1 AT_1^2 E_1^2 HEAD{{$}}
// R1-NEXT: fwd comm: D_1^1 C_1^1 D_1^2 C_1^2{{$}}
// R1-NEXT: bwd compute: HEAD' E_1^2' AT_1^2' E_1^1' AT_1^1' PRE' OPT{{$}}
// R1-NEXT: bwd comm: C_1^2' D_1^2' AR^2 C_1^1' D_1^1' AR^1 AR{{$}}
//
// R4:      fwd compute: PRE AT_1^1 AT_2^1 AT_3^1 AT_4^1 E_1^1 E_2^1 E_3^1 E_4^1 AT_1^2 AT_2^2 AT_3^2 AT_4^2 E_1^2 E_2^2 E_3^2 E_4^2 HEAD{{$}}
// R4-NEXT: fwd comm: D_1^1 D_2^1 D_3^1 D_4^1 C_1^1 C_2^1 C_3^1 C_4^1 D_1^2 D_2^2 D_3^2 D_4^2 C_1^2 C_2^2 C_3^2 C_4^2{{$}}
// R4-NEXT: bwd compute: HEAD' E_4^2' E_3^2' E_2^2' E_1^2' AT_4^2' AT_3^2' AT_2^2' AT_1^2' E_4^1' E_3^1' E_2^1' E_1^1' AT_4^1' AT_3^1' AT_2^1' AT_1^1' PRE' OPT{{$}}
// R4-NEXT: bwd comm: C_4^2' C_3^2' C_2^2' C_1^2' D_4^2' D_3^2' D_2^2' D_1^2' AR^2 C_4^1' C_3^1' C_2^1' C_1^1' D_4^1' D_3^1' D_2^1' D_1^1' AR^1 AR{{$}}
//
// R8:      fwd compute: PRE AT_1^1 AT_2^1 AT_3^1 AT_4^1 AT_5^1 AT_6^1 AT_7^1 AT_8^1 E_1^1 E_2^1 E_3^1 E_4^1 E_5^1 E_6^1 E_7^1 E_8^1 AT_1^2
// R8:      fwd comm: D_1^1 D_2^1 D_3^1 D_4^1 D_5^1 D_6^1 D_7^1 D_8^1 C_1^1 C_2^1 C_3^1 C_4^1 C_5^1 C_6^1 C_7^1 C_8^1 D_1^2
// R8:      bwd compute: HEAD' E_8^2' E_7^2' E_6^2' E_5^2' E_4^2' E_3^2' E_2^2' E_1^2' AT_8^2' AT_7^2' AT_6^2' AT_5^2' AT_4^2' AT_3^2' AT_2^2' AT_1^2' E_8^1'
// R8:      bwd comm: C_8^2' C_7^2' C_6^2' C_5^2' C_4^2' C_3^2' C_2^2' C_1^2' D_8^2' D_7^2' D_6^2' D_5^2' D_4^2' D_3^2' D_2^2' D_1^2' AR^2 C_8^1'

// The step itself: every task on a stream, the policy recorded.
// RUN: moe-opt %moe_src_root/examples/gpt-moe-2block.mlir --moe-microbatch=degree=2 --moe-build-train-step --moe-schedule=policy=pipe-moe | FileCheck %s --check-prefix=IR
// IR: moe.schedule = "pipe-moe"
// IR: moe.attention {{.*}}moe.stream = #moe.stream<compute>
// IR: moe.dispatch {{.*}}moe.stream = #moe.stream<comm>
// pipe-moe's barrier: the first dispatch waits for the block's last AT.
// IR: %[[EV:.*]] = moe.record_event on <compute>
// IR-NEXT: moe.wait_event %[[EV]] on <comm>
// IR-NEXT: moe.dispatch

// vanilla: the all-reduce waits for the whole backward computation and the
// update for all communication.
// RUN: moe-opt %moe_src_root/examples/gpt-moe-2block.mlir --moe-microbatch=degree=1 --moe-build-train-step --moe-schedule=policy=vanilla | FileCheck %s --check-prefix=VIR
// VIR: moe.vjp {{.*}}moe.task = #moe.task<PRE, bwd>
// VIR: %[[E1:.*]] = moe.record_event on <compute>
// VIR-NEXT: moe.wait_event %[[E1]] on <comm>
// VIR-NEXT: moe.all_reduce
// VIR: moe.all_reduce
// VIR: %[[E2:.*]] = moe.record_event on <comm>
// VIR-NEXT: moe.wait_event %[[E2]] on <compute>
// VIR-NEXT: moe.sgd

// Errors.
// RUN: not moe-opt %moe_src_root/examples/gpt-moe-2block.mlir --moe-microbatch=degree=2 --moe-build-train-step --moe-schedule=policy=fastest 2>&1 | FileCheck %s --check-prefix=BADPOLICY
// BADPOLICY: moe-schedule: unknown policy 'fastest' (expected vanilla, pipe-moe, flowmoe-at, flowmoe, centralized-ar or fsmoe)
// RUN: not moe-opt %moe_src_root/examples/gpt-moe-2block.mlir --moe-microbatch=degree=2 --moe-build-train-step --moe-schedule=policy=vanilla 2>&1 | FileCheck %s --check-prefix=VANILLAR
// VANILLAR: policy vanilla is vanillaEP without pipelining; the step has 2 micro-batches
// RUN: not moe-opt %moe_src_root/examples/gpt-moe-2block.mlir --moe-schedule 2>&1 | FileCheck %s --check-prefix=NOTSTEP
// NOTSTEP: moe-schedule: not a training step (run moe-build-train-step first)
// RUN: not moe-opt %moe_src_root/examples/gpt-moe-2block.mlir --moe-flowmoe-pipeline --moe-schedule 2>&1 | FileCheck %s --check-prefix=TWICE
// TWICE: is already a sync: run moe-schedule before moe-insert-syncs
