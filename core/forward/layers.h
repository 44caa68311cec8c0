#pragma once
// The pieces of a transformer block both stacks use (model.cpp's decoder, encoder.cpp's encoder), so
// the encoder of an encoder-decoder model computes its sub-layers with the very code GPT-2 blocks use.
// T = rows, C = n_embd, F = n_inner. Buffers are the caller's; nothing allocates.
//
//   embed(cfg, w, token, position, out)     out (C) = wte[token] * embedding_scale + positions[position]
//                                           (rotary models have no position table: the scaled row alone)
//   normalize(cfg, y, x, g, b, T)           the family's norm per row: LayerNorm (GPT-2) or RMSNorm (Llama)
//   sublayer_input(cfg, x, xn, g, b, T)     what a sub-layer reads: pre-LN ln(x) written to xn, post-LN x
//   sublayer_output(cfg, x, y, g, b, T)     x += y, then post-LN normalises x in place
//   mlp_sublayer(cfg, lw, x, xn, hidden, proj, T)   the whole feed-forward sub-layer of block lw;
//                                           hidden holds (T, F), or (2, T, F) for a gated MLP
//   head_attention(out, weights, q, q_stride, k, v, kv_stride, keys, D, scale)   one query row over
//                                           rows of a plain (P, stride) K/V buffer at the given keys
#include <cstdint>

#include "kernels/attention.h"
#include "model/config.h"
#include "model/weights.h"
#include "text/tokenizer.h"

namespace kvscope {

void embed(const ModelConfig& cfg, const Weights& w, TokenId token, int64_t position, float* out);
void normalize(const ModelConfig& cfg, float* y, const float* x, const float* gain, const float* bias, int64_t T);
const float* sublayer_input(const ModelConfig& cfg, const float* x, float* xn, const float* gain, const float* bias,
                            int64_t T);
void sublayer_output(const ModelConfig& cfg, float* x, const float* y, const float* gain, const float* bias, int64_t T);
void mlp_sublayer(const ModelConfig& cfg, const LayerWeights& lw, float* x, float* xn, float* hidden, float* proj,
                  int64_t T);

// k and v point at row 0 of their buffers; key position p is row p.
inline void head_attention(float* out, float* weights, const float* q, const float* k, const float* v,
                           int64_t kv_stride, const KeyRange& keys, int64_t D, float scale) {
    attend_row(out, weights, q, [&](int64_t p) { return k + p * kv_stride; },
               [&](int64_t p) { return v + p * kv_stride; }, keys, D, scale);
}

}  // namespace kvscope
