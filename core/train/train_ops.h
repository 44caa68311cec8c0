#pragma once
// Forward and backward of the GPT-2 building blocks, for training. Each op is written for a scalar type
// S (float for training, double for the finite-difference tests) and instantiated for both.
//
// Conventions (llm.c's): outputs first, sizes explicit, nothing allocated inside. Backward functions
// ADD into parameter gradients (a tied embedding collects two contributions) and into dx where the
// comment says "+=" (the residual stream collects several); "=" means overwritten.
// N = rows (batch × time), B = sequences, T = time, K = inputs, M = outputs, H = heads, D = head dim.
//
// Matmuls split their output rows into a fixed number of blocks that ThreadPool::global() runs;
// the split depends on the shapes only, so results are identical on every run and thread count.
//
//   matmul_nn / nt / tn        Y (+)= A·B, A·Bᵀ, Aᵀ·B
//   linear_forward / backward  Conv1D: y = x·W + b,  W (K, M) as stored in GPT-2 files
//   layer_norm_forward / backward
//   gelu_forward / backward    gelu_new (tanh approximation)
//   attention_forward / backward   causal multi-head attention on a fused qkv (N, 3C)
//   cross_entropy_forward / backward   mean over rows of -log softmax(logits)[target]; rows with target < 0
//                                      are not scored (no loss, no gradient, not counted in the mean)
#include <cstdint>

namespace kvscope {

// Y (M, Nn) = A (M, K) · B (K, Nn); accumulate adds to Y instead.
template <typename S> void matmul_nn(S* Y, const S* A, const S* B, int64_t M, int64_t K, int64_t Nn, bool accumulate);
// Y (M, Nn) = A (M, K) · B (Nn, K)ᵀ
template <typename S> void matmul_nt(S* Y, const S* A, const S* B, int64_t M, int64_t K, int64_t Nn, bool accumulate);
// Y (K, Nn) = A (M, K)ᵀ · B (M, Nn)
template <typename S> void matmul_tn(S* Y, const S* A, const S* B, int64_t M, int64_t K, int64_t Nn, bool accumulate);

// y (N, M) = x (N, K) · W (K, M) + b (M); b may be null.
template <typename S> void linear_forward(S* y, const S* x, const S* W, const S* b, int64_t N, int64_t K, int64_t M);
// dx (N, K) = dy·Wᵀ (skipped when dx is null); dW (K, M) += xᵀ·dy; db (M) += Σ_rows dy (skipped when null)
template <typename S> void linear_backward(S* dx, S* dW, S* db, const S* dy, const S* x, const S* W, int64_t N,
                                           int64_t K, int64_t M);

// y (N, C) = (x - mean) * rstd * g + b; mean, rstd (N) saved for backward.
template <typename S> void layer_norm_forward(S* y, S* mean, S* rstd, const S* x, const S* g, const S* b,
                                              int64_t N, int64_t C, double eps);
// dx (N, C) +=, dg (C) +=, db (C) +=
template <typename S> void layer_norm_backward(S* dx, S* dg, S* db, const S* dy, const S* x, const S* mean,
                                               const S* rstd, const S* g, int64_t N, int64_t C);

template <typename S> void gelu_forward(S* y, const S* x, int64_t n);
template <typename S> void gelu_backward(S* dx, const S* dy, const S* x, int64_t n);  // dx (n) =

// qkv (B·T, 3C): q | k | v along the row, head h at columns h·D.. of each third.
// out (B·T, C) =; weights (B, H, T, T) = softmax(q·kᵀ/√D) under the causal mask, 0 above the diagonal.
template <typename S> void attention_forward(S* out, S* weights, const S* qkv, int64_t B, int64_t T, int64_t C,
                                             int64_t H);
// dqkv (B·T, 3C) =
template <typename S> void attention_backward(S* dqkv, const S* dout, const S* weights, const S* qkv, int64_t B,
                                              int64_t T, int64_t C, int64_t H);

// probs (N, V) = softmax(logits); returns the mean over rows of -log probs[target].
template <typename S> double cross_entropy_forward(S* probs, const S* logits, const int32_t* targets, int64_t N,
                                                   int64_t V);
// dlogits (N, V) = (probs - onehot(target)) / N
template <typename S> void cross_entropy_backward(S* dlogits, const S* probs, const int32_t* targets, int64_t N,
                                                  int64_t V);

// x (B·T, C) = wte[tokens] + wpe[t]
template <typename S> void embedding_forward(S* x, const int32_t* tokens, const S* wte, const S* wpe, int64_t B,
                                             int64_t T, int64_t C);
// dwte (V, C) +=, dwpe (n_ctx, C) += from dx (B·T, C)
template <typename S> void embedding_backward(S* dwte, S* dwpe, const S* dx, const int32_t* tokens, int64_t B,
                                              int64_t T, int64_t C);

}  // namespace kvscope
