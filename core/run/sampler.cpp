#include "run/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <span>
#include <utility>

#include "base/errors.h"
#include "kernels/simd.h"

namespace kvscope {
namespace {

// e^z in double for the softmax, to about an ulp, eight lanes at a time where AVX-512 is (four on AVX2):
// z = n·ln 2 + r with |r| <= ln 2 / 2 (ln 2 in two parts, so r is exact), e^r from its Taylor
// polynomial to degree 13 (truncation below 5e-18), times 2^n in one rounding. The scalar path performs
// the same operations (fma, round half to even, ldexp), so both give the same bits. std::exp per
// element, and std::log per element for the entropy, had cost 0.49 ms a step for a 49,152-token
// vocabulary: 13 % of a batch of 8's decode step on the 2-core Zen 4 VM, run on one thread while the
// other waited.
constexpr double kLog2e = 1.4426950408889634074;
constexpr double kLn2Hi = 6.93147180369123816490e-01;  // ln 2's leading 32 bits: n·kLn2Hi is exact
constexpr double kLn2Lo = 1.90821492927058770002e-10;
constexpr double kFloor = -760.0;  // e^z is 0 in double below -745.2; also keeps n an int
constexpr double kTaylor[] = {1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0, 1.0 / 3628800.0,
                              1.0 / 362880.0,     1.0 / 40320.0,     1.0 / 5040.0,      1.0 / 720.0,
                              1.0 / 120.0,        1.0 / 24.0,        1.0 / 6.0,         0.5,
                              1.0,                1.0};  // 1/13! ... 1/0!

double exp_of(double z) {
    if (std::isnan(z)) return z;
    z = std::max(z, kFloor);
    const double n = std::nearbyint(z * kLog2e);
    const double r = std::fma(-n, kLn2Lo, std::fma(-n, kLn2Hi, z));
    double p = kTaylor[0];
    for (size_t i = 1; i < std::size(kTaylor); ++i) p = std::fma(p, r, kTaylor[i]);
    return std::ldexp(p, int(n));
}

#if defined(__AVX512F__)
inline __m512d exp8(__m512d z) {
    z = _mm512_max_pd(_mm512_set1_pd(kFloor), z);  // a NaN z stays NaN (max_pd returns its second operand)
    const __m512d n = _mm512_roundscale_pd(_mm512_mul_pd(z, _mm512_set1_pd(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m512d r = _mm512_fnmadd_pd(n, _mm512_set1_pd(kLn2Lo), _mm512_fnmadd_pd(n, _mm512_set1_pd(kLn2Hi), z));
    __m512d p = _mm512_set1_pd(kTaylor[0]);
    for (size_t i = 1; i < std::size(kTaylor); ++i) p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(kTaylor[i]));
    return _mm512_scalef_pd(p, n);
}
#elif defined(__AVX2__) && defined(__FMA__)
inline __m256d exp4(__m256d z) {
    z = _mm256_max_pd(_mm256_set1_pd(kFloor), z);  // a NaN z stays NaN (max_pd returns its second operand)
    const __m256d n = _mm256_round_pd(_mm256_mul_pd(z, _mm256_set1_pd(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256d r = _mm256_fnmadd_pd(n, _mm256_set1_pd(kLn2Lo), _mm256_fnmadd_pd(n, _mm256_set1_pd(kLn2Hi), z));
    __m256d p = _mm256_set1_pd(kTaylor[0]);
    for (size_t i = 1; i < std::size(kTaylor); ++i) p = _mm256_fmadd_pd(p, r, _mm256_set1_pd(kTaylor[i]));
    // ldexp(p, n) for -1097 <= n <= 0: p·2^(n+600) is exact, and ·2^-600 rounds once, where the result is
    // subnormal, as ldexp does.
    const __m256i n64 = _mm256_cvtepi32_epi64(_mm256_cvtpd_epi32(n));
    const __m256d up = _mm256_castsi256_pd(_mm256_slli_epi64(_mm256_add_epi64(n64, _mm256_set1_epi64x(1023 + 600)), 52));
    return _mm256_mul_pd(_mm256_mul_pd(p, up), _mm256_set1_pd(0x1p-600));
}
#endif

// probs[i] = e^{z_i} with z_i = (x_i - x_max) / t. Returns the sums over z_i < 0 of e^{z_i} and of
// e^{z_i}·z_i (z floored as exp_of does, so a -inf logit adds 0, not NaN), and how many z_i are 0 (each
// adds exactly 1). Apart, the entropy of a sharp distribution keeps its digits (see Sampler::sample).
// The sums are kept in eight lanes, lane l taking i ≡ l (mod 8) in order, added pairwise at the end, on
// every build. kDivide false: t is 1, and the division, exact there, is left out (a vdivpd per 8 tokens).
struct ExpSums {
    double below = 0, weighted = 0;
    int64_t n_max = 0;
};
template <bool kDivide>
ExpSums exp_sums(double* probs, const float* x, int64_t V, float x_max, double t) {
    alignas(64) double below_lanes[8] = {}, weighted_lanes[8] = {};
    ExpSums sums;
    int64_t i = 0;
#if defined(__AVX512F__)
    __m512d below = _mm512_setzero_pd(), weighted = _mm512_setzero_pd();
    const __m512d vmax = _mm512_set1_pd(double(x_max)), vt = _mm512_set1_pd(t), zero = _mm512_setzero_pd();
    for (; i < V; i += 8) {
        const __mmask8 m = V - i >= 8 ? __mmask8(0xFF) : __mmask8((1u << (V - i)) - 1u);
        const __m512d d = _mm512_sub_pd(_mm512_cvtps_pd(_mm256_maskz_loadu_ps(m, x + i)), vmax);
        const __m512d z = kDivide ? _mm512_div_pd(d, vt) : d;
        const __m512d e = exp8(z);
        _mm512_mask_storeu_pd(probs + i, m, e);
        const __mmask8 lt = _mm512_mask_cmp_pd_mask(m, z, zero, _CMP_LT_OQ);
        sums.n_max += __builtin_popcount(unsigned(_mm512_mask_cmp_pd_mask(m, z, zero, _CMP_EQ_OQ)));
        below = _mm512_mask_add_pd(below, lt, below, e);
        weighted = _mm512_mask_add_pd(weighted, lt, weighted, _mm512_mul_pd(e, _mm512_max_pd(_mm512_set1_pd(kFloor), z)));
    }
    _mm512_store_pd(below_lanes, below);
    _mm512_store_pd(weighted_lanes, weighted);
#elif defined(__AVX2__) && defined(__FMA__)
    // Lanes 0-3 and 4-7 as two vectors; a z that is not below zero adds +0.0, which leaves a sum of
    // values of one sign as it was.
    __m256d below[2] = {_mm256_setzero_pd(), _mm256_setzero_pd()}, weighted[2] = {below[0], below[0]};
    const __m256d vmax = _mm256_set1_pd(double(x_max)), vt = _mm256_set1_pd(t), zero = _mm256_setzero_pd();
    for (; i + 8 <= V; i += 8)
        for (int h = 0; h < 2; ++h) {
            const __m256d d = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + i + 4 * h)), vmax);
            const __m256d z = kDivide ? _mm256_div_pd(d, vt) : d;
            const __m256d e = exp4(z);
            _mm256_storeu_pd(probs + i + 4 * h, e);
            const __m256d lt = _mm256_cmp_pd(z, zero, _CMP_LT_OQ);
            sums.n_max += __builtin_popcount(unsigned(_mm256_movemask_pd(_mm256_cmp_pd(z, zero, _CMP_EQ_OQ))));
            below[h] = _mm256_add_pd(below[h], _mm256_and_pd(lt, e));
            weighted[h] = _mm256_add_pd(weighted[h], _mm256_and_pd(lt, _mm256_mul_pd(e, _mm256_max_pd(_mm256_set1_pd(kFloor), z))));
        }
    for (int h = 0; h < 2; ++h) {
        _mm256_store_pd(below_lanes + 4 * h, below[h]);
        _mm256_store_pd(weighted_lanes + 4 * h, weighted[h]);
    }
#endif
    for (; i < V; ++i) {
        const double d = double(x[i]) - double(x_max), z = kDivide ? d / t : d, e = exp_of(z);
        probs[i] = e;
        sums.n_max += z == 0.0;
        if (z < 0.0) {
            below_lanes[i % 8] += e;
            weighted_lanes[i % 8] += e * std::max(z, kFloor);
        }
    }
    auto fold = [](double (&l)[8]) { return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7])); };
    sums.below = fold(below_lanes);
    sums.weighted = fold(weighted_lanes);
    return sums;
}

// The first index of the largest x_i, as `if (x[i] > x[best]) best = i` from best = 0 finds it (numpy's
// argmax of finite logits): a NaN never wins, and a NaN at 0 keeps 0. The vector paths take the largest
// value that is not NaN (max_ps returns its second operand, the running maximum, when the first is NaN),
// then the first index holding it (-0 and +0 compare equal, as `>` takes them). That scalar loop took
// about 40 us of a step for a 128,256-token vocabulary.
TokenId first_argmax(const float* x, int64_t V) {
    if (std::isnan(x[0])) return 0;
    float m = x[0];
    int64_t i = 0;
#if defined(__AVX512F__)
    __m512 mv = _mm512_set1_ps(m);
    for (; i + 16 <= V; i += 16) mv = _mm512_max_ps(_mm512_loadu_ps(x + i), mv);
    m = _mm512_reduce_max_ps(mv);
#elif defined(__AVX2__)
    __m256 mv = _mm256_set1_ps(m);
    for (; i + 8 <= V; i += 8) mv = _mm256_max_ps(_mm256_loadu_ps(x + i), mv);
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, mv);
    for (float l : lanes) m = l > m ? l : m;
#endif
    for (; i < V; ++i) m = x[i] > m ? x[i] : m;
    int64_t j = 0;
#if defined(__AVX512F__)
    for (const __m512 want = _mm512_set1_ps(m); j + 16 <= V; j += 16)
        if (const __mmask16 eq = _mm512_cmp_ps_mask(_mm512_loadu_ps(x + j), want, _CMP_EQ_OQ)) return TokenId(j + __builtin_ctz(eq));
#elif defined(__AVX2__)
    for (const __m256 want = _mm256_set1_ps(m); j + 8 <= V; j += 8)
        if (const int eq = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + j), want, _CMP_EQ_OQ))) return TokenId(j + __builtin_ctz(unsigned(eq)));
#endif
    for (; j < V; ++j)
        if (x[j] == m) break;
    return TokenId(j);  // x[0] is not NaN, so some x[j] holds m
}

// Whether any of x[0..15] is above `floor`.
bool any_above(const float* x, float floor) {
#if defined(__AVX512F__)
    return _mm512_cmp_ps_mask(_mm512_loadu_ps(x), _mm512_set1_ps(floor), _CMP_GT_OQ) != 0;
#elif defined(__AVX2__)
    const __m256 f = _mm256_set1_ps(floor);
    return _mm256_movemask_ps(_mm256_or_ps(_mm256_cmp_ps(_mm256_loadu_ps(x), f, _CMP_GT_OQ), _mm256_cmp_ps(_mm256_loadu_ps(x + 8), f, _CMP_GT_OQ))) != 0;
#else
    bool any = false;
    for (int j = 0; j < 16; ++j) any |= x[j] > floor;
    return any;
#endif
}
bool any_above(const double* x, double floor) {
#if defined(__AVX512F__)
    const __m512d f = _mm512_set1_pd(floor);
    return (_mm512_cmp_pd_mask(_mm512_loadu_pd(x), f, _CMP_GT_OQ) | _mm512_cmp_pd_mask(_mm512_loadu_pd(x + 8), f, _CMP_GT_OQ)) != 0;
#elif defined(__AVX2__)
    const __m256d f = _mm256_set1_pd(floor);
    __m256d any = _mm256_cmp_pd(_mm256_loadu_pd(x), f, _CMP_GT_OQ);
    for (int j = 4; j < 16; j += 4) any = _mm256_or_pd(any, _mm256_cmp_pd(_mm256_loadu_pd(x + j), f, _CMP_GT_OQ));
    return _mm256_movemask_pd(any) != 0;
#else
    bool any = false;
    for (int j = 0; j < 16; ++j) any |= x[j] > floor;
    return any;
#endif
}

// The k best ids by (key descending, id ascending), in that order, into out[0, k); out holds V ids. Up to
// kScanMost in one pass over the keys: the k best so far stay in order, and a block of 16 keys none above the
// k-th is skipped in one compare (an id is above every one kept, so a tie with the k-th never enters). More by
// a partial sort of every id. For a 128,256-token vocabulary and k 10 (what a step keeps), the partial sort
// took about 90 us.
constexpr int64_t kScanMost = 64;
template <class Key>
void best_ids(TokenId* out, const Key* key, int64_t V, int64_t k) {
    if (k > kScanMost) {
        std::iota(out, out + V, TokenId(0));
        std::partial_sort(out, out + k, out + V, [&](TokenId a, TokenId b) {
            return key[a] != key[b] ? key[a] > key[b] : a < b;
        });
        return;
    }
    Key best[kScanMost];
    int64_t n = 0;
    auto offer = [&](int64_t i) {
        const Key x = key[i];
        if (n == k && !(x > best[k - 1])) return;
        int64_t at = n < k ? n++ : k - 1;  // full: the k-th makes room
        for (; at > 0 && best[at - 1] < x; --at) best[at] = best[at - 1], out[at] = out[at - 1];
        best[at] = x, out[at] = TokenId(i);
    };
    int64_t i = 0;
    for (; i < V && n < k; ++i) offer(i);
    for (; i + 16 <= V; i += 16)
        if (any_above(key + i, best[k - 1]))
            for (int64_t j = i; j < i + 16; ++j) offer(j);
    for (; i < V; ++i) offer(i);
}

// Every id by (probability descending, id ascending) into order: a stable radix sort of the probabilities' bits
// (non-negative doubles order as their bits; complemented, ascending keys are descending probabilities) from
// id order, 11 bits a pass, a pass whose digit is the same for every id skipped. std::sort of the ids by an
// indirect comparison took 13 ms a step for a 128,256-token vocabulary.
constexpr int kRankBits = 11, kRankPasses = 6;  // 66 bits: the 64 of a double
constexpr int64_t kRankDigits = int64_t(1) << kRankBits;
// keys (2, V), order_to (V) and counts (kRankPasses, kRankDigits): the sort's buffers.
void rank_all(TokenId* order, const double* probs, int64_t V, uint64_t* keys, TokenId* order_to, int64_t* counts) {
    uint64_t* keys_to = keys + V;
    TokenId *from = order, *to = order_to;
    std::fill(counts, counts + kRankPasses * kRankDigits, int64_t(0));
    auto digit = [](uint64_t key, int p) { return int64_t(key >> (kRankBits * p) & (kRankDigits - 1)); };
    for (int64_t i = 0; i < V; ++i) {
        uint64_t bits;
        std::memcpy(&bits, probs + i, sizeof bits);
        keys[i] = ~bits;
        from[i] = TokenId(i);
        for (int p = 0; p < kRankPasses; ++p) ++counts[p * kRankDigits + digit(keys[i], p)];
    }
    for (int p = 0; p < kRankPasses; ++p) {
        int64_t* c = counts + p * kRankDigits;
        if (c[digit(keys[0], p)] == V) continue;
        int64_t at = 0;
        for (int64_t d = 0; d < kRankDigits; ++d) at += std::exchange(c[d], at);
        for (int64_t i = 0; i < V; ++i) {
            const int64_t j = c[digit(keys[i], p)]++;
            keys_to[j] = keys[i], to[j] = from[i];
        }
        std::swap(keys, keys_to);
        std::swap(from, to);
    }
    if (from != order) std::copy(from, from + V, order);
}

}  // namespace

void validate(const SamplerOptions& o) {
    if (!(o.temperature >= 0.0) || !std::isfinite(o.temperature))
        throw UsageError("temperature must be a finite number > 0 (or 0 for greedy), got " + std::to_string(o.temperature));
    if (o.top_k < 0) throw UsageError("top-k must be >= 0 (0 = off), got " + std::to_string(o.top_k));
    if (!(o.top_p > 0.0 && o.top_p <= 1.0))
        throw UsageError("top-p must be in (0, 1], got " + std::to_string(o.top_p));
}

Sampler::Sampler(const SamplerOptions& options, int64_t n_vocab)
    : options_(options), rng_state_(options.seed), probs_(size_t(n_vocab)), order_(size_t(n_vocab)),
      logits_(size_t(n_vocab)), ranked_(size_t(n_vocab)) {
    validate(options);
    if (options.temperature > 0) {  // a draw ranks the vocabulary (rank_all)
        rank_keys_.resize(size_t(2 * n_vocab));
        rank_order_.resize(size_t(n_vocab));
        rank_counts_.resize(size_t(kRankPasses * kRankDigits));
    }
}

double Sampler::next_uniform() {
    // splitmix64: a counter-based generator whose whole state is one integer, so snapshots are trivial.
    uint64_t z = (rng_state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return double(z >> 11) * 0x1.0p-53;
}

TokenId Sampler::sample(const float* logits) {
    const int64_t V = int64_t(probs_.size());
    std::copy(logits, logits + V, logits_.begin());
    const bool greedy = options_.temperature == 0.0;
    const double t = greedy ? 1.0 : options_.temperature;
    // Greedy: the first index of the largest logit (what argmax in numpy/torch returns).
    const TokenId best = first_argmax(logits, V);
    // With S = Σ e^z = c + B (c logits at the maximum, B the rest), p = e^z / S and -Σ p·log p is
    // log S - Σ e^z·z / S = log c + log1p(B / c) + |Σ e^z·z| / S: two positive terms, no logarithm per
    // token, and a sharp distribution's entropy (1e-10 nats) keeps its relative precision.
    const ExpSums e = t == 1.0 ? exp_sums<false>(probs_.data(), logits, V, logits[best], t)
                               : exp_sums<true>(probs_.data(), logits, V, logits[best], t);
    const double sum = double(e.n_max) + e.below;
    entropy_ = std::log(double(e.n_max)) + std::log1p(e.below / double(e.n_max)) - e.weighted / sum;
    // A greedy choice needs no probabilities: top() divides the few it reports, to the same bits.
    norm_ = sum;
    if (greedy) return best;
    for (int64_t i = 0; i < V; ++i) probs_[size_t(i)] /= sum;
    norm_ = 1.0;

    // Candidates in descending probability (ties: lower id first), cut by top-k, then by top-p.
    int64_t n_keep = V;
    if (options_.top_k > 0 && options_.top_k < V) {
        n_keep = options_.top_k;
        best_ids(order_.data(), probs_.data(), V, n_keep);
    } else {
        rank_all(order_.data(), probs_.data(), V, rank_keys_.data(), rank_order_.data(), rank_counts_.data());
    }
    if (options_.top_p < 1.0) {
        double kept = 0.0, total = 0.0;
        for (int64_t i = 0; i < n_keep; ++i) total += probs_[size_t(order_[size_t(i)])];
        int64_t n = 0;
        while (n < n_keep) {
            kept += probs_[size_t(order_[size_t(n++)])];
            if (kept >= options_.top_p * total) break;
        }
        n_keep = n;
    }
    double mass = 0.0;
    for (int64_t i = 0; i < n_keep; ++i) mass += probs_[size_t(order_[size_t(i)])];
    double u = next_uniform() * mass;
    for (int64_t i = 0; i < n_keep; ++i) {
        u -= probs_[size_t(order_[size_t(i)])];
        if (u < 0.0) return order_[size_t(i)];
    }
    return order_[size_t(n_keep - 1)];
}

std::vector<TokenProbability> Sampler::top(int64_t k) const {
    std::vector<TokenProbability> out;
    top(k, out);
    return out;
}

void Sampler::top(int64_t k, std::vector<TokenProbability>& out) const {
    const int64_t V = int64_t(probs_.size());
    k = std::min(k, V);
    out.clear();
    if (k <= 0) return;
    best_ids(ranked_.data(), logits_.data(), V, k);
    for (const TokenId id : std::span(ranked_.data(), size_t(k))) out.push_back({id, float(probs_[size_t(id)] / norm_), logits_[size_t(id)]});
}

}  // namespace kvscope
