#pragma once
// Element-wise kernels (elementwise.cpp): the softmax's pieces, the norms, the activations.
//
//   max_of(x, n)                        the largest of x[0..n) (n >= 1): exact in any order
//   exp_in_place(x, n)                  x[i] = e^x[i] for x[i] <= 0 (softmax), within ~2 ulp; each element
//                                       depends only on its own value
//   layer_norm(y, x, g, b, T, C, eps)   per row; y may alias x
//   rms_norm(y, x, g, T, C, eps)        per row y = g · (x · 1/sqrt(mean(x²) + eps)): the weight after the
//                                       normalisation (HF LlamaRMSNorm); y may alias x
//   gelu_tanh / gelu_erf / relu / silu(x, n)   in place
//   silu_multiply(gate, up, n)          gate[i] = silu(gate[i]) · up[i]: silu then multiply, in one pass
//   multiply(y, x, n)                   y[i] *= x[i] (the gate of a gated MLP)
//   add(y, x, n)                        y[i] += x[i] (a residual connection)
#include <cstdint>

namespace kvscope {

float max_of(const float* x, int64_t n);
void exp_in_place(float* x, int64_t n);
void layer_norm(float* y, const float* x, const float* gain, const float* bias, int64_t T, int64_t C,
                float eps);
void gelu_tanh(float* x, int64_t n);
void gelu_erf(float* x, int64_t n);
void relu(float* x, int64_t n);
void rms_norm(float* y, const float* x, const float* gain, int64_t T, int64_t C, float eps);
void silu(float* x, int64_t n);
void silu_multiply(float* gate, const float* up, int64_t n);
void multiply(float* y, const float* x, int64_t n);
void add(float* y, const float* x, int64_t n);

}  // namespace kvscope
