#include "run/eviction.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "base/errors.h"

namespace kvscope {

const char* eviction_policy_name(EvictionPolicyKind k) {
    switch (k) {
        case EvictionPolicyKind::Off: return "oracle-off";
        case EvictionPolicyKind::WindowSinks: return "window+sinks";
        case EvictionPolicyKind::H2O: return "h2o";
        case EvictionPolicyKind::SnapKV: return "snapkv";
        case EvictionPolicyKind::Pyramid: return "pyramid";
    }
    return "?";
}

EvictionPolicyKind parse_eviction_policy(const std::string& name) {
    for (EvictionPolicyKind k : {EvictionPolicyKind::Off, EvictionPolicyKind::WindowSinks, EvictionPolicyKind::H2O,
                                 EvictionPolicyKind::SnapKV, EvictionPolicyKind::Pyramid})
        if (name == eviction_policy_name(k)) return k;
    throw UsageError("unknown eviction policy \"" + name + "\" (one of oracle-off, window+sinks, h2o, snapkv, pyramid)");
}

const char* pool_kind_name(PoolKind k) { return k == PoolKind::Max ? "max" : "avg"; }

void validate(const EvictionSpec& s) {
    if (!s.active()) return;
    const std::string name = eviction_policy_name(s.kind);
    if (s.budget <= 0)
        throw UsageError("eviction policy " + name + " needs a KV budget >= 1 (positions kept per layer and head), got " +
                         std::to_string(s.budget));
    if (s.kind == EvictionPolicyKind::WindowSinks) {
        if (s.sinks < 0) throw UsageError("eviction sinks must be >= 0, got " + std::to_string(s.sinks));
        if (s.sinks >= s.budget)
            throw UsageError("window+sinks keeps " + std::to_string(s.sinks) + " sinks within a budget of " +
                             std::to_string(s.budget) + ": the budget must be larger than the sinks");
    }
    if (s.kind == EvictionPolicyKind::H2O && s.recent > s.budget)
        throw UsageError("h2o keeps " + std::to_string(s.recent) + " recent positions within a budget of " +
                         std::to_string(s.budget) + ": recent must be <= the budget");
    if (s.recent < -1) throw UsageError("eviction recent must be >= 0, got " + std::to_string(s.recent));
    if (s.kind == EvictionPolicyKind::SnapKV || s.kind == EvictionPolicyKind::Pyramid) {
        if (s.obs < 1) throw UsageError("the observation window must be >= 1, got " + std::to_string(s.obs));
        if (s.pool < 1 || s.pool % 2 == 0)
            throw UsageError("the pooling kernel must be odd and >= 1, got " + std::to_string(s.pool));
    }
}

std::vector<int64_t> keep_window_sinks(std::span<const int64_t> alive, int64_t budget, int64_t sinks) {
    std::vector<int64_t> kept;
    const int64_t n = int64_t(alive.size());
    int64_t n_sinks = 0;
    while (n_sinks < n && alive[size_t(n_sinks)] < sinks && n_sinks < budget) ++n_sinks;
    const int64_t n_recent = std::min(n - n_sinks, std::max<int64_t>(0, budget - n_sinks));
    kept.assign(alive.begin(), alive.begin() + n_sinks);
    kept.insert(kept.end(), alive.end() - n_recent, alive.end());
    return kept;
}

namespace {
// Indices of the `k` highest of score[0..n), ties to the lower index; returned ascending.
std::vector<int64_t> top_indices(std::span<const double> score, int64_t n, int64_t k) {
    std::vector<int64_t> order(static_cast<size_t>(n));
    std::iota(order.begin(), order.end(), int64_t(0));
    k = std::clamp<int64_t>(k, 0, n);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
        return score[size_t(a)] != score[size_t(b)] ? score[size_t(a)] > score[size_t(b)] : a < b;
    });
    order.resize(size_t(k));
    std::sort(order.begin(), order.end());
    return order;
}
}  // namespace

std::vector<int64_t> keep_heavy_recent(std::span<const int64_t> alive, std::span<const double> score, int64_t budget,
                                       int64_t recent) {
    const int64_t n = int64_t(alive.size());
    if (n <= budget) return std::vector<int64_t>(alive.begin(), alive.end());
    const int64_t n_recent = std::min(recent, budget), older = n - n_recent;
    std::vector<int64_t> kept;
    for (int64_t i : top_indices(score, older, budget - n_recent)) kept.push_back(alive[size_t(i)]);
    kept.insert(kept.end(), alive.end() - n_recent, alive.end());
    return kept;
}

std::vector<double> pool_scores(std::span<const double> score, int64_t kernel, PoolKind kind) {
    const int64_t n = int64_t(score.size()), half = kernel / 2;
    std::vector<double> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        double acc = kind == PoolKind::Max ? -std::numeric_limits<double>::infinity() : 0.0;
        for (int64_t j = i - half; j <= i + half; ++j) {
            if (j < 0 || j >= n) continue;  // padding: -inf for max, 0 for avg
            acc = kind == PoolKind::Max ? std::max(acc, score[size_t(j)]) : acc + score[size_t(j)];
        }
        out[size_t(i)] = kind == PoolKind::Max ? acc : acc / double(kernel);
    }
    return out;
}

std::vector<int64_t> keep_snapkv(std::span<const int64_t> alive, std::span<const double> pooled, int64_t budget,
                                 int64_t obs) {
    const int64_t n = int64_t(alive.size());
    if (n <= budget) return std::vector<int64_t>(alive.begin(), alive.end());
    const int64_t window = std::min(obs, n), prefix = n - window;
    const int64_t from_window = std::min(window, budget);
    std::vector<int64_t> kept;
    for (int64_t i : top_indices(pooled, prefix, budget - from_window)) kept.push_back(alive[size_t(i)]);
    kept.insert(kept.end(), alive.end() - from_window, alive.end());
    return kept;
}

std::vector<int64_t> pyramid_budgets(int64_t mean, int64_t n_layer) {
    std::vector<int64_t> b(size_t(n_layer), mean);
    if (n_layer < 2) return b;
    // round half up of mean * (3(L-1) - 2l) / (2(L-1)), in integers
    const int64_t den = 2 * (n_layer - 1);
    for (int64_t l = 0; l < n_layer; ++l) {
        const int64_t num = mean * (3 * (n_layer - 1) - 2 * l);
        b[size_t(l)] = std::max<int64_t>(1, (2 * num + den) / (2 * den));
    }
    return b;
}

EvictionPolicy::EvictionPolicy(EvictionSpec spec, int64_t n_layer, int64_t n_kv_head, int64_t group,
                               int64_t max_positions)
    : spec_(spec), n_layer_(n_layer), n_kv_head_(n_kv_head), group_(group), max_positions_(max_positions) {
    validate(spec_);
    if (spec_.kind == EvictionPolicyKind::H2O || spec_.kind == EvictionPolicyKind::SnapKV ||
        spec_.kind == EvictionPolicyKind::Pyramid)
        scores_.assign(size_t(n_layer * n_kv_head * max_positions), 0.0);
    budgets_ = spec_.kind == EvictionPolicyKind::Pyramid ? pyramid_budgets(spec_.budget, n_layer)
                                                         : std::vector<int64_t>(size_t(n_layer), spec_.budget);
    alive_.reserve(size_t(max_positions));
    kept_.reserve(size_t(max_positions));
    alive_scores_.reserve(size_t(max_positions));
}

void EvictionPolicy::grow(int64_t max_positions) {
    if (max_positions <= max_positions_) return;
    if (!scores_.empty()) {
        std::vector<double> grown(size_t(n_layer_ * n_kv_head_ * max_positions), 0.0);
        for (int64_t lh = 0; lh < n_layer_ * n_kv_head_; ++lh)
            std::copy_n(scores_.begin() + lh * max_positions_, max_positions_, grown.begin() + lh * max_positions);
        scores_ = std::move(grown);
    }
    max_positions_ = max_positions;
}

bool EvictionPolicy::observes(int64_t position, int64_t prompt_length) const {
    switch (spec_.kind) {
        case EvictionPolicyKind::H2O: return true;
        case EvictionPolicyKind::SnapKV:
        case EvictionPolicyKind::Pyramid:
            return !compressed_ && position < prompt_length && position >= prompt_length - spec_.obs;
        default: return false;
    }
}

bool EvictionPolicy::observing() const {
    return spec_.kind == EvictionPolicyKind::H2O ||
           ((spec_.kind == EvictionPolicyKind::SnapKV || spec_.kind == EvictionPolicyKind::Pyramid) && !compressed_);
}

void EvictionPolicy::observe(int64_t il, int64_t kv, const float* weights, int64_t stride, const KeyRange& keys) {
    double* s = scores_.data() + (il * n_kv_head_ + kv) * max_positions_;
    for (int64_t j = 0; j < keys.count(); ++j) {
        const int64_t p = keys.position(j);
        for (int64_t g = 0; g < group_; ++g) s[p] += double(weights[g * stride + j]);
    }
}

void EvictionPolicy::observe_chunk(const ModelConfig& cfg, const KvCache& cache, const float* queries,
                                   int64_t first_position, int64_t n, int64_t prompt_length) {
    const int64_t D = cfg.head_dim(), Q = cfg.q_width(), G = group_;
    const float scale = cfg.attention_scale();
    for (int64_t r = 0; r < n; ++r) {
        const int64_t pos = first_position + r;
        if (!observes(pos, prompt_length)) continue;
        for (int64_t il = 0; il < n_layer_; ++il) {
            const KeyRange keys = within_window(cache.visibility().visible_keys(pos), pos, cfg.window_of(il));
            const int64_t P = keys.count();
            if (int64_t(weights_.size()) < G * P) weights_.resize(size_t(G * P));
            out_.resize(size_t(G * D));
            for (int64_t kv = 0; kv < n_kv_head_; ++kv) {
                const float* q = queries + (il * n + r) * Q + kv * G * D;
                const KvRows rows = cache.rows(il, kv);
                auto attend = [&](auto key_at, auto value_at) {
                    if (cache.eviction().any())
                        attend_group(out_.data(), weights_.data(), P, q, G, key_at, value_at, keys, D, scale, nullptr,
                                     rows.evicted_keys());
                    else
                        attend_group(out_.data(), weights_.data(), P, q, G, key_at, value_at, keys, D, scale);
                };
                if (cache.format().quantized()) {  // float32 copies of the packed rows, as the forward pass reads them
                    k_rows_.resize(size_t(P * D));
                    v_rows_.resize(size_t(P * D));
                    for (int64_t j = 0; j < P; ++j) {
                        rows.copy_key(keys.position(j), k_rows_.data() + j * D);
                        rows.copy_value(keys.position(j), v_rows_.data() + j * D);
                    }
                    auto at = [&](int64_t p) { return (p < keys.n_sink ? p : keys.n_sink + p - keys.lo) * D; };
                    attend([&](int64_t p) -> const float* { return k_rows_.data() + at(p); },
                           [&](int64_t p) -> const float* { return v_rows_.data() + at(p); });
                } else if (cache.format().bf16()) {
                    attend([&](int64_t p) { return rows.key<uint16_t>(p); },
                           [&](int64_t p) { return rows.value<uint16_t>(p); });
                } else {
                    attend([&](int64_t p) { return rows.key<float>(p); }, [&](int64_t p) { return rows.value<float>(p); });
                }
                observe(il, kv, weights_.data(), P, keys);
            }
        }
    }
}

void EvictionPolicy::decide(const KvCache& cache, bool prompt_done, std::vector<EvictionEvent>& out) {
    out.clear();
    const EvictionPolicyKind k = spec_.kind;
    if (k == EvictionPolicyKind::Off) return;
    const bool snap = k == EvictionPolicyKind::SnapKV || k == EvictionPolicyKind::Pyramid;
    if (snap && (compressed_ || !prompt_done)) return;
    if (snap) compressed_ = true;
    const int64_t next = cache.next_position();
    if (k == EvictionPolicyKind::WindowSinks) {
        // keep_window_sinks's choice, in order of positions: sinks .. next - (budget - sinks) - 1 are gone. Kept
        // as a mark rather than read from the cache: the window rule may have returned a paged block already.
        const int64_t gone_to = next - (spec_.budget - spec_.sinks), from = std::max(spec_.sinks, window_mark_);
        for (int64_t il = 0; il < n_layer_; ++il)
            for (int64_t kv = 0; kv < n_kv_head_; ++kv)
                for (int64_t p = from; p < gone_to; ++p)
                    out.push_back(EvictionEvent{int32_t(il), int32_t(kv), p, float(p), false});
        window_mark_ = std::max(window_mark_, gone_to);
        return;
    }
    for (int64_t il = 0; il < n_layer_; ++il)
        for (int64_t kv = 0; kv < n_kv_head_; ++kv) {
            alive_.clear();
            alive_scores_.clear();
            const KvRows rows = cache.rows(il, kv);
            for (int64_t p = 0; p < next; ++p)
                if (cache.alive(p) && !rows.evicted(p)) {
                    alive_.push_back(p);
                    if (!scores_.empty()) alive_scores_.push_back(score(il, kv, p));
                }
            const int64_t budget = budgets_[size_t(il)];
            if (int64_t(alive_.size()) <= budget) continue;
            std::vector<double> pooled;
            switch (k) {
                case EvictionPolicyKind::WindowSinks: kept_ = keep_window_sinks(alive_, budget, spec_.sinks); break;
                case EvictionPolicyKind::H2O:
                    kept_ = keep_heavy_recent(alive_, alive_scores_, budget, spec_.recent_or_default());
                    break;
                default: {
                    const int64_t prefix = int64_t(alive_.size()) - std::min<int64_t>(spec_.obs, int64_t(alive_.size()));
                    pooled = pool_scores(std::span<const double>(alive_scores_).first(size_t(prefix)), spec_.pool,
                                         spec_.pool_kind);
                    kept_ = keep_snapkv(alive_, pooled, budget, spec_.obs);
                }
            }
            // Evicted = alive but not kept (both ascending); the score that decided each.
            size_t ik = 0;
            for (size_t i = 0; i < alive_.size(); ++i) {
                if (ik < kept_.size() && kept_[ik] == alive_[i]) {
                    ++ik;
                    continue;
                }
                float decided = float(alive_[i]);  // window+sinks: its position (age) decided
                if (k == EvictionPolicyKind::H2O) decided = float(alive_scores_[i]);
                else if (snap) decided = i < pooled.size() ? float(pooled[i]) : float(alive_scores_[i]);
                out.push_back(EvictionEvent{int32_t(il), int32_t(kv), alive_[i], decided, false});
            }
        }
}

void EvictionPolicy::reset() {
    std::fill(scores_.begin(), scores_.end(), 0.0);
    compressed_ = false;
    window_mark_ = 0;
}

EvictionPolicy::Saved EvictionPolicy::save(int64_t n_positions) const {
    Saved s;
    s.compressed = compressed_;
    s.window_mark = window_mark_;
    s.n_positions = std::min(n_positions, max_positions_);
    if (scores_.empty() || compressed_) {  // compressed: the scores decide nothing any more
        s.n_positions = 0;
        return s;
    }
    s.scores.resize(size_t(n_layer_ * n_kv_head_ * s.n_positions));
    for (int64_t lh = 0; lh < n_layer_ * n_kv_head_; ++lh)
        std::copy_n(scores_.begin() + lh * max_positions_, s.n_positions, s.scores.begin() + lh * s.n_positions);
    return s;
}

void EvictionPolicy::load(const Saved& s) {
    compressed_ = s.compressed;
    window_mark_ = s.window_mark;
    if (scores_.empty()) return;
    for (int64_t lh = 0; lh < n_layer_ * n_kv_head_; ++lh) {
        double* row = scores_.data() + lh * max_positions_;
        std::copy_n(s.scores.begin() + lh * s.n_positions, s.n_positions, row);
        std::fill(row + s.n_positions, row + max_positions_, 0.0);
    }
}

}  // namespace kvscope
