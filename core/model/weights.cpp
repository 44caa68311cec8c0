#include "model/weights.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>

#include "base/errors.h"
#include "model/finite.h"

namespace kvscope {
namespace {

class NameMap {
public:
    NameMap(const ModelConfig& config, Weights& w, WeightFormat format, WeightPlacement placement)
        : config_(config), w_(w), format_(format), placement_(placement) {
        const Checkpoint& f = *w.checkpoint;
        // Hugging Face checkpoints saved from GPT2LMHeadModel prefix the body with "transformer.".
        prefix_ = (f.find("transformer.wte.weight") && !f.find("wte.weight")) ? "transformer." : "";
    }

    const float* get(const std::string& short_name, std::vector<int64_t> shape, bool required = true,
                     bool never_prefixed = false) {
        const TensorView* t = view(short_name, std::move(shape), never_prefixed, required);
        if (t) refuse_non_finite(*t, first_non_finite(t->data, t->dtype, t->n_elements()));
        return t ? as_float(*t) : nullptr;
    }

    // The tensor, checked (present, float dtype, shape), and counted as used; its values are not read.
    const TensorView* view(const std::string& short_name, std::vector<int64_t> shape, bool never_prefixed,
                           bool required = true) {
        const std::string name = (never_prefixed ? "" : prefix_) + short_name;
        const TensorView* t = w_.checkpoint->find(name);
        if (!t) {
            if (!required) return nullptr;
            throw LoadError(w_.checkpoint->path(), "tensor " + name + " is missing",
                            "expected shape " + shape_text(shape) + " for this config.json");
        }
        if (!is_float_dtype(t->dtype) && !block_format(t->dtype))
            throw LoadError(w_.checkpoint->file_of(*t), "tensor " + name + " has dtype " + to_string(t->dtype) +
                                                 ", which kvscope does not compute with",
                            "kvscope reads F32, F16 and BF16 weights; convert the checkpoint");
        if (t->shape != shape)
            throw LoadError(w_.checkpoint->file_of(*t),
                            "tensor " + name + " has shape " + shape_text(t->shape) + ", config says " +
                                shape_text(shape),
                            "is config.json from another model?");
        used_.insert(name);
        w_.tensors.push_back({name, t->dtype, t->shape});
        w_.n_parameters += t->n_elements();
        return t;
    }

    // A matrix in the storage `format_` asks for, in 2 MiB pages unless it can stay in the mapping.
    WeightRef matrix(const std::string& short_name, std::vector<int64_t> shape, bool never_prefixed = false) {
        const TensorView* t = view(short_name, shape, never_prefixed);
        const int64_t n = t->n_elements();
        const bool bf16 = format_ == WeightFormat::BF16;
        w_.matrix_elements += n;
        // A GGUF file's quantized matrix stays in the file's blocks, 4.5-8.5 bits a weight, which matmul_nk
        // reads as they are (matmul.h): copied unchanged into 2 MiB pages, as the float matrices are, or used in
        // the mapping under WeightPlacement::Mapped. Llama 3.2 1B Q4_K_M, 2 threads, AMD EPYC Zen 5 VM: decode
        // 43.0 -> 48.4 tokens/s from the pages (1 thread 33.2 -> 39.4). bfloat16 asks for a conversion.
        if (const std::optional<BlockFormat> f = block_format(t->dtype); f && !bf16) {
            refuse_non_finite(*t, first_non_finite(t->data, t->dtype, n));
            const BlockLayout layout = block_layout(*f);
            const int64_t bytes = n / layout.elements * layout.bytes;
            w_.matrix_bytes += bytes;
            ++w_.block_matrices[int(*f)];
            if (placement_ == WeightPlacement::Mapped) return BlockMatrix{*f, t->data};
            // Q4_0, Q8_0, Q4_K and Q6_K go in panels where the build has them (quant_blocks.h): decode reads one stream
            // a thread and batches skip packing (docs/benchmarks.md, the Xeon family 6 model 167); an embedding row
            // is unpacked to look it up.
            const bool panels = panel_rows(*f) > 0 && shape[0] % panel_rows(*f) == 0;
            std::byte* out = nullptr;
            if (w_.checkpoint->in_mapping(t->data, t->n_bytes)) {
                out = w_.matrices->allocate(bytes);
                copy_in_parallel(out, t->data, bytes);
                w_.checkpoint->release(t->data, t->n_bytes);  // or the process would hold the matrix twice
            } else {
                // Blocks kvscope made at load (a llama file's Q and K, rows put back in order) are in 2 MiB pages
                // already, and only these weights read them: they are packed where they are.
                out = const_cast<std::byte*>(t->data);
            }
            if (!panels) return BlockMatrix{*f, out};
            pack_panels(out, *f, shape[0], shape[1]);
            ++w_.panel_matrices;
            return BlockMatrix{*f, out, BlockOrder::Panels};
        }
        w_.matrix_bytes += n * (bf16 ? 2 : 4);
        const Dtype stored = bf16 ? Dtype::BF16 : Dtype::F32;
        const bool as_is = t->dtype == stored && reinterpret_cast<uintptr_t>(t->data) % (bf16 ? 2 : 4) == 0;
        if (as_is && placement_ == WeightPlacement::Mapped) {
            refuse_non_finite(*t, first_non_finite(t->data, t->dtype, n));
            if (bf16) return reinterpret_cast<const uint16_t*>(t->data);
            return reinterpret_cast<const float*>(t->data);
        }
        std::byte* out = w_.matrices->allocate(n * (bf16 ? 2 : 4));  // (n) in `stored`
        if (t->dtype == stored) {
            // The scan rides on the copy, each slice scanned while still in cache. SmolLM2-135M shape f32
            // (538 MB), 2-core AMD EPYC VM shared with other builds, warm page cache: Model::load median
            // 0.34 s without the scan, 0.39 s with it (~21 rounds each, interleaved); a separate pass over
            // the mapping alone takes 68 ms on one core (~8 GB/s), scanning the source before each slice
            // is copied measured the same.
            const int64_t width = bf16 ? 2 : 4;
            std::atomic<int64_t> first_bad{n};
            copy_in_parallel(out, t->data, n * width, [&](const std::byte* copied, int64_t offset, int64_t bytes) {
                const int64_t i = first_non_finite(copied, stored, bytes / width);
                if (i < 0) return;
                int64_t seen = first_bad.load();
                while (offset / width + i < seen && !first_bad.compare_exchange_weak(seen, offset / width + i)) {
                }
            });
            refuse_non_finite(*t, first_bad.load() < n ? first_bad.load() : -1);
        } else if (bf16) {
            refuse_non_finite(*t, first_non_finite(t->data, t->dtype, n));
            auto* to = reinterpret_cast<uint16_t*>(out);
            if (const std::optional<BlockFormat> f = block_format(t->dtype)) {  // dequantized a slice at a time
                const BlockLayout layout = block_layout(*f);
                std::vector<float> slice(size_t(std::min<int64_t>(n, 1 << 16)));  // whole blocks of every format
                for (int64_t i0 = 0; i0 < n; i0 += int64_t(slice.size())) {
                    const int64_t m = std::min<int64_t>(int64_t(slice.size()), n - i0);
                    dequantize_reference(*f, t->data + i0 / layout.elements * layout.bytes, m, slice.data());
                    for (int64_t i = 0; i < m; ++i) to[i0 + i] = f32_to_bf16(slice[size_t(i)]);  // round to nearest even
                }
            } else {
                for (int64_t i = 0; i < n; ++i) to[i] = f32_to_bf16(element(*t, i));
            }
            if (const int64_t i = first_non_finite(out, Dtype::BF16, n); i >= 0)
                throw LoadError(w_.checkpoint->file_of(*t),
                                "tensor " + t->name + " element " + std::to_string(i) + " (" + show_float(element(*t, i)) +
                                    ") overflows bfloat16",
                                "run with {dtype} f32");
        } else {
            refuse_non_finite(*t, first_non_finite(t->data, t->dtype, n));
            widen(*t, reinterpret_cast<float*>(out));
        }
        if (!as_is) w_.converted_bytes += n * (bf16 ? 2 : 4);
        w_.checkpoint->release(t->data, t->n_bytes);  // or the process would hold the matrix twice
        if (bf16) return reinterpret_cast<const uint16_t*>(out);
        return reinterpret_cast<const float*>(out);
    }

    void forbid(const std::string& short_name, const std::string& why, bool never_prefixed = false) {
        const std::string name = (never_prefixed ? "" : prefix_) + short_name;
        if (const TensorView* t = w_.checkpoint->find(name))
            throw LoadError(w_.checkpoint->file_of(*t), "tensor " + name + " is present but " + why,
                            "config.json and the weights disagree");
    }

private:
    // Every tensor the model uses is scanned once before it is used (exponent bits only, vectorised;
    // finite.h): one NaN or infinity would make every logit NaN, and greedy decoding print token 0 forever.
    // `i`: the first non-finite element, -1 = none.
    void refuse_non_finite(const TensorView& t, int64_t i) const {
        if (i < 0) return;
        const std::string& name = t.name;
        std::string at;
        for (int64_t rest = i, d = int64_t(t.shape.size()) - 1; d >= 0; --d) {
            at = std::to_string(rest % t.shape[size_t(d)]) + (at.empty() ? "" : ", ") + at;
            rest /= t.shape[size_t(d)];
        }
        throw LoadError(w_.checkpoint->file_of(t),
                        "tensor " + name + " holds " + show_float(element(t, i)) + " at [" + at + "]" +
                            (t.n_elements() > 1 ? " (element " + std::to_string(i) + ")" : ""),
                        "a weight must be a finite number; the checkpoint is damaged or was saved after training diverged");
    }

    static std::string show_float(float f) {
        if (std::isnan(f)) return "NaN";
        if (std::isinf(f)) return f > 0 ? "+inf" : "-inf";
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g", double(f));
        return buf;
    }

    const float* as_float(const TensorView& t) {
        if (t.dtype == Dtype::F32 && reinterpret_cast<uintptr_t>(t.data) % alignof(float) == 0)
            return reinterpret_cast<const float*>(t.data);
        std::vector<float>& out = w_.owned.emplace_back(size_t(t.n_elements()));  // (n) float32 copy
        widen(t, out.data());
        w_.converted_bytes += t.n_elements() * int64_t(sizeof(float));
        return out.data();
    }

    // Element i of a float tensor (F32, F16 or BF16; any alignment) or of blocks, exactly as float32.
    static float element(const TensorView& t, int64_t i) {
        const auto* bytes = reinterpret_cast<const unsigned char*>(t.data);
        if (const std::optional<BlockFormat> f = block_format(t.dtype)) {
            const BlockLayout layout = block_layout(*f);
            float block[256];  // (elements) the block holding element i
            dequantize_reference(*f, t.data + i / layout.elements * layout.bytes, layout.elements, block);
            return block[i % layout.elements];
        }
        if (t.dtype == Dtype::F32) {
            float f;
            std::memcpy(&f, bytes + 4 * i, 4);
            return f;
        }
        uint16_t h;
        std::memcpy(&h, bytes + 2 * i, 2);
        return t.dtype == Dtype::F16 ? f16_to_f32(h) : bf16_to_f32(h);
    }

    static void widen(const TensorView& t, float* out) {
        if (const std::optional<BlockFormat> f = block_format(t.dtype)) return dequantize_reference(*f, t.data, t.n_elements(), out);
        for (int64_t i = 0; i < t.n_elements(); ++i) out[i] = element(t, i);
    }

    const ModelConfig& config_;
    Weights& w_;
    WeightFormat format_;
    WeightPlacement placement_;
    std::string prefix_;
    std::set<std::string> used_;
};

}  // namespace

std::vector<float> sinusoidal_positions(int64_t n_ctx, int64_t C) {
    std::vector<float> pe(static_cast<size_t>(n_ctx * C));  // (n_ctx, C)
    for (int64_t t = 0; t < n_ctx; ++t)
        for (int64_t i = 0; 2 * i < C; ++i) {
            const double angle = double(t) / std::pow(10000.0, double(2 * i) / double(C));
            pe[size_t(t * C + 2 * i)] = float(std::sin(angle));
            if (2 * i + 1 < C) pe[size_t(t * C + 2 * i + 1)] = float(std::cos(angle));
        }
    return pe;
}

const char* to_string(WeightFormat f) { return f == WeightFormat::BF16 ? "bf16" : "f32"; }

int64_t Weights::blocks_total() const {
    int64_t n = 0;
    for (int64_t count : block_matrices) n += count;
    return n;
}

std::string Weights::blocks_text() const {
    std::string out;
    for (int f = 0; f < kBlockFormats; ++f)
        if (block_matrices[size_t(f)] > 0)
            out += (out.empty() ? "" : ", ") + std::to_string(block_matrices[size_t(f)]) + " " + block_layout(BlockFormat(f)).name;
    return out;
}

std::string Weights::panels_text() const {
    if (panel_matrices == 0) return "";
    std::string rows;  // "16 rows (Q4_K), 32 (Q8_0)": each packed format's panel
    for (int f = 0; f < kBlockFormats; ++f)
        if (const int64_t r = panel_rows(BlockFormat(f)); r > 0 && block_matrices[size_t(f)] > 0)
            rows += (rows.empty() ? std::to_string(r) + " rows (" : ", " + std::to_string(r) + " (") + block_layout(BlockFormat(f)).name + ")";
    return std::to_string(panel_matrices) + " of them in panels of " + rows;
}

void embedding_row(const Weights& w, int64_t C, int64_t id, float* out) {
    if (const BlockMatrix& b = w.token_embedding.blocks; b.data) {  // the row's blocks, as the reference reads them
        const BlockLayout layout = block_layout(b.format);
        const int64_t row_bytes = C / layout.elements * layout.bytes;
        if (b.order == BlockOrder::Panels) {
            thread_local std::vector<std::byte> row;
            if (int64_t(row.size()) < row_bytes) row.resize(size_t(row_bytes));
            panel_row_blocks(row.data(), b.format, b.data, C, id);
            dequantize_reference(b.format, row.data(), C, out);
        } else {
            dequantize_reference(b.format, b.data + id * row_bytes, C, out);
        }
        return;
    }
    if (w.token_embedding.f32) {
        std::memcpy(out, w.token_embedding.f32 + id * C, size_t(C) * sizeof(float));
        return;
    }
    for (int64_t i = 0; i < C; ++i) out[i] = bf16_to_f32(w.token_embedding.bf16[id * C + i]);
}

namespace {

// Hugging Face Llama names (LlamaForCausalLM): "model."-prefixed body, "lm_head" outside it.
void load_llama(const ModelConfig& config, NameMap& m, Weights& w) {
    const int64_t V = config.n_vocab, C = config.n_embd, F = config.n_inner, Q = config.q_width(),
                  KV = config.kv_width();
    constexpr bool kNoPrefix = true;
    auto bias = [&](const std::string& name, int64_t n, bool present, const char* key) -> const float* {
        if (present) return m.get(name, {n}, true, kNoPrefix);
        m.forbid(name, std::string("config.json says ") + key + " is false", kNoPrefix);
        return nullptr;
    };
    // An RMSNorm weight. Gemma3RMSNorm scales by (1 + weight), which float32 computes once here: the
    // norm then multiplies by the stored gain like every other family's.
    auto norm = [&](const std::string& name, int64_t n) -> const float* {
        const float* g = m.get(name, {n}, true, kNoPrefix);
        if (!config.norm_plus_one) return g;
        std::vector<float>& plus_one = w.owned.emplace_back(g, g + n);  // (n)
        for (float& x : plus_one) x = 1.0f + x;
        return plus_one.data();
    };
    w.token_embedding = m.matrix("model.embed_tokens.weight", {V, C}, kNoPrefix);
    for (int64_t il = 0; il < config.n_layer; ++il) {
        const std::string p = "model.layers." + std::to_string(il) + ".";
        const std::string a = p + "self_attn.", f = p + "mlp.";
        LayerWeights lw;
        lw.ln_1_weight = norm(p + "input_layernorm.weight", C);
        lw.q_weight = m.matrix(a + "q_proj.weight", {Q, C}, kNoPrefix);
        lw.q_bias = bias(a + "q_proj.bias", Q, config.attention_bias, "attention_bias");
        lw.k_weight = m.matrix(a + "k_proj.weight", {KV, C}, kNoPrefix);
        lw.k_bias = bias(a + "k_proj.bias", KV, config.attention_bias, "attention_bias");
        lw.v_weight = m.matrix(a + "v_proj.weight", {KV, C}, kNoPrefix);
        lw.v_bias = bias(a + "v_proj.bias", KV, config.attention_bias, "attention_bias");
        if (config.qk_norm) {
            lw.q_norm_weight = norm(a + "q_norm.weight", config.head_dim());
            lw.k_norm_weight = norm(a + "k_norm.weight", config.head_dim());
        }
        lw.attn_proj_weight = m.matrix(a + "o_proj.weight", {C, Q}, kNoPrefix);
        lw.attn_proj_bias = bias(a + "o_proj.bias", C, config.o_bias, "attention_bias");
        if (config.sandwich_norm) {  // Gemma3DecoderLayer
            lw.attn_out_norm_weight = norm(p + "post_attention_layernorm.weight", C);
            lw.ln_2_weight = norm(p + "pre_feedforward_layernorm.weight", C);
            lw.mlp_out_norm_weight = norm(p + "post_feedforward_layernorm.weight", C);
        } else {
            lw.ln_2_weight = norm(p + "post_attention_layernorm.weight", C);
        }
        lw.gate_weight = m.matrix(f + "gate_proj.weight", {F, C}, kNoPrefix);
        lw.gate_bias = bias(f + "gate_proj.bias", F, config.mlp_bias, "mlp_bias");
        lw.fc_weight = m.matrix(f + "up_proj.weight", {F, C}, kNoPrefix);
        lw.fc_bias = bias(f + "up_proj.bias", F, config.mlp_bias, "mlp_bias");
        lw.fc_proj_weight = m.matrix(f + "down_proj.weight", {C, F}, kNoPrefix);
        lw.fc_proj_bias = bias(f + "down_proj.bias", C, config.mlp_bias, "mlp_bias");
        w.layers.push_back(lw);
    }
    w.ln_f_weight = norm("model.norm.weight", C);
    if (config.tie_word_embeddings) {
        w.lm_head_weight = w.token_embedding;
    } else {
        w.lm_head_weight = m.matrix("lm_head.weight", {V, C}, kNoPrefix);
    }
}

}  // namespace

Weights load_weights(const ModelConfig& config, const std::string& safetensors_path, WeightFormat format,
                     WeightPlacement placement) {
    return load_weights(config, Checkpoint::open_file(safetensors_path), format, placement);
}

Weights load_weights(const ModelConfig& config, std::shared_ptr<const Checkpoint> checkpoint, WeightFormat format,
                     WeightPlacement placement) {
    Weights w;
    w.bf16 = format == WeightFormat::BF16;
    w.mapped = placement == WeightPlacement::Mapped;
    w.checkpoint = std::move(checkpoint);
    w.file_bytes = int64_t(w.checkpoint->n_bytes());
    w.matrices = std::make_shared<HugePageArena>();
    // Converted vectors live in `owned`; reserve so pointers into it stay valid.
    w.owned.reserve(w.checkpoint->tensors().size() + 1);
    NameMap m(config, w, format, placement);
    if (config.family == Family::Llama) {
        load_llama(config, m, w);
        return w;
    }
    const int64_t V = config.n_vocab, C = config.n_embd, F = config.n_inner, P = config.n_ctx;

    w.token_embedding = m.matrix("wte.weight", {V, C});
    if (config.position_embedding == PositionEmbedding::Learned) {
        w.position_embedding = m.get("wpe.weight", {P, C});
    } else {
        m.forbid("wpe.weight", "config.json says position_embedding is sinusoidal");
        w.owned.push_back(sinusoidal_positions(P, C));
        w.position_embedding = w.owned.back().data();
    }
    // A GPT-2 block: self-attention and MLP with their norms, under prefix h ("h.3." or "encoder.h.1.").
    auto block = [&](const std::string& h) {
        LayerWeights lw;
        lw.ln_1_weight = m.get(h + "ln_1.weight", {C});
        lw.ln_1_bias = m.get(h + "ln_1.bias", {C});
        lw.attn_weight = m.matrix(h + "attn.c_attn.weight", {C, 3 * C});
        if (config.qkv_bias) lw.attn_bias = m.get(h + "attn.c_attn.bias", {3 * C});
        else m.forbid(h + "attn.c_attn.bias", "config.json says qkv_bias is false");
        lw.attn_proj_weight = m.matrix(h + "attn.c_proj.weight", {C, C});
        lw.attn_proj_bias = m.get(h + "attn.c_proj.bias", {C});
        lw.ln_2_weight = m.get(h + "ln_2.weight", {C});
        lw.ln_2_bias = m.get(h + "ln_2.bias", {C});
        lw.fc_weight = m.matrix(h + "mlp.c_fc.weight", {C, F});
        lw.fc_bias = m.get(h + "mlp.c_fc.bias", {F});
        lw.fc_proj_weight = m.matrix(h + "mlp.c_proj.weight", {F, C});
        lw.fc_proj_bias = m.get(h + "mlp.c_proj.bias", {C});
        return lw;
    };
    for (int64_t il = 0; il < config.n_encoder_layer; ++il)
        w.encoder_layers.push_back(block("encoder.h." + std::to_string(il) + "."));
    for (int64_t il = 0; il < config.n_layer; ++il) {
        const std::string h = "h." + std::to_string(il) + ".";
        LayerWeights lw = block(h);
        if (config.encoder_decoder) {
            lw.ln_cross_weight = m.get(h + "ln_cross_attn.weight", {C});
            lw.ln_cross_bias = m.get(h + "ln_cross_attn.bias", {C});
            lw.cross_q_weight = m.matrix(h + "crossattention.q_attn.weight", {C, C});
            lw.cross_kv_weight = m.matrix(h + "crossattention.c_attn.weight", {C, 2 * C});
            if (config.qkv_bias) {
                lw.cross_q_bias = m.get(h + "crossattention.q_attn.bias", {C});
                lw.cross_kv_bias = m.get(h + "crossattention.c_attn.bias", {2 * C});
            } else {
                m.forbid(h + "crossattention.q_attn.bias", "config.json says qkv_bias is false");
                m.forbid(h + "crossattention.c_attn.bias", "config.json says qkv_bias is false");
            }
            lw.cross_proj_weight = m.matrix(h + "crossattention.c_proj.weight", {C, C});
            lw.cross_proj_bias = m.get(h + "crossattention.c_proj.bias", {C});
        }
        w.layers.push_back(lw);
    }
    if (config.encoder_decoder && config.final_layer_norm) {
        w.encoder_ln_f_weight = m.get("encoder.ln_f.weight", {C});
        w.encoder_ln_f_bias = m.get("encoder.ln_f.bias", {C});
    }
    if (config.final_layer_norm) {
        w.ln_f_weight = m.get("ln_f.weight", {C});
        w.ln_f_bias = m.get("ln_f.bias", {C});
    } else {
        m.forbid("ln_f.weight", "config.json says final_layer_norm is false");
    }
    if (config.tie_word_embeddings) {
        w.lm_head_weight = w.token_embedding;
    } else {
        w.lm_head_weight = m.matrix("lm_head.weight", {V, C}, /*never_prefixed=*/true);
    }
    if (config.lm_head_bias) w.lm_head_bias = m.get("lm_head.bias", {V}, true, true);
    else m.forbid("lm_head.bias", "config.json says lm_head_bias is false", true);
    return w;
}

}  // namespace kvscope
