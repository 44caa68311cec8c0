#pragma once
// Forward and backward of the Llama-family building blocks, for training (the GPT-2 ones are in
// train_ops.h, whose conventions hold here too): S = float for training, double for the gradient tests;
// outputs first, sizes explicit, nothing allocated inside (but the attention backward's (T, T) scratch
// per task, as train_ops.h's, and rope_table's set-up); backward functions ADD into parameter
// gradients, and into dx where the comment says "+="; "=" means overwritten. Every reduction has one
// fixed order, and work is split over the pool by shape only, so results do not depend on the thread count.
// N = rows (B sequences × T positions), C = hidden size, F = MLP width, H = query heads, K = K/V heads,
// D = head dim, V = vocab. Each rule names the Hugging Face function it follows.
//
//   proj_forward / backward          nn.Linear without bias: y = x·Wᵀ, W (out, in) as HF stores it
//   rms_norm_forward / backward      LlamaRMSNorm: y = x / √(mean(x²) + eps) · w  (Gemma3RMSNorm: · (1 + w))
//   rope_table                       cos, sin (T, D/2) of positions 0..T-1 from model/rotary.h (the engine's)
//   rope_forward / backward          apply_rotary_pos_emb (rotate_half: pairs (i, i + D/2)); backward turns back
//   swiglu_forward / backward        silu(gate) · up, elementwise (LlamaMLP's act_fn(gate_proj(x)) * up_proj(x))
//   swiglu_mlp_forward / backward    LlamaMLP: down(silu(gate(x)) · up(x)), no biases
//   gqa_attention_forward / backward causal attention of H query heads over K K/V heads (repeat_kv: query
//                                    head h reads K/V head h / (H/K)), an optional sliding window
//   embed_forward / backward         rows of the token table
#include <cstdint>

#include "model/config.h"

namespace kvscope {

// y (N, M) = x (N, Kin) · W (M, Kin)ᵀ
template <typename S> void proj_forward(S* y, const S* x, const S* W, int64_t N, int64_t Kin, int64_t M);
// dx (N, Kin) = dy·W, or += when accumulate (skipped when dx is null); dW (M, Kin) += dyᵀ·x
template <typename S> void proj_backward(S* dx, S* dW, const S* dy, const S* x, const S* W, int64_t N, int64_t Kin,
                                         int64_t M, bool accumulate);

// y (N, C) = x · r · (plus_one ? 1 + w : w), r = 1/√(mean(x²) + eps); rstd (N) = r, saved for backward.
// y may be x (in place).
template <typename S> void rms_norm_forward(S* y, S* rstd, const S* x, const S* w, int64_t N, int64_t C, double eps,
                                            bool plus_one);
// dx (N, C) +=, dw (C) +=
template <typename S> void rms_norm_backward(S* dx, S* dw, const S* dy, const S* x, const S* rstd, const S* w,
                                             int64_t N, int64_t C, bool plus_one);

// cos, sin (T, D/2) of positions 0..T-1: rotary_inv_freq and rotary_angles, float32 as the engine computes them.
template <typename S> void rope_table(S* cos, S* sin, const RopeSpec& rope, int64_t D, int64_t T);
// x (B·T, n_heads·D) rotated in place at position t of its row: x·cos + rotate_half(x)·sin.
template <typename S> void rope_forward(S* x, const S* cos, const S* sin, int64_t B, int64_t T, int64_t n_heads,
                                        int64_t D);
// dx (B·T, n_heads·D) in place: the transposed rotation (the rotation by -angle).
template <typename S> void rope_backward(S* dx, const S* cos, const S* sin, int64_t B, int64_t T, int64_t n_heads,
                                         int64_t D);

// h (n) = silu(gate) · up
template <typename S> void swiglu_forward(S* h, const S* gate, const S* up, int64_t n);
// dgate (n) =, dup (n) =
template <typename S> void swiglu_backward(S* dgate, S* dup, const S* dh, const S* gate, const S* up, int64_t n);

// y (N, C) = down(h), h (N, F) = silu(gate) · up, gate = x·Wgᵀ, up = x·Wuᵀ (N, F) each, all saved.
// Wg, Wu (F, C), Wd (C, F).
template <typename S> void swiglu_mlp_forward(S* y, S* gate, S* up, S* h, const S* x, const S* Wg, const S* Wu,
                                              const S* Wd, int64_t N, int64_t C, int64_t F);
// dx (N, C) = (or += when accumulate); dWg, dWu, dWd +=; dgate, dup, dh (N, F) are scratch, overwritten.
template <typename S> void swiglu_mlp_backward(S* dx, S* dWg, S* dWu, S* dWd, S* dgate, S* dup, S* dh, const S* dy,
                                               const S* x, const S* gate, const S* up, const S* h, const S* Wg,
                                               const S* Wu, const S* Wd, int64_t N, int64_t C, int64_t F,
                                               bool accumulate);

// The shape of one attention call: B sequences of T positions, H query heads over K K/V heads of D dims,
// scores scaled by `scale`, a query at t sees keys max(0, t - window + 1)..t (window 0 = all of 0..t).
struct AttentionShape {
    int64_t B = 1, T = 1, H = 1, K = 1, D = 1;
    double scale = 1.0;
    int64_t window = 0;
};
// q (B·T, H·D), k, v (B·T, K·D): out (B·T, H·D) =, weights (B, H, T, T) = softmax over the visible keys, 0 elsewhere.
template <typename S> void gqa_attention_forward(S* out, S* weights, const S* q, const S* k, const S* v,
                                                 const AttentionShape& a);
// dq (B·T, H·D) =; dk, dv (B·T, K·D) = the sum over the H/K query heads of each group, in head order.
template <typename S> void gqa_attention_backward(S* dq, S* dk, S* dv, const S* dout, const S* weights, const S* q,
                                                  const S* k, const S* v, const AttentionShape& a);

// x (N, C) = E[tokens]; dE (V, C) += rows of dx
template <typename S> void embed_forward(S* x, const int32_t* tokens, const S* E, int64_t N, int64_t C);
template <typename S> void embed_backward(S* dE, const S* dx, const int32_t* tokens, int64_t N, int64_t C);

}  // namespace kvscope
