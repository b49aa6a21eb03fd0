// RUN: moe-opt %s --moe-chunk-gradients=chunk-bytes=512 | FileCheck %s
// RUN: moe-opt %s --moe-chunk-gradients="chunk-bytes=1KiB" | FileCheck %s --check-prefix=KIB
// RUN: moe-opt %s --moe-chunk-gradients=chunk-bytes=1MiB | FileCheck %s --check-prefix=BIG
// RUN: not moe-opt %s --moe-chunk-gradients=chunk-bytes=lots 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not moe-opt %s --moe-chunk-gradients=chunk-bytes=0 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not moe-opt %s --moe-chunk-gradients=chunk-bytes=6 2>&1 | FileCheck %s --check-prefix=ALIGN

shard.grid @g(shape = 4)

// Tensors of 1024 B (16x16), 16 B (4), 400 B (100) and 1200 B (300):
// with S_p = 512 B, 1024 B -> [0, 512) [512, 1024); 16 B and 400 B packed
// (416 <= 512); 1200 B -> [0, 512) [512, 1024) [1024, 1200) (last shorter).
// CHECK-LABEL: func.func @ar
func.func @ar(%a: tensor<16x16xf32>, %b: tensor<4xf32>, %c: tensor<100xf32>, %d: tensor<300xf32>)
    -> (tensor<16x16xf32>, tensor<4xf32>, tensor<100xf32>, tensor<300xf32>) {
  // CHECK: %[[A0:.*]] = moe.all_reduce %arg0 on @g axes = [0] bytes [0, 512] {moe.stream = #moe.stream<comm>, moe.task = #moe.task<AR, bwd, block = 1, chunk = 0>} : tensor<16x16xf32>
  // CHECK: %[[A1:.*]] = moe.all_reduce %[[A0]] on @g axes = [0] bytes [512, 512] {{.*}}chunk = 1>} : tensor<16x16xf32>
  // CHECK: %[[BC:.*]]:2 = moe.all_reduce %arg1, %arg2 on @g axes = [0] {{.*}}chunk = 2>} : tensor<4xf32>, tensor<100xf32>
  // CHECK: %[[D0:.*]] = moe.all_reduce %arg3 {{.*}} bytes [0, 512] {{.*}}chunk = 3>}
  // CHECK: %[[D1:.*]] = moe.all_reduce %[[D0]] {{.*}} bytes [512, 512] {{.*}}chunk = 4>}
  // CHECK: %[[D2:.*]] = moe.all_reduce %[[D1]] {{.*}} bytes [1024, 176] {{.*}}chunk = 5>}
  // CHECK-NOT: moe.all_reduce
  // CHECK: return %[[A1]], %[[BC]]#0, %[[BC]]#1, %[[D2]]
  %r:4 = moe.all_reduce %a, %b, %c, %d on @g axes = [0] {moe.stream = #moe.stream<comm>, moe.task = #moe.task<AR, bwd, block = 1>} : tensor<16x16xf32>, tensor<4xf32>, tensor<100xf32>, tensor<300xf32>
  return %r#0, %r#1, %r#2, %r#3 : tensor<16x16xf32>, tensor<4xf32>, tensor<100xf32>, tensor<300xf32>
}

// KIB: moe.all_reduce %arg0 on @g axes = [0] {{.*}}chunk = 0>} : tensor<16x16xf32>
// KIB: moe.all_reduce %arg1, %arg2 on @g axes = [0] {{.*}}chunk = 1>} : tensor<4xf32>, tensor<100xf32>
// KIB: moe.all_reduce %arg3 {{.*}} bytes [0, 1024] {{.*}}chunk = 2>}
// KIB: bytes [1024, 176] {{.*}}chunk = 3>}

// A chunk larger than everything: one chunk holding all four tensors.
// BIG: moe.all_reduce %arg0, %arg1, %arg2, %arg3 on @g axes = [0] {{.*}}chunk = 0>}
// BIG-NOT: moe.all_reduce

// BAD: moe-chunk-gradients: chunk-bytes '{{.*}}' is not a positive size (e.g. 1048576, 512KiB, 2MiB, 4MB)
// ALIGN: cannot be chunked into 6-byte chunks: not a multiple of the 4-byte element size
