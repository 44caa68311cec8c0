#pragma once
// Numeric kernels of the forward pass: this header includes them all (callers need only this one).
// Outputs first, sizes explicit, nothing allocated inside.
//
// Every kernel computes each output element with one fixed sequence of float operations that does not
// depend on how many rows are processed together, on tiling, or on threads. So a row computed in a
// 1-token decode step is bit-for-bit the row computed in a 500-token prefill or a full recompute:
// cached, uncached, chunked and batched runs agree exactly, not just within a tolerance.
//
// One file per kind, each with its AVX-512, AVX2 and portable variants side by side (simd.h picks one):
//   matmul.h       WeightRef, matmul_kn, matmul_nk, matmul_nk_shared   (matmul_kn.cpp, matmul_nk.cpp)
//   dot.h          dot, axpy, dot_rows(_heads), axpy_rows(_heads)      (dot.cpp)
//   elementwise.h  max_of, exp_in_place, layer_norm, rms_norm, gelu_tanh, gelu_erf, relu, silu, multiply
//                                                                      (elementwise.cpp)
// lanes.h holds the lane helpers the .cpp files share; attention.h builds one attention row on dot.h.
#include "kernels/dot.h"
#include "kernels/elementwise.h"
#include "kernels/matmul.h"
