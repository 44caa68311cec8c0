// Element-wise kernels: the softmax's max and exp, layer and RMS norms, activations, the gated MLP's
// product. Each element depends only on its own value (a norm: on its own row), so long arrays are split
// over the threads freely. Functions with SIMD variants have one section per instruction set, side by
// side; the AVX-512 and AVX2 sections share one exp (exp16, and exp8 with its bits on 8 lanes), the
// portable build calls std::exp.
#include "kernels/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/thread_pool.h"
#include "kernels/lanes.h"
#include "kernels/simd.h"

namespace kvscope {
namespace {

#if KVSCOPE_AVX512
// e^x = 2^n · e^r with n = round(x / ln 2), r = x - n·ln 2 in [-ln2/2, ln2/2] (ln 2 split in two parts
// so r is exact); e^r from its Taylor polynomial to degree 7 (error < 2e-8 on that interval).
inline __m512 exp16(__m512 x) {
    x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));  // below this e^x is 0 in float anyway
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 5040);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    return _mm512_scalef_ps(p, n);
}

#elif KVSCOPE_AVX2
// exp16's arithmetic on 8 lanes, with the same bits: the same range reduction and polynomial, and p·2^n
// as p·2^a·2^b (a = n >> 1, b = n − a), each factor a normal float so the product rounds once, as
// scalef does (to a subnormal, or to +inf past e^88.7). x is capped at 100 so 2^a and 2^b exist.
inline __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-104.0f)), _mm256_set1_ps(100.0f));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 5040);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 720));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m256i a = _mm256_srai_epi32(ni, 1), b = _mm256_sub_epi32(ni, a);
    auto pow2 = [](__m256i e) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(e, _mm256_set1_epi32(127)), 23)); };
    return _mm256_mul_ps(_mm256_mul_ps(p, pow2(a)), pow2(b));
}
// Lanes [i, i + count) of x through f (8 at a time; the last partial vector through a padded copy).
template <class F>
inline void map8(float* x, int64_t i0, int64_t i1, F&& f) {
    int64_t i = i0;
    for (; i + 8 <= i1; i += 8) _mm256_storeu_ps(x + i, f(_mm256_loadu_ps(x + i)));
    if (i < i1) {
        alignas(32) float tail[8] = {};
        std::memcpy(tail, x + i, size_t(i1 - i) * sizeof(float));
        _mm256_store_ps(tail, f(_mm256_load_ps(tail)));
        std::memcpy(x + i, tail, size_t(i1 - i) * sizeof(float));
    }
}
#endif

// The scan's value: m = x > m ? x : m over v[0..count) in order, from m.
inline float max_scan(const float* v, int64_t count, float m) {
    for (int64_t i = 0; i < count; ++i) m = v[i] > m ? v[i] : m;
    return m;
}

// Element-wise work on long arrays (a prefill's T x 3072 MLP activations) is split over the threads in
// whole SIMD vectors; each element still depends only on its own value.
template <class F>
void for_spans(int64_t n, F&& span) {
    constexpr int64_t kSpan = 16384;
    if (n <= kSpan) return span(0, n);
    const int64_t n_tasks = (n + kSpan - 1) / kSpan;
    ThreadPool::global().parallel_for(n_tasks, [&](int64_t t) { span(t * kSpan, std::min(n, (t + 1) * kSpan)); });
}

}  // namespace

float max_of(const float* x, int64_t n) {
#if KVSCOPE_AVX512
    __m512 m = _mm512_set1_ps(-INFINITY);
    for (int64_t i = 0; i < n; i += 16) m = _mm512_max_ps(m, _mm512_mask_loadu_ps(m, tail_mask(n - i), x + i));
    return _mm512_reduce_max_ps(m);
#elif KVSCOPE_AVX2
    // Sixteen lanes of the scan's step, x > m ? x : m (max_ps with x first), then the lanes and the tail
    // scanned: the scan's value, since equal floats have equal bits except +0 and -0, and a zero maximum
    // is rescanned for the scan's sign. The scan's serial chain took 3 % of a 2000-token prefill.
    if (n >= 16) {
        __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
        int64_t i = 0;
        for (; i + 16 <= n; i += 16) {
            m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
            m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
        }
        alignas(32) float lanes[8];
        _mm256_store_ps(lanes, _mm256_max_ps(m1, m0));
        const float m = max_scan(x + i, n - i, max_scan(lanes, 8, -INFINITY));
        if (m != 0.0f) return m;
    }
    return max_scan(x, n, -INFINITY);
#else
    return max_scan(x, n, -INFINITY);
#endif
}

void exp_in_place(float* x, int64_t n) {
#if KVSCOPE_AVX512
    for (int64_t i = 0; i < n; i += 16) {
        const __mmask16 m = tail_mask(n - i);
        _mm512_mask_storeu_ps(x + i, m, exp16(_mm512_maskz_loadu_ps(m, x + i)));
    }
#elif KVSCOPE_AVX2
    map8(x, 0, n, exp8);
#else
    for (int64_t i = 0; i < n; ++i) x[i] = std::exp(x[i]);
#endif
}

void layer_norm(float* y, const float* x, const float* gain, const float* bias, int64_t T, int64_t C,
                float eps) {
    auto rows = [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            const float* xr = x + t * C;
            float* yr = y + t * C;
            // Double accumulators: the statistics are then exact to float precision whatever C is.
            double sum = 0.0;
            for (int64_t c = 0; c < C; ++c) sum += xr[c];
            const double mean = sum / double(C);
            double sq = 0.0;
            for (int64_t c = 0; c < C; ++c) sq += (xr[c] - mean) * (xr[c] - mean);
            const float inv_std = float(1.0 / std::sqrt(sq / double(C) + double(eps)));
            const float mean_f = float(mean);
            for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - mean_f) * inv_std * gain[c] + bias[c];
        }
    };
    constexpr int64_t kRowsPerTask = 16;
    if (T < 2 * kRowsPerTask) return rows(0, T);
    ThreadPool::global().parallel_for((T + kRowsPerTask - 1) / kRowsPerTask, [&](int64_t task) {
        rows(task * kRowsPerTask, std::min(T, (task + 1) * kRowsPerTask));
    });
}

// 0.5·v·(1 + tanh(u)) = v / (1 + e^(-2u)), u = sqrt(2/pi)·(v + 0.044715·v³): the same function written
// without the cancellation 1 + tanh(u) suffers for negative u.
void gelu_tanh(float* x, int64_t n) {
    const float k = 0.7978845608028654f;  // sqrt(2/pi)
    for_spans(n, [&](int64_t i0, int64_t i1) {
#if KVSCOPE_AVX512
        const __m512 c3 = _mm512_set1_ps(0.044715f), minus_2k = _mm512_set1_ps(-2.0f * k), one = _mm512_set1_ps(1.0f);
        for (int64_t i = i0; i < i1; i += 16) {
            const __mmask16 m = tail_mask(i1 - i);
            const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
            const __m512 inner = _mm512_fmadd_ps(_mm512_mul_ps(c3, v), _mm512_mul_ps(v, v), v);  // v + c·v³
            // capped below where exp16's range reduction would meet infinity; e^150 is +inf already
            const __m512 e = exp16(_mm512_min_ps(_mm512_mul_ps(minus_2k, inner), _mm512_set1_ps(150.0f)));
            _mm512_mask_storeu_ps(x + i, m, _mm512_div_ps(v, _mm512_add_ps(one, e)));
        }
#elif KVSCOPE_AVX2
        const __m256 c3 = _mm256_set1_ps(0.044715f), minus_2k = _mm256_set1_ps(-2.0f * k), one = _mm256_set1_ps(1.0f);
        map8(x, i0, i1, [&](__m256 v) {
            const __m256 inner = _mm256_fmadd_ps(_mm256_mul_ps(c3, v), _mm256_mul_ps(v, v), v);  // v + c·v³
            return _mm256_div_ps(v, _mm256_add_ps(one, exp8(_mm256_mul_ps(minus_2k, inner))));
        });
#else
        for (int64_t i = i0; i < i1; ++i) {
            const float v = x[i];
            x[i] = v / (1.0f + std::exp(-2.0f * k * std::fma(0.044715f * v, v * v, v)));
        }
#endif
    });
}

void gelu_erf(float* x, int64_t n) {
    for_spans(n, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) x[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * 0.7071067811865476f));
    });
}

void relu(float* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

// Statistics in double, like layer_norm; the row is scaled first and the weight multiplied after, the
// order of LlamaRMSNorm.forward (weight * (x * rsqrt(variance + eps))).
void rms_norm(float* y, const float* x, const float* gain, int64_t T, int64_t C, float eps) {
    auto rows = [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            const float* xr = x + t * C;
            float* yr = y + t * C;
            double sq = 0.0;
            for (int64_t c = 0; c < C; ++c) sq += double(xr[c]) * double(xr[c]);
            const float inv_rms = float(1.0 / std::sqrt(sq / double(C) + double(eps)));
            for (int64_t c = 0; c < C; ++c) yr[c] = gain[c] * (xr[c] * inv_rms);
        }
    };
    constexpr int64_t kRowsPerTask = 16;
    if (T < 2 * kRowsPerTask) return rows(0, T);
    ThreadPool::global().parallel_for((T + kRowsPerTask - 1) / kRowsPerTask, [&](int64_t task) {
        rows(task * kRowsPerTask, std::min(T, (task + 1) * kRowsPerTask));
    });
}

namespace {
// v · sigmoid(v) = v / (1 + e^(-v)); then, with `times`, that value rounded to float times times[i].
void silu_span(float* x, const float* times, int64_t i0, int64_t i1) {
#if KVSCOPE_AVX512
    // x / (1 + e^-x) with exp16: e^-x overflows to infinity below x = -88.7 (x / inf = -0, as the
    // function tends to) and is 0 above x = 104 (x / 1 = x).
    for (int64_t i = i0; i < i1; i += 16) {
        const __mmask16 m = tail_mask(i1 - i);
        const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
        const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), v));
        __m512 out = _mm512_div_ps(v, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
        if (times) out = _mm512_mul_ps(out, _mm512_maskz_loadu_ps(m, times + i));
        _mm512_mask_storeu_ps(x + i, m, out);
    }
#elif KVSCOPE_AVX2
    map8(x, i0, i1, [](__m256 v) {
        return _mm256_div_ps(v, _mm256_add_ps(_mm256_set1_ps(1.0f), exp8(_mm256_sub_ps(_mm256_setzero_ps(), v))));
    });
    if (times)
        for (int64_t i = i0; i < i1; ++i) x[i] *= times[i];
#else
    for (int64_t i = i0; i < i1; ++i) {
        x[i] = x[i] / (1.0f + std::exp(-x[i]));
        if (times) x[i] *= times[i];
    }
#endif
}
}  // namespace

void silu(float* x, int64_t n) {
    for_spans(n, [&](int64_t i0, int64_t i1) { silu_span(x, nullptr, i0, i1); });
}

void silu_multiply(float* gate, const float* up, int64_t n) {
    for_spans(n, [&](int64_t i0, int64_t i1) { silu_span(gate, up, i0, i1); });
}

void multiply(float* y, const float* x, int64_t n) {
    for_spans(n, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) y[i] *= x[i];
    });
}

void add(float* y, const float* x, int64_t n) {
    for_spans(n, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) y[i] += x[i];
    });
}

}  // namespace kvscope
