#pragma once
// The prompt cache file (`--prompt-cache FILE`): a prompt's token ids and the K/V rows the model computed
// for them, so a later run whose prompt starts with the same tokens loads those rows instead of
// computing them. The file names the model it was made by; any other model, config, weight format,
// kernel build or KV cache storage is refused, because its K/V rows would differ.
//
//   prompt_cache_magic                   the file's first 8 bytes (declared in io/output_path.h)
//   Hash64                               a fast 64-bit streaming hash (checksums, fingerprints)
//   model_fingerprint(model, bf16_cache) what identifies a run's K/V: config, weights, formats, kernels
//   read_prompt_cache(path, fp)          the whole file, checked; throws LoadError, changes nothing
//   write_prompt_cache(path, fp, t, c)   atomic and durable (write_file_atomic)
//   matching_prefix(pc, prompt, cache)   how many leading prompt positions the file can supply
//   restore_prompt_cache(pc, n, cache)   put the file's rows 0..n-1 into an empty cache, advance(n)
//
// Use: fp = model_fingerprint(model) once per loaded model (it reads every weight byte: 0.1 s for
// GPT-2 124M's 498 MB from the page cache, the disk's speed otherwise; measured by the [.bench] case of
// tests/prompt_cache.tests.cpp). If FILE exists: pc = read_prompt_cache, n = matching_prefix,
// restore_prompt_cache(pc, n, cache), compute the rest of the prompt, and write the file again when
// pc.tokens is not a prefix of the prompt. If it does not exist: compute the prompt, write it.
//
// File format, version 1, every number little-endian:
//   char[8]  magic "KVPROMPT"
//   u32      format version (1)
//   u32 n, n bytes    config.json's canonical text (config_to_json), n <= 65536
//   u32 n, n bytes    weight format: "f32" | "bf16", n <= 16
//   u32 n, n bytes    kernels: "avx512" | "portable" (their floats differ in the last bits), n <= 16
//   u32 n, n bytes    KV cache rows: "f32" | "bf16" (as the cache stored them; written as f32), n <= 16
//   u64      weights hash: Hash64 over the checkpoint's tensors (see model_fingerprint)
//   i64 x 4  L, H, D, N (layers, heads, head dim, tokens); N >= 1
//   i32 x N  token ids
//   f32      K rows (L, H, N, D), then V rows (L, H, N, D)
//   u64      checksum: Hash64 of every byte before it
// The file's size must equal what L, H, D, N imply exactly. The rows are K/V computed with every earlier
// position visible, as a run without a window computes them; a run with a window W and S sinks computes
// the same rows for positions below W + S (their queries see everything), so it can use those.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cache/kv_cache.h"
#include "forward/model.h"
#include "io/output_path.h"
#include "model/config.h"

namespace kvscope {

// 64-bit hash of a byte stream, written for kvscope: four 64-bit lanes each take every fourth word
// (lane = rotl(lane + word * K1, 29) * K2, bijective in the lane), so the loop runs at memory speed;
// lanes, the tail bytes and the length are folded together with splitmix64's finaliser. Not
// cryptographic: it finds damage and tells models apart, it does not resist a forger. The value
// depends only on the bytes, not on how they are split across update() calls.
class Hash64 {
public:
    Hash64();
    void update(const void* data, size_t n_bytes);
    uint64_t digest() const;                          // of everything so far; update() may continue
    static uint64_t of(const void* data, size_t n_bytes);

private:
    uint64_t lane_[4];
    unsigned char pending_[32];
    size_t n_pending_ = 0;
    uint64_t n_total_ = 0;
};

// What makes two runs' K/V rows equal. The weights hash covers every tensor of the checkpoint
// (model.safetensors, or every shard in name order) — name, dtype, shape and all data bytes, in file
// order — but not the header's __metadata__, which no computation reads.
struct ModelFingerprint {
    std::string config_json;     // config_to_json(config)
    std::string weight_format;   // "f32" | "bf16" (to_string(WeightFormat))
    std::string kernels;         // "avx512" | "portable": how this build computes
    std::string kv_format;       // "f32" | "bf16": how the run's KV cache stores rows (later layers
                                 // attend over the stored values, so this changes their K/V too)
    uint64_t weights_hash = 0;
    ModelConfig config;          // for the dimension and vocabulary checks
};
ModelFingerprint model_fingerprint(const Model& model, bool bf16_cache = false);
const char* kernels_name();      // this build's kernels: "avx512" | "portable"

struct PromptCache {
    std::vector<TokenId> tokens;                 // (N)
    int64_t n_layer = 0, n_head = 0, head_dim = 0;
    std::string kv_format;                       // "f32" | "bf16", the storage of the cache it came from
    std::vector<float> k, v;                     // (L, H, N, D) each, float32 (bf16 rows widened exactly)
    const float* key(int64_t il, int64_t h, int64_t p) const { return k.data() + row(il, h, p); }
    const float* value(int64_t il, int64_t h, int64_t p) const { return v.data() + row(il, h, p); }

private:
    size_t row(int64_t il, int64_t h, int64_t p) const {
        return size_t(((il * n_head + h) * int64_t(tokens.size()) + p) * head_dim);
    }
};

// Throws LoadError{path, what, hint} with one line for: no such file, not a prompt cache (magic), another
// format version, truncated or trailing bytes, absurd sizes, checksum mismatch, another model / config /
// weight format / kernel build / KV storage, more tokens than n_positions, token ids outside the vocabulary.
// Nothing is allocated beyond what the file's real size holds.
PromptCache read_prompt_cache(const std::string& path, const ModelFingerprint& fp);

// Stores tokens (N >= 1) and the cache's rows for positions 0..N-1. Throws UsageError when the cache
// does not hold those rows as computed with every earlier position visible (N > next_position(), or a
// window W and S sinks with next_position() >= W + S), or when its shape, storage or a token does not
// fit `fp`; LoadError when the file cannot be written. The file is written by write_file_atomic
// (atomic_file.h): a FILE already there is replaced whole or, on failure, left as it was.
// Every layer still stores positions 0..n-1 (a sliding layer stores only its window: after a prefill in
// chunks its oldest positions are gone, and a file of them cannot be written).
bool holds_every_position(const KvCache& cache, int64_t n);
void write_prompt_cache(const std::string& path, const ModelFingerprint& fp, std::span<const TokenId> tokens,
                        const KvCache& cache);

// Leading prompt positions the file can supply: the common prefix of pc.tokens and prompt, at most
// prompt.size() - 1 (the last prompt token is always computed: its logits choose the first new token),
// and at most W + S - 1 when `cache` has a window W and S sinks (so every row stays visible, as in the file).
int64_t matching_prefix(const PromptCache& pc, std::span<const TokenId> prompt, const KvCache& cache);

// Writes pc's rows 0..n-1 into `cache`, which must be empty (next_position() == 0) and shaped and stored
// like pc: prepare(tokens, n), write every row, advance(n), as forward() does for a chunk. Throws
// UsageError, with the cache unchanged, when n is out of range, beyond what matching_prefix allows, or
// does not fit.
void restore_prompt_cache(const PromptCache& pc, int64_t n, KvCache& cache);

}  // namespace kvscope
