// RUN: kiln-opt %s -split-input-file -verify-diagnostics

// Each case breaks one verifier rule of the parallelism ops.
func.func @slice_past_the_end() {
  %w = xfmr.weight "w" : tensor<64x64xf32>
  // expected-error @+1 {{entries 48 .. 80 along axis 0, expected within 0 .. 64}}
  %s = xfmr.slice %w {axis = 0 : i64, offset = 48 : i64, size = 32 : i64} : (tensor<64x64xf32>) -> tensor<32x64xf32>
  return
}

// -----

func.func @slice_wrong_shape() {
  %w = xfmr.weight "w" : tensor<64x64xf32>
  // expected-error @+1 {{result shape [64, 32], expected [32, 64]}}
  %s = xfmr.slice %w {axis = 0 : i64, offset = 0 : i64, size = 32 : i64} : (tensor<64x64xf32>) -> tensor<64x32xf32>
  return
}

// -----

func.func @slice_bad_axis() {
  %w = xfmr.weight "w" : tensor<64x64xf32>
  // expected-error @+1 {{axis 2, expected 0 to 1}}
  %s = xfmr.slice %w {axis = 2 : i64, offset = 0 : i64, size = 32 : i64} : (tensor<64x64xf32>) -> tensor<64x32xf32>
  return
}

// -----

func.func @all_reduce_of_one(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{group_size 1, expected at least 2 ranks}}
  %s = xfmr.all_reduce %x {group_size = 1 : i64} : tensor<?x64xf32>
  return
}

// -----

func.func @all_reduce_heads(%x: tensor<?x4x16xf32>) {
  // expected-error @+1 {{input shape [?, 4, 16], expected an activation [N, hidden] with a static hidden}}
  %s = xfmr.all_reduce %x {group_size = 2 : i64} : tensor<?x4x16xf32>
  return
}

// -----

func.func @send_backwards(%x: tensor<?x64xf32>) {
  // expected-error @+1 {{peer 0, expected a later stage (at least 1)}}
  xfmr.send %x {peer = 0 : i64} : tensor<?x64xf32>
  return
}

// -----

func.func @recv_dynamic_hidden() {
  // expected-error @+1 {{result shape [?, ?], expected an activation [N, hidden] with a static hidden}}
  %x = xfmr.recv {peer = 0 : i64} : tensor<?x?xf32>
  return
}
