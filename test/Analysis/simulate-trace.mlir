// The Chrome-trace timeline: one process per rank, one track per stream;
// the pool runs the dispatch before the earlier-issued all-reduce chunk.
// RUN: moe-opt %s --moe-simulate="profile=%S/Inputs/unit-profile.json" --moe-trace=%t.json -o /dev/null
// RUN: %python -c "import json,sys; t=json.load(open(sys.argv[1])); ev=[e for e in t['traceEvents'] if e['ph']=='X' and e['pid']==0]; print(sorted((e['ts'], e['name'], e['dur']) for e in ev)); print('ranks', len({e['pid'] for e in t['traceEvents']})); print('tracks', sorted({a['args']['name'] for a in t['traceEvents'] if a['name']=='thread_name'}))" %t.json | FileCheck %s
// RUN: moe-opt %s --moe-simulate="profile=%S/Inputs/unit-profile.json trace=%t.2.json" -o /dev/null
// RUN: diff %t.json %t.2.json
// RUN: not moe-opt %s --moe-simulate="profile=%S/Inputs/unit-profile.json trace=/nonexistent/dir/t.json" -o /dev/null 2>&1 | FileCheck %s --check-prefix=BADTRACE
// CHECK: [(0, 'moe.dispatch', 192), (192, 'moe.all_reduce', 400)]
// CHECK: ranks 4
// CHECK: tracks ['comm']
// BADTRACE: moe-simulate: trace:

shard.grid @g(shape = 4)
func.func @pool(%g: tensor<100xf32>, %x: tensor<2x4x8xf32>, %i: tensor<2x4x1xi32>, %c: tensor<4xi32>) -> (tensor<100xf32>, tensor<1x8x8xf32>) attributes {moe.schedule = "test"} {
  %r = moe.all_reduce %g on @g axes = [0] bytes [0, 400] {moe.stream = #moe.stream<comm>} : tensor<100xf32>
  %d = moe.dispatch %x, %i, %c on @g axes = [0] experts = 4 capacity = 2 {moe.stream = #moe.stream<comm>} : (tensor<2x4x8xf32>, tensor<2x4x1xi32>, tensor<4xi32>) -> tensor<1x8x8xf32>
  return %r, %d : tensor<100xf32>, tensor<1x8x8xf32>
}
