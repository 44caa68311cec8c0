#include "forward/model.h"

#include <array>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "base/errors.h"
#include "base/thread_pool.h"
#include "forward/layers.h"
#include "model/gguf.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "model/finite.h"
#include "model/rotary.h"

namespace kvscope {

std::shared_ptr<const Model> Model::load(const std::string& dir, WeightFormat format, WeightPlacement placement) {
    namespace fs = std::filesystem;
    std::error_code ec;
    const bool gguf = fs::is_regular_file(dir, ec) && looks_like_gguf(dir);
    if (!gguf && !fs::is_directory(dir, ec))
        throw LoadError(dir, fs::exists(dir, ec) ? "is neither a folder nor a GGUF file" : "no such folder",
                        "{model} wants a folder with config.json and model.safetensors, or a .gguf file");
    auto model = std::make_shared<Model>();
    model->dir_ = dir;
    if (gguf) {
        GgufModel file = open_gguf_model(dir);
        model->config_ = std::move(file.config);
        model->weights_ = load_weights(model->config_, std::move(file.checkpoint), format, placement);
        model->gguf_tensors_ = std::move(file.tensors);
        if (file.tokenizer) {
            model->tokenizer_ = std::make_unique<Tokenizer>(gguf_tokenizer(*file.tokenizer, dir));
            model->gguf_tokenizer_config_ = file.tokenizer->tokenizer_config_json;
        }
    } else {
        model->config_ = load_config((fs::path(dir) / "config.json").string());
        model->weights_ = load_weights(model->config_, Checkpoint::open_folder(dir), format, placement);
    }
    ModelConfig& cfg = model->config_;
    if (cfg.family == Family::Llama)
        model->rotary_inv_freq_ = kvscope::rotary_inv_freq(cfg.rope, cfg.head_dim());
    if (cfg.local_rope) {  // Gemma3TextModel.rotary_emb_local: rope_local_base_freq, rope_type "default"
        RopeSpec local;
        local.theta = cfg.local_rope_theta;
        model->local_rotary_inv_freq_ = kvscope::rotary_inv_freq(local, cfg.head_dim());
    }
    // Gemma3TextScaledWordEmbedding multiplies by embed_scale cast to the embedding's dtype: a BF16 file's
    // sqrt(640) = 25.2982 becomes 25.25.
    if (cfg.family == Family::Llama && cfg.embedding_scale != 1.0)
        for (const TensorInfo& t : model->weights_.tensors)
            if (t.name == "model.embed_tokens.weight") {
                const float scale = float(cfg.embedding_scale);
                if (t.dtype == Dtype::BF16) cfg.embedding_scale = bf16_to_f32(f32_to_bf16(scale));
                if (t.dtype == Dtype::F16) cfg.embedding_scale = f16_to_f32(f32_to_f16(scale));
            }
    if (!gguf && has_tokenizer_files(dir)) {
        model->tokenizer_ = std::make_unique<Tokenizer>(Tokenizer::load(dir));
        if (model->tokenizer_->n_vocab() > model->config_.n_vocab)
            throw LoadError(dir + (fs::exists(fs::path(dir) / "tokenizer.json", ec) ? "/tokenizer.json" : "/vocab.json"),
                            "has " + std::to_string(model->tokenizer_->n_vocab()) + " tokens, config.json's vocab_size is " +
                                std::to_string(model->config_.n_vocab),
                            "tokenizer and model come from different checkpoints?");
    }
    if (gguf && model->tokenizer_ && model->tokenizer_->n_vocab() > model->config_.n_vocab)
        throw LoadError(dir, "its tokenizer has " + std::to_string(model->tokenizer_->n_vocab()) +
                                 " tokens, token_embd.weight has " + std::to_string(model->config_.n_vocab) + " rows");
    return model;
}

void Model::check_token(TokenId id) const {
    if (id < 0 || id >= config_.n_vocab)
        throw UsageError("token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                         std::to_string(config_.n_vocab) + ")");
}

KvCache Model::make_cache(int64_t capacity, int64_t window, int64_t sinks, KvQuantSpec quant, int64_t chunk) const {
    validate(quant, config_.head_dim());
    // Sliding layers store only their window plus the chunk being written (kv_cache.h).
    return KvCache(config_.n_layer, config_.kv_heads(), config_.head_dim(), capacity, window, sinks, weights_.bf16, quant,
                   SlidingLayers{config_.has_sliding_layers() ? config_.layer_window : std::vector<int64_t>{}, chunk});
}

Workspace::Workspace(const ModelConfig& c, int64_t max_rows, int64_t max_chunks, int64_t max_keys)
    : max_rows_(max_rows), max_chunks_(max_chunks), max_keys_(max_keys),
      x(size_t(max_rows * c.n_embd)), xn(size_t(max_rows * c.n_embd)),
      qkv(size_t(max_rows * (c.q_width() + 2 * c.kv_width()))),
      rotary(c.family == Family::Llama ? size_t(max_rows * c.head_dim() * (c.local_rope ? 2 : 1)) : 0),
      attn(size_t(max_rows * c.q_width())),
      proj(size_t(max_rows * c.n_embd)), hidden(size_t(max_rows * c.n_inner * (c.family == Family::Llama ? 2 : 1))),
      scratch(size_t(max_chunks * c.n_head * max_keys)),
      last(size_t(max_chunks * c.n_embd)), logits(max_chunks > 1 ? size_t(max_chunks * c.n_vocab) : 0) {}


namespace {

// What every step of one forward call shares: the chunks, their rows stacked, the workspace's buffers.
// Rows of all chunks are stacked: chunk c owns rows [row0[c], row0[c] + T_c).
struct Pass {
    const Model& model;
    const ModelConfig& cfg;
    const Weights& w;
    std::span<Chunk> chunks;
    int64_t C, H, D, F, V, K, Q, KV;  // GPT-2: K = H, Q = KV = C
    bool llama;
    float scale;
    int64_t max_keys;
    int64_t T = 0;
    std::array<int64_t, 64> row0{};
    float *x = nullptr, *xn = nullptr, *qkv = nullptr, *attn = nullptr, *proj = nullptr, *hidden = nullptr;
    float *rotary = nullptr, *local_rotary = nullptr, *scratch = nullptr, *last = nullptr, *logits = nullptr;
    // Where row r's q, k and v live: GPT-2's fused c_attn writes rows q|k|v (T, 3C); Llama's separate
    // projections write q (T, Q), then k (T, KV), then v (T, KV).
    int64_t q_stride = 0, kv_stride = 0;
    float *q_rows = nullptr, *k_rows = nullptr, *v_rows = nullptr;

    Pass(const Model& m, std::span<Chunk> c, int64_t max_keys_)
        : model(m), cfg(m.config()), w(m.weights()), chunks(c), C(cfg.n_embd), H(cfg.n_head), D(cfg.head_dim()),
          F(cfg.n_inner), V(cfg.n_vocab), K(cfg.kv_heads()), Q(cfg.q_width()), KV(cfg.kv_width()),
          llama(cfg.family == Family::Llama), scale(cfg.attention_scale()), max_keys(max_keys_) {}
    float* q_row(int64_t r) const { return q_rows + r * q_stride; }
    float* k_row(int64_t r) const { return k_rows + r * kv_stride; }
    float* v_row(int64_t r) const { return v_rows + r * kv_stride; }
    void record_residual(int64_t slot) const {  // x (T, C) into each recording chunk's residual[slot]
        for (size_t c = 0; c < chunks.size(); ++c)
            if (const Chunk& ch = chunks[c]; ch.probe)
                std::memcpy(ch.probe->residual.data() + slot * ch.n_tokens * C, x + row0[c] * C,
                            size_t(ch.n_tokens * C) * sizeof(float));
    }
};

// Step 1: every chunk checked before anything is written (caches, positions, tokens, buffer sizes);
// rows stacked, probes sized.
void check_chunks(Pass& p, const Workspace& ws) {
    const ModelConfig& cfg = p.cfg;
    std::span<Chunk> chunks = p.chunks;
    if (int64_t(chunks.size()) > ws.max_chunks() || chunks.size() > p.row0.size())
        throw UsageError("forward: " + std::to_string(chunks.size()) + " sequences, workspace holds " +
                         std::to_string(ws.max_chunks()));
    for (size_t c = 0; c < chunks.size(); ++c) {
        Chunk& ch = chunks[c];
        if (ch.n_tokens <= 0) throw UsageError("forward: empty chunk");
        require_fits(*ch.cache, ch.n_tokens);
        if (const BlockPool* pool = ch.cache->pages().pool()) {  // chunks whose caches share a pool draw on it together
            int64_t needed = 0;
            for (const Chunk& other : chunks)
                if (other.cache->pages().pool() == pool)
                    needed += other.cache->pages().blocks_needed(other.cache->next_position(), other.n_tokens);
            if (needed > pool->n_free())
                throw UsageError("this step needs " + std::to_string(needed) + " free KV blocks, the pool has " +
                                 std::to_string(pool->n_free()) + " of " + std::to_string(pool->n_blocks()));
        }
        if (ch.cache->next_position() + ch.n_tokens > cfg.n_ctx)
            throw UsageError("positions up to " + std::to_string(ch.cache->next_position() + ch.n_tokens - 1) +
                             " exceed the model's " + cfg.positions_key() + " (" +
                             std::to_string(cfg.n_ctx) + ")");
        for (int64_t r = 0; r < ch.n_tokens; ++r) p.model.check_token(ch.tokens[r]);
        if (ch.cache->capacity() > ws.max_keys())
            throw UsageError("forward: cache of " + std::to_string(ch.cache->capacity()) +
                             " slots is larger than the workspace's key buffer");
        p.row0[c] = p.T;
        p.T += ch.n_tokens;
        ch.flops = 0;
        if (cfg.encoder_decoder) {
            if (!ch.encoder) throw UsageError("an encoder-decoder model needs the encoder's output for every chunk");
            if (ch.encoder->n_source() > ws.max_keys())
                throw UsageError("forward: a source of " + std::to_string(ch.encoder->n_source()) +
                                 " tokens is longer than the workspace's key buffer");
        }
        if (ch.probe) {
            for (auto* buf : {&ch.probe->q, &ch.probe->k, &ch.probe->v})
                buf->assign(size_t(cfg.n_layer * ch.n_tokens * p.Q), 0.0f);
            if (cfg.encoder_decoder) ch.probe->cross_q.assign(size_t(cfg.n_layer * ch.n_tokens * p.C), 0.0f);
            else ch.probe->cross_q.clear();
            ch.probe->residual.assign(size_t((cfg.n_layer + 1) * ch.n_tokens * p.C), 0.0f);
        }
    }
    if (p.T > ws.max_rows())
        throw UsageError("forward: " + std::to_string(p.T) + " rows, workspace holds " + std::to_string(ws.max_rows()));
}

// Step 2: embeddings, x = wte[token] * embedding_scale + pos[position]   (T, C); rotary models: cos and sin
// of every row's position, shared by all layers and heads (T, 2, D/2), sliding layers with their own
// frequencies (Gemma 3) a second table (T, 2, D/2).
void embed_rows(Pass& p) {
    const int64_t C = p.C, D = p.D;
    for (size_t c = 0; c < p.chunks.size(); ++c) {
        const Chunk& ch = p.chunks[c];
        for (int64_t r = 0; r < ch.n_tokens; ++r)
            embed(p.cfg, p.w, ch.tokens[r], ch.cache->next_position() + r, p.x + (p.row0[c] + r) * C);
    }
    if (!p.llama) return;
    for (size_t c = 0; c < p.chunks.size(); ++c)
        for (int64_t r = 0; r < p.chunks[c].n_tokens; ++r) {
            const int64_t row = p.row0[c] + r, pos = p.chunks[c].cache->next_position() + r;
            rotary_angles(p.rotary + row * D, p.rotary + row * D + D / 2, p.model.rotary_inv_freq().data(), pos, D / 2);
            if (p.cfg.local_rope)
                rotary_angles(p.local_rotary + row * D, p.local_rotary + row * D + D / 2,
                              p.model.local_rotary_inv_freq().data(), pos, D / 2);
        }
}

// Step 3a: q, k, v of every row (Llama: separate projections, optional q/k norm, rotation).
void project_qkv(Pass& p, const LayerWeights& lw, const float* attn_in, const float* layer_rotary) {
    const int64_t T = p.T, C = p.C, H = p.H, D = p.D, K = p.K, Q = p.Q, KV = p.KV;
    if (!p.llama) {
        matmul_kn(p.qkv, attn_in, lw.attn_weight, lw.attn_bias, T, C, 3 * C);  // (T, 3C)
        return;
    }
    const MatmulTarget qkv[] = {{p.q_rows, lw.q_weight, lw.q_bias, Q},     // (T, Q)
                                {p.k_rows, lw.k_weight, lw.k_bias, KV},    // (T, KV)
                                {p.v_rows, lw.v_weight, lw.v_bias, KV}};   // (T, KV)
    matmul_nk_shared(attn_in, T, C, qkv);
    if (p.cfg.qk_norm) {  // Qwen3Attention: q_norm / k_norm over each head's D values, before rotation
        rms_norm(p.q_rows, p.q_rows, lw.q_norm_weight, T * H, D, float(p.cfg.layer_norm_epsilon));  // (T*H, D)
        rms_norm(p.k_rows, p.k_rows, lw.k_norm_weight, T * K, D, float(p.cfg.layer_norm_epsilon));  // (T*K, D)
    }
    // Rotate q and k at their positions; the cache then holds rotated keys, as the models' caches do.
    for (int64_t r = 0; r < T; ++r) {
        const float* cs = layer_rotary + r * D;
        for (int64_t h = 0; h < H; ++h) apply_rotary(p.q_row(r) + h * D, cs, cs + D / 2, D);
        for (int64_t h = 0; h < K; ++h) apply_rotary(p.k_row(r) + h * D, cs, cs + D / 2, D);
    }
}

// Step 3b: this chunk's keys and values into the cache before attending: a query sees its own position.
void store_keys(Pass& p, int64_t il) {
    const int64_t H = p.H, D = p.D, K = p.K, Q = p.Q;
    for (size_t c = 0; c < p.chunks.size(); ++c) {
        Chunk& ch = p.chunks[c];
        for (int64_t r = 0; r < ch.n_tokens; ++r) {
            const int64_t row = p.row0[c] + r;
            const int64_t pos = ch.cache->next_position() + r;
            for (int64_t h = 0; h < K; ++h) ch.cache->write(il, h, pos, p.k_row(row) + h * D, p.v_row(row) + h * D);
            if (ch.queries) std::memcpy(ch.queries + (il * ch.n_tokens + r) * Q, p.q_row(row), size_t(Q) * sizeof(float));
            if (ch.probe) {  // k and v as the cache holds them (rounded, for a bfloat16 cache), per query head
                const size_t at = size_t((il * ch.n_tokens + r) * Q);
                std::memcpy(ch.probe->q.data() + at, p.q_row(row), size_t(Q) * sizeof(float));
                for (int64_t h = 0; h < H; ++h) {
                    const KvRows rows = ch.cache->rows(il, p.cfg.kv_head_of(h));
                    rows.copy_key(pos, ch.probe->k.data() + at + size_t(h * D));
                    rows.copy_value(pos, ch.probe->v.data() + at + size_t(h * D));
                }
            }
        }
    }
}

// Step 3c: each query row attends to its visible keys in the cache, a K/V head's query heads together
// (attend_group: each key and value row loaded once for them). A prefill runs one task per (chunk, K/V head, every
// P-th block of 8 consecutive rows), a block's rows together where each sees at least 16 of the same keys
// (attend_rows: each key and value row loaded once for the rows' query heads; SmolLM2 shape, 2 threads, AMD EPYC
// Zen 5 VM, blocks of 4 against single rows: a 2048-token prefill 1.03x, 512 tokens 1.01x; with about 8 tasks per
// thread rather than 4, 1.04x and 1.01x more; blocks of 8 rather than 4, 1.02x and 1.006x). Decode steps (fewer
// than 16 rows per chunk) run one task per (chunk, K/V head), or per slice of its query heads when there are fewer
// K/V heads than threads (a single-K/V-head model). Loading K and V once per K/V head rather than once per query
// head, even on 3 tasks for 2 threads: SmolLM2 shape, 2 threads, Zen 4 VM, decode at position 2000 1.13x (0.96-1.27
// in 5 interleaved rounds; two slices of 1 and 2 heads: 1.09x), at 500 1.03x, at 5 1.02x. Every head gets
// attend_row's numbers either way.
constexpr int64_t kAttendBlockRows = 8, kAttendBlockMinKeys = 16;

void self_attention(Pass& p, int64_t il, int64_t layer_window, const float* layer_inv_freq) {
    const int64_t H = p.H, D = p.D, K = p.K, Q = p.Q;
    std::span<Chunk> chunks = p.chunks;
    const int64_t G = H / K;
    int64_t max_rows = 0;
    for (const Chunk& ch : chunks) max_rows = std::max(max_rows, ch.n_tokens);
    const int64_t n_threads = ThreadPool::global().n_threads(), n_chunks = int64_t(chunks.size());
    const bool prefill_grouped = G > 1 && max_rows >= 16;
    const int64_t slices = prefill_grouped ? 1 : std::clamp((n_threads + n_chunks * K - 1) / (n_chunks * K), int64_t(1), G);
    const int64_t units = n_chunks * K * slices;
    const int64_t block_rows = prefill_grouped ? kAttendBlockRows : 1;
    const int64_t parts = prefill_grouped ? std::min((max_rows + block_rows - 1) / block_rows, (8 * n_threads + units - 1) / units) : 1;
    ThreadPool::global().parallel_for(units * parts, [&](int64_t task) {
        const int64_t unit = task / parts, part = task % parts;
        const int64_t c = unit / (K * slices), kv = unit / slices % K, slice = unit % slices;
        const int64_t first_head = kv * G + G * slice / slices, heads = kv * G + G * (slice + 1) / slices - first_head;
        const Chunk& ch = chunks[size_t(c)];
        const KvCache& cache = *ch.cache;
        const KvRows kv_rows = cache.rows(il, kv);
        // (heads, max_keys): a decode task's heads' own rows of the scratch; a prefill's (block_rows, G, max_keys)
        // grows once per thread
        thread_local std::vector<float> group_weights;
        float* weights = p.scratch + (c * H + first_head) * p.max_keys;
        if (prefill_grouped) {
            if (int64_t(group_weights.size()) < block_rows * G * p.max_keys) group_weights.resize(size_t(block_rows * G * p.max_keys));
            weights = group_weights.data();
        }
        thread_local std::vector<float> sink_q;  // (G, D) queries turned back for sinks numbered in the cache
        const int64_t n_blocks = (ch.n_tokens + block_rows - 1) / block_rows;
        auto keys_of = [&](int64_t r) {
            const int64_t pos = cache.next_position() + r;
            return within_window(cache.visibility().visible_keys(pos), pos, layer_window);
        };
        auto attend_one = [&](int64_t r, auto key_at, auto value_at) {
            const KeyRange keys = keys_of(r);
            const float* q = p.q_row(p.row0[c] + r) + first_head * D;
            const float* turned = nullptr;
            if (keys.sink_shift > 0 && keys.n_sink > 0) {
                sink_q.resize(size_t(heads * D));
                turn_back(sink_q.data(), q, heads, D, layer_inv_freq, keys.sink_shift);
                turned = sink_q.data();
            }
            float* out = p.attn + (p.row0[c] + r) * Q + first_head * D;
            auto attend = [&]<bool kAskAhead>() {
                if (cache.eviction().any())
                    attend_group<kAskAhead>(out, weights, p.max_keys, q, heads, key_at, value_at, keys, D,
                                            p.scale, turned, kv_rows.evicted_keys());
                else
                    attend_group<kAskAhead>(out, weights, p.max_keys, q, heads, key_at, value_at, keys, D,
                                            p.scale, turned);
            };
            // A prefill's keys were just written and are still in cache: asking for them only costs
            // loads (SmolLM2 shape: 2 % of a 512-token prefill).
            if (prefill_grouped) attend.template operator()<false>();
            else attend.template operator()<true>();
        };
        // Rows r0 .. r1 - 1 through attend_rows, where it applies: rows from a prefill task's table, no
        // eviction or sinks, and enough keys seen by every row of the block. False: not attended.
        auto attend_block = [&](int64_t r0, int64_t r1, auto key_at, auto value_at) {
            if constexpr (!is_row_table<decltype(key_at)>) return false;
            else {
                if (r1 - r0 < 2 || cache.eviction().any()) return false;
                KeyRange keys[kAttendBlockRows];
                for (int64_t r = r0; r < r1; ++r) {
                    keys[r - r0] = keys_of(r);
                    if (keys[r - r0].n_sink > 0) return false;
                }
                if (shared_keys(keys, r1 - r0).count() < kAttendBlockMinKeys) return false;
                float* out[kAttendBlockRows];
                const float* q[kAttendBlockRows];
                for (int64_t r = r0; r < r1; ++r) {
                    out[r - r0] = p.attn + (p.row0[c] + r) * Q + first_head * D;
                    q[r - r0] = p.q_row(p.row0[c] + r) + first_head * D;
                }
                attend_rows(out, weights, p.max_keys, q, r1 - r0, heads, key_at, value_at, keys, D, p.scale);
                return true;
            }
        };
        auto rows = [&](auto key_at, auto value_at) {
            for (int64_t b = part; b < n_blocks; b += parts) {
                const int64_t r0 = b * block_rows, r1 = std::min(ch.n_tokens, r0 + block_rows);
                if (attend_block(r0, r1, key_at, value_at)) continue;
                for (int64_t r = r0; r < r1; ++r) attend_one(r, key_at, value_at);
            }
        };
        // The keys this task's rows see: the sinks, then the window span from the first row's lowest key
        // to the last row's own position, numbered in that order (KeyRange::index).
        auto task_keys = [&] {
            const int64_t last_block = part + (n_blocks - 1 - part) / parts * parts;
            const int64_t first_pos = cache.next_position() + part * block_rows;
            const int64_t last_pos = cache.next_position() + std::min(ch.n_tokens, (last_block + 1) * block_rows) - 1;
            const KeyRange first = within_window(cache.visibility().visible_keys(first_pos), first_pos, layer_window);
            const KeyRange final = within_window(cache.visibility().visible_keys(last_pos), last_pos, layer_window);
            return KeyRange{final.n_sink, std::max(final.n_sink, first.lo), final.hi};
        };
        if (cache.format().quantized()) {
            // Packed rows: every key the task's rows see, dequantized once into float32 rows.
            if (part >= n_blocks) return;
            const KeyRange span = task_keys();
            thread_local std::vector<float> k_rows, v_rows;  // (span.count(), D) each; grow once per thread
            const size_t n = size_t(span.count() * D);
            // Sized for the workspace's keys at once, so decoding does not grow them a row at a time.
            if (k_rows.size() < n) k_rows.resize(std::max(n, size_t(p.max_keys * D))), v_rows.resize(k_rows.size());
            for (int64_t j = 0; j < span.count(); ++j) {
                const int64_t pp = span.position(j);
                kv_rows.copy_key(pp, k_rows.data() + j * D);
                kv_rows.copy_value(pp, v_rows.data() + j * D);
            }
            rows([&](int64_t pp) -> const float* { return k_rows.data() + span.index(pp) * D; },
                 [&](int64_t pp) -> const float* { return v_rows.data() + span.index(pp) * D; });
            return;
        }
        auto stored_rows = [&]<class T>() {
            if (!prefill_grouped) {
                rows([&](int64_t pp) { return kv_rows.key<T>(pp); }, [&](int64_t pp) { return kv_rows.value<T>(pp); });
                return;
            }
            // A prefill task's rows share most of their keys: each row's place in the cache is looked up
            // once per task, not once per query (SmolLM2 shape, 512-token prefill: the lookups were 3 % of it).
            if (part >= n_blocks) return;
            const KeyRange span = task_keys();
            thread_local std::vector<const T*> key_rows, value_rows;  // (span.count()) each
            key_rows.resize(size_t(span.count())), value_rows.resize(size_t(span.count()));
            for (int64_t j = 0; j < span.count(); ++j) {
                key_rows[size_t(j)] = kv_rows.key<T>(span.position(j));
                value_rows[size_t(j)] = kv_rows.value<T>(span.position(j));
            }
            rows(RowTable<const T*>{key_rows.data(), span}, RowTable<const T*>{value_rows.data(), span});
        };
        if (cache.format().bf16()) stored_rows.template operator()<uint16_t>();
        else stored_rows.template operator()<float>();
    });
}

// Step 3d, encoder-decoder: cross-attention sub-layer, the queries against every source position's cached
// K/V (no mask). The q rows go to ws.qkv's first T*C floats, free after self-attention.
void cross_attention(Pass& p, int64_t il, const LayerWeights& lw) {
    const int64_t T = p.T, C = p.C, H = p.H, D = p.D;
    std::span<Chunk> chunks = p.chunks;
    const float* cross_in = sublayer_input(p.cfg, p.x, p.xn, lw.ln_cross_weight, lw.ln_cross_bias, T);
    float* cq = p.qkv;  // (T, C)
    matmul_kn(cq, cross_in, lw.cross_q_weight, lw.cross_q_bias, T, C, C);
    ThreadPool::global().parallel_for(int64_t(chunks.size()) * H, [&](int64_t task) {
        const int64_t c = task / H, h = task % H;
        const Chunk& ch = chunks[size_t(c)];
        const EncoderOutput& enc = *ch.encoder;
        const KeyRange every_source{0, 0, enc.n_source() - 1};
        float* weights = p.scratch + task * p.max_keys;
        for (int64_t r = 0; r < ch.n_tokens; ++r)
            head_attention(p.attn + (p.row0[c] + r) * C + h * D, weights, cq + (p.row0[c] + r) * C + h * D,
                           enc.cross_key(il, h, 0), enc.cross_value(il, h, 0), D, every_source, D, p.scale);
    });
    for (size_t c = 0; c < chunks.size(); ++c)
        if (chunks[c].probe)
            std::memcpy(chunks[c].probe->cross_q.data() + size_t(il * chunks[c].n_tokens * C),
                        cq + p.row0[c] * C, size_t(chunks[c].n_tokens * C) * sizeof(float));
    matmul_kn(p.proj, p.attn, lw.cross_proj_weight, lw.cross_proj_bias, T, C, C);  // (T, C)
    sublayer_output(p.cfg, p.x, p.proj, lw.ln_cross_weight, lw.ln_cross_bias, T);
}

// Step 3: one decoder layer over every chunk's rows.
void decoder_layer(Pass& p, int64_t il) {
    const ModelConfig& cfg = p.cfg;
    const int64_t T = p.T, C = p.C, Q = p.Q;
    p.record_residual(il);
    const LayerWeights& lw = p.w.layers[size_t(il)];
    const int64_t layer_window = cfg.window_of(il);  // the model's own window in this layer; 0 = none
    const float* layer_rotary = layer_window > 0 ? p.local_rotary : p.rotary;
    const float* layer_inv_freq = layer_window > 0 && cfg.local_rope ? p.model.local_rotary_inv_freq().data()
                                                                     : p.model.rotary_inv_freq().data();

    // Attention sub-layer. Pre-LN: x += attn(ln_1(x)). Post-LN: x = ln_1(x + attn(x)).
    const float* attn_in = sublayer_input(cfg, p.x, p.xn, lw.ln_1_weight, lw.ln_1_bias, T);
    project_qkv(p, lw, attn_in, layer_rotary);
    store_keys(p, il);
    self_attention(p, il, layer_window, layer_inv_freq);
    if (p.llama) matmul_nk(p.proj, p.attn, lw.attn_proj_weight, lw.attn_proj_bias, T, Q, C);  // (T, C)
    else matmul_kn(p.proj, p.attn, lw.attn_proj_weight, lw.attn_proj_bias, T, C, C);      // (T, C)
    if (lw.attn_out_norm_weight) normalize(cfg, p.proj, p.proj, lw.attn_out_norm_weight, nullptr, T);  // Gemma 3
    sublayer_output(cfg, p.x, p.proj, lw.ln_1_weight, lw.ln_1_bias, T);

    if (cfg.encoder_decoder) cross_attention(p, il, lw);

    // MLP sub-layer. Pre-LN: x += mlp(ln_2(x)). Post-LN: x = ln_2(x + mlp(x)).
    mlp_sublayer(cfg, lw, p.x, p.xn, p.hidden, p.proj, T);

    // Where a NaN or infinity first appears: one scan of the chunk's rows per layer, (T, C) floats
    // against the layer's ~12·C² multiply-adds per row, until one is found.
    for (size_t c = 0; c < p.chunks.size(); ++c)
        if (p.chunks[c].non_finite_layer < 0 && !all_finite(p.x + p.row0[c] * C, p.chunks[c].n_tokens * C))
            p.chunks[c].non_finite_layer = il;
}

// Step 4: only each chunk's last row is turned into logits: that is the row that predicts the next token.
// The rows of every chunk that wants logits go through the output layer together, so a batch reads
// its V x C weights once, not once per sequence (row-deterministic kernels: the same numbers).
void output_logits(Pass& p) {
    const ModelConfig& cfg = p.cfg;
    const Weights& w = p.w;
    const int64_t C = p.C, V = p.V;
    float* last = p.last;  // (chunks wanting logits, C)
    int64_t n_out = 0;
    for (size_t c = 0; c < p.chunks.size(); ++c) {
        if (!p.chunks[c].logits) continue;
        const float* row = p.x + (p.row0[c] + p.chunks[c].n_tokens - 1) * C;
        if (w.ln_f_weight) normalize(cfg, last + n_out * C, row, w.ln_f_weight, w.ln_f_bias, 1);
        else std::memcpy(last + n_out * C, row, size_t(C) * sizeof(float));
        ++n_out;
    }
    if (n_out == 1) {  // one sequence: straight into its buffer
        for (Chunk& ch : p.chunks)
            if (ch.logits) matmul_nk(ch.logits, last, w.lm_head_weight, w.lm_head_bias, 1, C, V);
    } else if (n_out > 1) {
        matmul_nk(p.logits, last, w.lm_head_weight, w.lm_head_bias, n_out, C, V);  // (n_out, V)
        int64_t k = 0;
        for (Chunk& ch : p.chunks)
            if (ch.logits) std::memcpy(ch.logits, p.logits + (k++) * V, size_t(V) * sizeof(float));
    }
    if (cfg.final_logit_softcap > 0) {  // Gemma3ForCausalLM: logits / cap, tanh, * cap (float32)
        const float cap = float(cfg.final_logit_softcap);
        for (Chunk& ch : p.chunks)
            if (ch.logits)
                for (int64_t i = 0; i < V; ++i) ch.logits[i] = std::tanh(ch.logits[i] / cap) * cap;
    }
    for (Chunk& ch : p.chunks)
        if (ch.logits && ch.non_finite_layer < 0 && !all_finite(ch.logits, V)) ch.non_finite_layer = cfg.n_layer;
}

// Step 5: work done, counted as 2 flops per multiply-add: projections per row, attention per visible key;
// then each cache moves its pointer past the chunk.
void count_and_advance(Pass& p) {
    const ModelConfig& cfg = p.cfg;
    const int64_t C = p.C, Q = p.Q, KV = p.KV, F = p.F, V = p.V;
    const double per_row = 2.0 * double(cfg.n_layer) *
                           (p.llama ? double(C * Q + 2 * C * KV + Q * C + 3 * C * F) : double(C * 3 * C + C * C + 2 * C * F));
    for (Chunk& ch : p.chunks) {
        double keys = 0;
        for (int64_t r = 0; r < ch.n_tokens; ++r) {
            const int64_t pos = ch.cache->next_position() + r;
            for (int64_t il = 0; il < cfg.n_layer; ++il)
                keys += double(within_window(ch.cache->visibility().visible_keys(pos), pos, cfg.window_of(il)).count());
        }
        ch.flops = per_row * double(ch.n_tokens) + 4.0 * double(Q) * keys +
                   (ch.logits ? 2.0 * double(C * V) : 0.0);
        if (cfg.encoder_decoder)  // per row and layer: the q and output projections, every source key
            ch.flops += double(cfg.n_layer * ch.n_tokens) * (4.0 * double(C * C) + 4.0 * double(C * ch.encoder->n_source()));
        ch.cache->advance(ch.n_tokens);
    }
}

}  // namespace

void forward(const Model& model, std::span<Chunk> chunks, Workspace& ws) {
    Pass p(model, chunks, ws.max_keys());
    check_chunks(p, ws);
    // Every check passed: map the chunks' positions (paged caches allocate or copy blocks here).
    for (Chunk& ch : chunks) ch.cache->prepare(ch.tokens, ch.n_tokens);

    const int64_t T = p.T, C = p.C, D = p.D, Q = p.Q, KV = p.KV;
    p.x = ws.x.data();
    p.xn = ws.xn.data();
    p.qkv = ws.qkv.data();
    p.attn = ws.attn.data();
    p.proj = ws.proj.data();
    p.hidden = ws.hidden.data();
    p.rotary = ws.rotary.data();
    p.local_rotary = p.cfg.local_rope ? p.rotary + T * D : p.rotary;
    p.scratch = ws.scratch.data();
    p.last = ws.last.data();
    p.logits = ws.logits.data();
    p.q_stride = p.llama ? Q : 3 * C;
    p.kv_stride = p.llama ? KV : 3 * C;
    p.q_rows = p.qkv;
    p.k_rows = p.llama ? p.qkv + T * Q : p.qkv + C;
    p.v_rows = p.llama ? p.qkv + T * (Q + KV) : p.qkv + 2 * C;

    embed_rows(p);
    for (int64_t il = 0; il < p.cfg.n_layer; ++il) decoder_layer(p, il);
    p.record_residual(p.cfg.n_layer);
    output_logits(p);
    count_and_advance(p);
}

}  // namespace kvscope
