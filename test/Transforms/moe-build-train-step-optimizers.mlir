// moe-build-train-step's optimizers (docs/optimizers.md): AdamW with its
// state as step state, the learning rate and update count as step inputs,
// the clipping norm's collectives; SGD with momentum; bad options named.
// RUN: moe-opt %S/Inputs/one-block.mlir --moe-build-train-step="optimizer=adamw lr=0.001 beta1=0.8 weight-decay=0.1 clip-norm=1.0 lr-schedule=cosine warmup=2 total-steps=10 min-lr=0.0001" | FileCheck %s
// RUN: moe-opt %S/Inputs/one-block.mlir --moe-build-train-step="momentum=0.9" | FileCheck %s --check-prefix=SGDM
// RUN: moe-opt %S/Inputs/one-block.mlir --moe-flowmoe-pipeline="degree=2 optimizer=adamw clip-norm=0.5" | FileCheck %s --check-prefix=PIPE
// RUN: not moe-opt %S/Inputs/one-block.mlir --moe-build-train-step="optimizer=adam" 2>&1 | FileCheck %s --check-prefix=BADOPT
// RUN: not moe-opt %S/Inputs/one-block.mlir --moe-build-train-step="lr-schedule=cosine warmup=5 total-steps=5" 2>&1 | FileCheck %s --check-prefix=BADCOS
// RUN: not moe-opt %S/Inputs/one-block.mlir --moe-build-train-step="optimizer=adamw momentum=0.9" 2>&1 | FileCheck %s --check-prefix=BADMOM
// RUN: not moe-opt %S/Inputs/one-block.mlir --moe-build-train-step="clip-norm=-1" 2>&1 | FileCheck %s --check-prefix=BADCLIP

// Step inputs, then two state slots per parameter, after the model's
// arguments; the schedule on the function; results: loss, 10 parameters,
// 20 state tensors.
// CHECK: func.func @m(
// CHECK-SAME: %{{.*}}: tensor<f32> {moe.step_input = "lr"}, %{{.*}}: tensor<i64> {moe.step_input = "step"}
// CHECK-SAME: tensor<32x16xf32> {moe.state = "embed.exp_avg"}, %{{.*}}: tensor<32x16xf32> {moe.state = "embed.exp_avg_sq"}
// CHECK-SAME: tensor<2x16x32xf32> {moe.state = "up.exp_avg"}
// CHECK-SAME: -> (tensor<f32>, tensor<32x16xf32>, {{.*}}, tensor<16x32xf32>, tensor<32x16xf32>, tensor<32x16xf32>,
// CHECK-SAME: moe.lr_schedule = {kind = "cosine", lr = 1.000000e-03 : f64, min_lr = 1.000000e-04 : f64, total = 10 : i64, warmup = 2 : i64}
// The global norm: experts' squares summed over the expert-parallel group,
// the reduced dense gradients' added locally, then the coefficient.
// CHECK: %[[SQE:.*]] = moe.sum_squares {{.*}} {moe.task = #moe.task<OPT, bwd>} : tensor<2x16x32xf32>, tensor<2x32x16xf32>{{$}}
// CHECK: %[[RED:.*]] = moe.all_reduce %[[SQE]] on @cluster axes = [1] {moe.task = #moe.task<OPT, bwd>} : tensor<f32>
// CHECK: %[[SQD:.*]] = moe.sum_squares {{.*}} : tensor<32x16xf32>, tensor<16x16xf32>, tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x16xf32>, tensor<16xf32>, tensor<16x8xf32>, tensor<16x32xf32>{{$}}
// CHECK: %[[SUM:.*]] = arith.addf %[[RED]], %[[SQD]]
// CHECK: %[[COEF:.*]] = moe.clip_coef %[[SUM]] max_norm = 1.000000e+00
// CHECK-COUNT-10: moe.adamw {{.*}} state({{.*}}) lr %{{.*}} step %{{.*}} scale %[[COEF]] {beta1 = 8.000000e-01 : f64, beta2 = {{[0-9.e-]+}} : f64, eps = 1.000000e-08 : f64, moe.task = #moe.task<OPT, bwd>, weight_decay = 1.000000e-01 : f64}
// CHECK: return

// SGDM: moe.step_input = "lr"
// SGDM-NOT: moe.step_input = "step"
// SGDM: moe.state = "embed.momentum_buffer"
// SGDM-SAME: moe.lr_schedule = {kind = "constant", lr = 1.000000e-02 : f64}
// SGDM-NOT: moe.clip_coef
// SGDM-COUNT-10: moe.sgd_momentum {{.*}} state({{.*}}) lr %{{[^ ]*}} {moe.task = #moe.task<OPT, bwd>, momentum = 9.000000e-01 : f64, weight_decay = 0.000000e+00 : f64}

// The pipeline passes the options on; the scheduled step keeps the clip
// all-reduce on the communication stream.
// PIPE: moe.all_reduce {{.*}}moe.stream = #moe.stream<comm{{.*}} : tensor<f32>{{$}}
// PIPE: moe.clip_coef {{.*}} max_norm = 5.000000e-01
// PIPE: moe.adamw

// BADOPT: moe-build-train-step: unknown optimizer 'adam' (expected sgd or adamw)
// BADCOS: lr-schedule=cosine needs 0 <= warmup < total-steps
// BADMOM: momentum is an SGD option
// BADCLIP: clip-norm must be >= 0
