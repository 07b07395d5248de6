// RUN: kiln-opt %s | kiln-opt | FileCheck %s

// The parallelism ops print as they parse.
// CHECK-LABEL: func.func @rank
// CHECK: xfmr.slice %{{.*}} {axis = 0 : i64, offset = 32 : i64, size = 32 : i64} : (tensor<64x64xbf16>) -> tensor<32x64xbf16>
// CHECK: xfmr.slice %{{.*}} {axis = 1 : i64, offset = 32 : i64, size = 32 : i64} : (tensor<64x64xbf16>) -> tensor<64x32xbf16>
// CHECK: xfmr.recv {peer = 0 : i64} : tensor<?x64xf32>
// CHECK: xfmr.all_reduce %{{.*}} {group_size = 2 : i64} : tensor<?x64xf32>
// CHECK: xfmr.send %{{.*}} {peer = 2 : i64} : tensor<?x64xf32>
func.func @rank(%x: tensor<?x32xf32>) {
  %w = xfmr.weight "w" : tensor<64x64xbf16>
  %rows = xfmr.slice %w {axis = 0 : i64, offset = 32 : i64, size = 32 : i64} : (tensor<64x64xbf16>) -> tensor<32x64xbf16>
  %cols = xfmr.slice %w {axis = 1 : i64, offset = 32 : i64, size = 32 : i64} : (tensor<64x64xbf16>) -> tensor<64x32xbf16>
  %r = xfmr.recv {peer = 0 : i64} : tensor<?x64xf32>
  %p = xfmr.linear %x, %cols : (tensor<?x32xf32>, tensor<64x32xbf16>) -> tensor<?x64xf32>
  %s = xfmr.all_reduce %p {group_size = 2 : i64} : tensor<?x64xf32>
  xfmr.send %s {peer = 2 : i64} : tensor<?x64xf32>
  return
}
