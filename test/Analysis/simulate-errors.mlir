// Malformed profiles and bad use: a clear error naming the field, non-zero
// exit.
// RUN: rm -rf %t && mkdir -p %t
// RUN: not moe-opt %s --moe-simulate 2>&1 | FileCheck %s --check-prefix=NOPROFILE
// RUN: not moe-opt %s --moe-simulate=profile=no-such-preset 2>&1 | FileCheck %s --check-prefix=MISSING
// RUN: echo '{"name": "x"' > %t/truncated.json
// RUN: not moe-opt %s --moe-simulate=profile=%t/truncated.json 2>&1 | FileCheck %s --check-prefix=JSON
// RUN: echo '[1, 2]' > %t/array.json
// RUN: not moe-opt %s --moe-simulate=profile=%t/array.json 2>&1 | FileCheck %s --check-prefix=OBJECT
// RUN: sed 's/"launch_us": 0/"launch_us": -1/' %S/Inputs/unit-profile.json > %t/negative.json
// RUN: not moe-opt %s --moe-simulate=profile=%t/negative.json 2>&1 | FileCheck %s --check-prefix=NEGATIVE
// RUN: sed 's/"gemm":/"gemmm":/' %S/Inputs/unit-profile.json > %t/typo.json
// RUN: not moe-opt %s --moe-simulate=profile=%t/typo.json 2>&1 | FileCheck %s --check-prefix=TYPO
// RUN: sed 's/"beta_us_per_flop": 0.001/"beta_us_per_flop": "fast"/' %S/Inputs/unit-profile.json > %t/string.json
// RUN: not moe-opt %s --moe-simulate=profile=%t/string.json 2>&1 | FileCheck %s --check-prefix=STRING
// RUN: sed 's/"beta_us_per_flop": 0.001/"beta_us_per_flop": 0/' %S/Inputs/unit-profile.json > %t/zero.json
// RUN: not moe-opt %s --moe-simulate=profile=%t/zero.json 2>&1 | FileCheck %s --check-prefix=ZERO
// RUN: sed 's/"nodes": 1/"nodes": 0/' %S/Inputs/unit-profile.json > %t/nodes.json
// RUN: not moe-opt %s --moe-simulate=profile=%t/nodes.json 2>&1 | FileCheck %s --check-prefix=NODES
// RUN: sed 's/"nodes": 1/"nodes": 2/' %S/Inputs/unit-profile.json > %t/inter.json
// RUN: not moe-opt %s --moe-simulate=profile=%t/inter.json 2>&1 | FileCheck %s --check-prefix=INTER
// RUN: sed 's/"comm_cpu_share": 0.5/"comm_cpu_share": 0.97/' %S/Inputs/unit-profile-cpu.json > %t/share.json
// RUN: not moe-opt %s --moe-simulate=profile=%t/share.json 2>&1 | FileCheck %s --check-prefix=SHARE
// RUN: sed 's/"comm_cpu_share": 0.5/"comm_stretch": 0.5/' %S/Inputs/unit-profile-cpu.json > %t/stretch.json
// RUN: not moe-opt %s --moe-simulate=profile=%t/stretch.json 2>&1 | FileCheck %s --check-prefix=STRETCH
// RUN: sed 's/"comm_cpu_share": 0.5/"comm_stretch": "2"/' %S/Inputs/unit-profile-cpu.json > %t/stretch-string.json
// RUN: not moe-opt %s --moe-simulate=profile=%t/stretch-string.json 2>&1 | FileCheck %s --check-prefix=STRETCH-STRING
// RUN: sed 's/"moe.linear": 3/"Linear": 3/' %S/Inputs/unit-profile-cpu.json > %t/class.json
// RUN: not moe-opt %s --moe-simulate=profile=%t/class.json 2>&1 | FileCheck %s --check-prefix=CLASS
// RUN: sed 's/"moe.linear": 3/"moe.vjp(moe.linear)": 0/' %S/Inputs/unit-profile-cpu.json > %t/scale.json
// RUN: not moe-opt %s --moe-simulate=profile=%t/scale.json 2>&1 | FileCheck %s --check-prefix=SCALE
// RUN: printf '\x00\x01garbage' > %t/binary.json
// RUN: not moe-opt %s --moe-simulate=profile=%t/binary.json 2>&1 | FileCheck %s --check-prefix=JSON
// RUN: not moe-opt %moe_src_root/examples/gpt-moe-2block.mlir --moe-simulate=profile=flowmoe-cluster1 2>&1 | FileCheck %s --check-prefix=UNSCHEDULED
// An output or trace the pass cannot open is named (PassUtils' openPassOutput).
// RUN: moe-opt %moe_src_root/examples/gpt-moe-2block.mlir --moe-flowmoe-pipeline -o %t/step.mlir
// RUN: not moe-opt %t/step.mlir --moe-simulate="profile=flowmoe-cluster1 output=%t/no/dir/out.txt" -o /dev/null 2>&1 | FileCheck %s --check-prefix=OUTPUT
// RUN: not moe-opt %t/step.mlir --moe-simulate="profile=flowmoe-cluster1 trace=%t/no/dir/t.json" -o /dev/null 2>&1 | FileCheck %s --check-prefix=TRACE
// Every shipped preset loads and simulates.
// RUN: for p in flowmoe-cluster1 flowmoe-cluster2 fsmoe-testbed-a fsmoe-testbed-b h100-node; do moe-opt %moe_src_root/examples/gpt-moe-2block.mlir --moe-flowmoe-pipeline --moe-simulate=profile=$p -o /dev/null | grep -q "on profile $p" || exit 1; done

// NOPROFILE: moe-simulate: needs profile=<preset or JSON file>; presets: flowmoe-cluster1, flowmoe-cluster2, fsmoe-testbed-a, fsmoe-testbed-b, h100-node
// MISSING: cannot read profile 'no-such-preset'
// JSON: not valid JSON
// OBJECT: the profile must be a JSON object
// NEGATIVE: (profile).launch_us: must not be negative
// SHARE: comm_cpu_share: must be below 0.95
// STRETCH: comm_stretch: must be between 1 and 100
// STRETCH-STRING: (profile).comm_stretch: must be a finite number
// CLASS: op_scale.Linear: not an op class (e.g. moe.attention, moe.vjp(moe.expert))
// SCALE: op_scale.moe.vjp(moe.linear): must be positive
// TYPO: compute: unknown field 'gemmm'
// STRING: compute.gemm.beta_us_per_flop: must be a finite number
// ZERO: compute.gemm.beta_us_per_flop: must be positive
// NODES: mesh.nodes: must be a positive integer
// INTER: collectives.all_to_all: missing field 'inter'
// UNSCHEDULED: moe-simulate: no scheduled step
// OUTPUT: moe-simulate: {{.*}}no/dir/out.txt
// TRACE: moe-simulate: trace: {{.*}}no/dir/t.json

shard.grid @g(shape = 4)
func.func @f(%g: tensor<100xf32>) -> tensor<100xf32> attributes {moe.schedule = "test"} {
  %r = moe.all_reduce %g on @g axes = [0] {moe.stream = #moe.stream<comm>} : tensor<100xf32>
  return %r : tensor<100xf32>
}
