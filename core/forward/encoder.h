#pragma once
// The encoder of an encoder-decoder model ("model_type": "encoder_decoder", assets/README.md), and the
// cross-attention cache it leaves: run once per source, then fixed while the decoder steps.
//
// S = source tokens, E = encoder layers, L = decoder layers, H = heads, D = head dim, C = H * D.
//
//   encode(model, source, record)   embed the source (positions 0..S-1), every encoder layer with
//                                   self-attention over all S positions (no mask), then for each
//                                   decoder layer K|V = enc · crossattention.c_attn + bias
//   EncoderOutput::cross_key / cross_value(il, h, s)   (D) row of source position s
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "text/tokenizer.h"

namespace kvscope {

class Model;

struct EncoderOutput {
    std::vector<TokenId> source;            // (S)
    int64_t n_layer = 0, n_head = 0, head_dim = 0, n_encoder_layer = 0;
    std::vector<float> cross_k, cross_v;    // (L, H, S, D) each: the cross-attention cache
    std::vector<float> q, k, v;             // (E, S, C) each, the encoder's own rows; empty unless recorded
    double flops = 0;

    int64_t n_source() const { return int64_t(source.size()); }
    const float* cross_key(int64_t il, int64_t h, int64_t s) const { return cross_k.data() + offset(il, h, s); }
    const float* cross_value(int64_t il, int64_t h, int64_t s) const { return cross_v.data() + offset(il, h, s); }
    int64_t cross_bytes() const { return int64_t((cross_k.size() + cross_v.size()) * sizeof(float)); }

private:
    size_t offset(int64_t il, int64_t h, int64_t s) const {
        return size_t(((il * n_head + h) * n_source() + s) * head_dim);
    }
};

// Throws UsageError for an empty source, one longer than n_positions, or ids outside the vocabulary.
std::shared_ptr<const EncoderOutput> encode(const Model& model, std::span<const TokenId> source, bool record);

}  // namespace kvscope
