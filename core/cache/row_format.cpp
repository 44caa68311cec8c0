#include "cache/row_format.h"

#include <algorithm>

#include "model/safetensors.h"

namespace kvscope {

RowFormat::RowFormat(int64_t head_dim, bool bf16, KvQuantSpec quant)
    : head_dim_(head_dim), bf16_(bf16 && !quant.quantized()), quant_(quant) {
    validate(quant, head_dim);
    if (quant.format == KvQuant::Int4) row_bytes_ = int4_value_row_bytes(head_dim, quant.group);
    else if (quant.quantized()) row_bytes_ = kvscope::row_bytes(quant.format, head_dim);
    else row_bytes_ = head_dim * (bf16_ ? 2 : 4);
}

void RowFormat::encode(const float* x, unsigned char* out) const {
    if (int4()) quantize_int4_values(x, head_dim_, quant_.group, out);
    else if (quantized()) quantize_row(quant_.format, x, head_dim_, out);
    else if (bf16_) {
        for (int64_t d = 0; d < head_dim_; ++d) {
            const uint16_t b = f32_to_bf16(x[d]);
            std::memcpy(out + 2 * d, &b, sizeof b);
        }
    } else std::memcpy(out, x, size_t(head_dim_) * sizeof(float));
}

void RowFormat::decode(const unsigned char* in, float* out) const {
    if (int4()) dequantize_int4_values(in, head_dim_, quant_.group, out);
    else if (quantized()) dequantize_row(quant_.format, in, head_dim_, out);
    else if (bf16_) {
        for (int64_t d = 0; d < head_dim_; ++d) {
            uint16_t b;
            std::memcpy(&b, in + 2 * d, sizeof b);
            const uint32_t bits = uint32_t(b) << 16;
            std::memcpy(out + d, &bits, sizeof(float));
        }
    } else std::memcpy(out, in, size_t(head_dim_) * sizeof(float));
}

Int4Rows::Int4Rows(int64_t n_layer, int64_t n_head, int64_t head_dim, int64_t capacity, KvQuantSpec spec)
    : n_layer_(n_layer), n_head_(n_head), head_dim_(head_dim), spec_(spec),
      n_groups_((capacity + spec.group - 1) / spec.group), group_bytes_(int4_key_group_bytes(head_dim, spec.group)) {
    kq_.resize(size_t(n_layer * n_head * n_groups_ * group_bytes_));
    ensure(spec.residual + spec.group, 0);  // what decoding needs; a longer chunk grows it
}

void Int4Rows::ensure(int64_t slots, int64_t next_position) {
    if (slots <= residual_slots_) return;
    std::vector<float> k(size_t(n_layer_ * n_head_ * slots * head_dim_)), v(k.size());  // (L, H, Rb', D)
    for (int64_t il = 0; il < n_layer_; ++il)
        for (int64_t h = 0; h < n_head_; ++h)
            for (int64_t p = n_quantized_; p < next_position; ++p) {
                const size_t to = size_t(((il * n_head_ + h) * slots + p % slots) * head_dim_);
                std::copy_n(residual(0, il, h, p), head_dim_, k.begin() + to);
                std::copy_n(residual(1, il, h, p), head_dim_, v.begin() + to);
            }
    kr_ = std::move(k), vr_ = std::move(v), residual_slots_ = slots;
}

void Int4Rows::copy_key(int64_t il, int64_t h, int64_t position, float* out) const {
    if (position >= n_quantized_) std::memcpy(out, residual(0, il, h, position), size_t(head_dim_) * sizeof(float));
    else dequantize_int4_key_row(key_group(il, h, position / spec_.group), spec_.group, head_dim_, position % spec_.group, out);
}

void Int4Rows::save(int64_t next_position, int64_t n_new, Int4Checkpoint& c) const {
    c.residual_from = n_quantized_;
    const int64_t to = std::min(int4_residual_boundary(next_position + n_new, spec_), next_position);
    for (int64_t p = n_quantized_; p < to; ++p)
        for (int64_t il = 0; il < n_layer_; ++il)
            for (int kv = 0; kv < 2; ++kv)
                for (int64_t h = 0; h < n_head_; ++h) {
                    const float* row = residual(kv, il, h, p);
                    c.rows.insert(c.rows.end(), row, row + head_dim_);
                }
}

void Int4Rows::restore(int64_t next_position, const Int4Checkpoint& c) {
    // Positions the chunk packed are float32 again; the packed copies above the boundary go stale.
    const float* row = c.rows.data();
    const int64_t n = int64_t(c.rows.size()) / (n_layer_ * 2 * n_head_ * head_dim_);
    for (int64_t p = c.residual_from; p < c.residual_from + n; ++p)
        for (int64_t il = 0; il < n_layer_; ++il)
            for (int kv = 0; kv < 2; ++kv)
                for (int64_t h = 0; h < n_head_; ++h, row += head_dim_)
                    std::memcpy(residual(kv, il, h, p), row, size_t(head_dim_) * sizeof(float));
    n_quantized_ = int4_residual_boundary(next_position, spec_);
}

void Int4Rows::grow(int64_t capacity) {
    const int64_t groups = (capacity + spec_.group - 1) / spec_.group;
    if (groups <= n_groups_) return;
    std::vector<uint8_t> kq(size_t(n_layer_ * n_head_ * groups * group_bytes_));
    for (int64_t lh = 0; lh < n_layer_ * n_head_; ++lh)
        std::copy_n(kq_.begin() + lh * n_groups_ * group_bytes_, n_groups_ * group_bytes_, kq.begin() + lh * groups * group_bytes_);
    kq_ = std::move(kq), n_groups_ = groups;
}

int64_t Int4Rows::bytes_used(int64_t next_position, int64_t row_bytes) const {
    // packed below the boundary, float32 rows above it
    return 2 * n_layer_ * n_head_ * (n_quantized_ * row_bytes + (next_position - n_quantized_) * head_dim_ * 4);
}

int64_t Int4Rows::bytes_capacity(int64_t capacity, int64_t row_bytes) const {
    return 2 * n_layer_ * n_head_ * (capacity * row_bytes + residual_slots_ * head_dim_ * 4);
}

}  // namespace kvscope
