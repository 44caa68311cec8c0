// Kernel-level checks against plain double-precision arithmetic written here.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include <unistd.h>

#include "base/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/kernels.h"
#include "kernels/machine_probe.h"
#include "kernels/quant_blocks.h"
#include "model/finite.h"

using namespace kvscope;

TEST_CASE("exp_in_place matches double-precision exp over the softmax range") {
    std::vector<float> x;
    for (double v = -110.0; v <= 0.0; v += 0.0013) x.push_back(float(v));
    x.push_back(0.0f);
    x.push_back(-0.0f);
    x.push_back(-1e-30f);
    const std::vector<float> in = x;
    exp_in_place(x.data(), int64_t(x.size()));
    double worst = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        const double want = std::exp(double(in[i]));
        if (want < 1e-37) {  // below float's normal range the result only has to be tiny and >= 0
            CHECK(x[i] >= 0.0f);
            CHECK(x[i] < 1e-36f);
            continue;
        }
        worst = std::max(worst, std::abs(x[i] - want) / want);
    }
    INFO("worst relative error " << worst);
    CHECK(worst < 4e-7);  // a few ulp of float
    CHECK(x[x.size() - 3] == 1.0f);
}

TEST_CASE("matmul_kn and matmul_nk equal a double-precision product within float rounding") {
    std::mt19937 rng(3);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (int64_t T : {1, 3, 8, 9, 13, 31}) {  // 31: matmul_nk's packed prefill path
        const int64_t K = 70, N = 37;
        std::vector<float> x(static_cast<size_t>(T * K)), w(static_cast<size_t>(K * N)), wt(w.size()),
            bias(static_cast<size_t>(N)), y(static_cast<size_t>(T * N)), y2(y.size());
        for (float& v : x) v = d(rng);
        for (float& v : w) v = d(rng);
        for (float& v : bias) v = d(rng);
        for (int64_t k = 0; k < K; ++k)
            for (int64_t n = 0; n < N; ++n) wt[size_t(n * K + k)] = w[size_t(k * N + n)];
        matmul_kn(y.data(), x.data(), w.data(), bias.data(), T, K, N);
        matmul_nk(y2.data(), x.data(), wt.data(), bias.data(), T, K, N);
        for (int64_t t = 0; t < T; ++t)
            for (int64_t n = 0; n < N; ++n) {
                double want = bias[size_t(n)], scale = std::abs(bias[size_t(n)]);
                for (int64_t k = 0; k < K; ++k) {
                    want += double(x[size_t(t * K + k)]) * w[size_t(k * N + n)];
                    scale += std::abs(double(x[size_t(t * K + k)]) * w[size_t(k * N + n)]);
                }
                INFO("T " << T << " t " << t << " n " << n);
                CHECK(std::abs(y[size_t(t * N + n)] - want) <= 1e-6 * scale);
                CHECK(std::abs(y2[size_t(t * N + n)] - want) <= 1e-6 * scale);
            }
    }
}

TEST_CASE("gelu_tanh matches the double-precision tanh formula, across thread splits") {
    std::vector<float> x;
    for (double v = -20.0; v <= 20.0; v += 0.00037) x.push_back(float(v));  // > one task's span: split
    for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 60.0f, -60.0f, 1e20f, -1e20f}) x.push_back(v);
    const std::vector<float> in = x;
    gelu_tanh(x.data(), int64_t(x.size()));
    double worst = 0, worst_tail = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        const double v = in[i];
        // 0.5·v·(1 + tanh(u)) in double, as v·(1 + tanh(u))/2 = v / (1 + e^(-2u)) so that the negative tail
        // keeps its digits (1 + tanh(u) cancels to 0 in double below v ≈ -6)
        const double u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
        const double want = u > -0.5 ? 0.5 * v * (1.0 + std::tanh(u)) : v / (1.0 + std::exp(-2.0 * u));
        INFO("x = " << in[i] << " got " << x[i] << " want " << want);
        REQUIRE(std::isfinite(x[i]));
        if (std::abs(want) < 1e-37) {  // below float's normal range: only tiny is required
            CHECK(std::abs(x[i]) < 1e-36f);
            continue;
        }
        // In the tail (|gelu| < 1e-3, v < -3.2) float rounding of the exponent's argument alone costs
        // ~1e-5 relative; there the error is measured against the size of v instead.
        if (std::abs(want) >= 1e-3) worst = std::max(worst, std::abs(x[i] - want) / std::abs(want));
        else worst_tail = std::max(worst_tail, std::abs(x[i] - want) / std::max(1.0, std::abs(v)));
    }
    INFO("worst relative error " << worst << ", worst tail error " << worst_tail);
    CHECK(worst < 2e-6);
    CHECK(worst_tail < 1e-9);
}

TEST_CASE("silu matches the double-precision x / (1 + e^-x) across its range, and its limits") {
    std::vector<float> x;
    for (double v = -120.0; v <= 120.0; v += 0.0071) x.push_back(float(v));
    for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 88.0f, -88.0f, 89.0f, -89.0f, 103.9f, 104.1f, -104.1f, 1e30f, -1e30f})
        x.push_back(v);
    const std::vector<float> in = x;
    silu(x.data(), int64_t(x.size()));
    for (size_t i = 0; i < x.size(); ++i) {
        const double v = in[i], want = v / (1.0 + std::exp(-v));
        INFO("x = " << in[i]);
        REQUIRE(std::isfinite(x[i]));
        CHECK(std::abs(x[i] - want) <= 4e-7 * std::abs(want) + 1e-35);  // below -88.7, -0 (e^-x overflows, as expf does)
    }
}

TEST_CASE("silu_multiply is silu, rounded, times up; add is y + x; bit for bit over several threads' spans") {
    std::mt19937 rng(11);
    std::normal_distribution<float> d(0.0f, 4.0f);
    const int64_t n = 3 * 16384 + 7;  // three spans and a tail
    std::vector<float> gate(static_cast<size_t>(n)), up(gate.size());
    for (float& v : gate) v = d(rng);
    for (float& v : up) v = d(rng);
    gate[5] = -100.0f, gate[6] = 100.0f, up[7] = 0.0f;
    std::vector<float> want = gate, fused = gate;
    silu(want.data(), n);
    for (size_t i = 0; i < want.size(); ++i) want[i] = want[i] * up[i];
    silu_multiply(fused.data(), up.data(), n);
    CHECK(std::memcmp(fused.data(), want.data(), want.size() * sizeof(float)) == 0);

    std::vector<float> sum = gate;
    add(sum.data(), up.data(), n);
    int64_t wrong = 0;
    for (size_t i = 0; i < sum.size(); ++i) wrong += std::memcmp(&sum[i], &(want[i] = gate[i] + up[i]), sizeof(float)) != 0;
    CHECK(wrong == 0);
}

TEST_CASE("layer_norm rows are independent of how many rows are normalised together") {
    std::mt19937 rng(5);
    std::normal_distribution<float> d(0.0f, 3.0f);
    const int64_t T = 70, C = 48;
    std::vector<float> x(size_t(T * C)), g(static_cast<size_t>(C)), b(static_cast<size_t>(C)), all(x.size()),
        one(static_cast<size_t>(C));
    for (float& v : x) v = d(rng);
    for (float& v : g) v = d(rng);
    for (float& v : b) v = d(rng);
    layer_norm(all.data(), x.data(), g.data(), b.data(), T, C, 1e-5f);
    for (int64_t t = 0; t < T; ++t) {
        layer_norm(one.data(), x.data() + t * C, g.data(), b.data(), 1, C, 1e-5f);
        CHECK(std::memcmp(one.data(), all.data() + t * C, size_t(C) * sizeof(float)) == 0);
        double mean = 0, var = 0;
        for (int64_t c = 0; c < C; ++c) mean += x[size_t(t * C + c)];
        mean /= double(C);
        for (int64_t c = 0; c < C; ++c) var += std::pow(x[size_t(t * C + c)] - mean, 2);
        var /= double(C);
        for (int64_t c = 0; c < C; ++c) {
            const double want = (x[size_t(t * C + c)] - mean) / std::sqrt(var + 1e-5) * g[size_t(c)] + b[size_t(c)];
            CHECK(std::abs(all[size_t(t * C + c)] - want) <= 1e-5 * (1.0 + std::abs(want)));
        }
    }
}

TEST_CASE("dot_rows and axpy_rows give exactly the per-row dot and axpy results, and match double sums") {
    std::mt19937 rng(9);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (int64_t D : {64, 40, 100, 7}) {
        const int64_t n = 71;
        std::vector<float> q(static_cast<size_t>(D)), store(static_cast<size_t>(n * D)), a(static_cast<size_t>(n));
        for (float& v : q) v = d(rng);
        for (float& v : store) v = d(rng);
        for (float& v : a) v = d(rng);
        std::vector<uint16_t> store16(store.size());
        for (size_t i = 0; i < store.size(); ++i) {  // the top half of each float: a bfloat16 (truncated)
            uint32_t bits;
            std::memcpy(&bits, &store[i], 4);
            store16[i] = uint16_t(bits >> 16);
        }
        std::vector<const float*> rows;
        std::vector<const uint16_t*> rows16;
        for (int64_t j = n - 1; j >= 0; --j) {  // rows in any order, as a ring's wrap would give
            rows.push_back(store.data() + j * D);
            rows16.push_back(store16.data() + j * D);
        }
        std::vector<float> scores(static_cast<size_t>(n)), scores16(scores.size());
        dot_rows(scores.data(), q.data(), rows.data(), n, D, 0.125f);
        dot_rows(scores16.data(), q.data(), rows16.data(), n, D, 0.125f);
        std::vector<float> out(static_cast<size_t>(D), 0.0f), out_one(out.size(), 0.0f), out16(out.size(), 0.0f);
        axpy_rows(out.data(), a.data(), rows.data(), n, D);
        axpy_rows(out16.data(), a.data(), rows16.data(), n, D);
        for (int64_t j = 0; j < n; ++j) {
            INFO("D " << D << " row " << j);
            const float one = dot(q.data(), rows[size_t(j)], D) * 0.125f;
            CHECK(std::memcmp(&one, &scores[size_t(j)], 4) == 0);
            const float one16 = dot(q.data(), rows16[size_t(j)], D) * 0.125f;
            CHECK(std::memcmp(&one16, &scores16[size_t(j)], 4) == 0);
            double want = 0, scale = 0;
            for (int64_t k = 0; k < D; ++k) {
                want += double(q[size_t(k)]) * rows[size_t(j)][k];
                scale += std::abs(double(q[size_t(k)]) * rows[size_t(j)][k]);
            }
            CHECK(std::abs(scores[size_t(j)] - 0.125 * want) <= 1e-6 * scale);
            axpy(out_one.data(), a[size_t(j)], rows[size_t(j)], D);
        }
        CHECK(std::memcmp(out.data(), out_one.data(), out.size() * sizeof(float)) == 0);
        for (int64_t k = 0; k < D; ++k) {
            double want = 0, want16 = 0, scale = 0;
            for (int64_t j = 0; j < n; ++j) {
                want += double(a[size_t(j)]) * rows[size_t(j)][k];
                uint32_t bits = uint32_t(rows16[size_t(j)][k]) << 16;
                float wide;
                std::memcpy(&wide, &bits, 4);
                want16 += double(a[size_t(j)]) * wide;
                scale += std::abs(double(a[size_t(j)]) * rows[size_t(j)][k]);
            }
            CHECK(std::abs(out[size_t(k)] - want) <= 1e-6 * scale);
            CHECK(std::abs(out16[size_t(k)] - want16) <= 1e-6 * scale);
        }
    }
}

namespace {

using Matmul = void (*)(float*, const float*, WeightRef, const float*, int64_t, int64_t, int64_t);

// Every row of matmul(x (T, K), weights of K x N) equals that row computed alone on one thread, bit for
// bit, for each row count in `row_counts`, on 1-3 threads, with float32 and bfloat16 weights.
void check_rows_as_alone(Matmul matmul, int64_t K, int64_t N, std::initializer_list<int64_t> row_counts, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.0f, 1.0f);
    const int64_t T_max = *std::max_element(row_counts.begin(), row_counts.end());
    std::vector<float> x(size_t(T_max * K)), w(size_t(K * N)), bias(static_cast<size_t>(N));
    for (float& v : x) v = d(rng);
    for (float& v : w) v = d(rng);
    for (float& v : bias) v = d(rng);
    std::vector<uint16_t> w16(w.size());
    for (size_t i = 0; i < w.size(); ++i) {  // the top half of each float: a bfloat16 (truncated)
        uint32_t bits;
        std::memcpy(&bits, &w[i], 4);
        w16[i] = uint16_t(bits >> 16);
    }
    const int threads_before = ThreadPool::global().n_threads();
    for (bool bf16 : {false, true}) {
        const WeightRef weights = bf16 ? WeightRef(w16.data()) : WeightRef(w.data());
        ThreadPool::global().set_threads(1);
        std::vector<float> alone(size_t(T_max * N));  // each row computed by itself, one thread
        for (int64_t t = 0; t < T_max; ++t) matmul(alone.data() + t * N, x.data() + t * K, weights, bias.data(), 1, K, N);
        for (int threads : {1, 2, 3}) {
            ThreadPool::global().set_threads(threads);
            for (int64_t T : row_counts) {
                std::vector<float> y(size_t(T * N));
                matmul(y.data(), x.data(), weights, bias.data(), T, K, N);
                INFO("K " << K << " bf16 " << bf16 << " threads " << threads << " T " << T);
                CHECK(std::memcmp(y.data(), alone.data(), y.size() * sizeof(float)) == 0);
            }
        }
    }
    ThreadPool::global().set_threads(threads_before);
}

}  // namespace

TEST_CASE("matmul_kn rows are bit-identical whatever the row count, the thread count and the weight format") {
    check_rows_as_alone(matmul_kn, 203, 150, {1, 2, 5, 8, 9, 13, 20}, 11);  // odd K: the two halves differ in length
}

TEST_CASE("matmul_nk rows are bit-identical whatever the row count, the thread count and the weight format") {
    // Prefill (24 rows and more) runs packed 6 x 4 tiles over panels of 8 weight groups, K in spans of at
    // most 768; decode reads weight rows in place. Both must give each row the same bits, or cached and
    // uncached logits would differ. N % 4 = 2: a partial weight group and a partial panel; 103 rows: 17
    // blocks and a tail; K = 203 ends in a partial k-step, 96 does not, 1100 runs two spans; at 2080 a
    // group of 4 weight rows outgrows half of L1 in both formats and batched decode also runs K in spans.
    for (int64_t K : {203, 96, 1100, 2080}) check_rows_as_alone(matmul_nk, K, 150, {1, 5, 8, 23, 24, 25, 31, 96, 103}, 12);
}

TEST_CASE("matmul_nk_shared gives every matrix exactly its own matmul_nk result") {
    // q, k and v (or gate and up) in one fork: the groups of all matrices are split between tasks as one
    // list, so a task may end inside one matrix and the next begin inside another. Five targets: more than
    // one fork holds; mixed float32 / bfloat16: one fork each. Widths 150, 17, 6, 33, 5: partial groups.
    std::mt19937 rng(21);
    std::normal_distribution<float> d(0.0f, 1.0f);
    const int64_t K = 96, T_max = 31;
    const std::vector<int64_t> widths = {150, 17, 6, 33, 5};
    std::vector<float> x(size_t(T_max * K));
    for (float& v : x) v = d(rng);
    std::vector<std::vector<float>> w(widths.size()), bias(widths.size());
    std::vector<std::vector<uint16_t>> w16(widths.size());
    for (size_t j = 0; j < widths.size(); ++j) {
        w[j].resize(size_t(widths[j] * K));
        bias[j].resize(size_t(widths[j]));
        for (float& v : w[j]) v = d(rng);
        for (float& v : bias[j]) v = d(rng);
        for (float v : w[j]) {
            uint32_t bits;
            std::memcpy(&bits, &v, 4);
            w16[j].push_back(uint16_t(bits >> 16));
        }
    }
    const int threads_before = ThreadPool::global().n_threads();
    for (int storage : {0, 1, 2})  // float32, bfloat16, alternating
    for (int threads : {1, 2, 3})
    for (int64_t T : {1, 3, 8, 24, 31}) {
        ThreadPool::global().set_threads(threads);
        std::vector<std::vector<float>> shared(widths.size()), alone(widths.size());
        std::vector<MatmulTarget> targets;
        for (size_t j = 0; j < widths.size(); ++j) {
            const bool bf16 = storage == 1 || (storage == 2 && j % 2 == 1);
            const WeightRef weights = bf16 ? WeightRef(w16[j].data()) : WeightRef(w[j].data());
            const float* b = j == 2 ? nullptr : bias[j].data();
            shared[j].assign(size_t(T * widths[j]), -1.0f);
            alone[j].assign(size_t(T * widths[j]), -2.0f);
            matmul_nk(alone[j].data(), x.data(), weights, b, T, K, widths[j]);
            targets.push_back({shared[j].data(), weights, b, widths[j]});
        }
        matmul_nk_shared(x.data(), T, K, targets);
        for (size_t j = 0; j < widths.size(); ++j) {
            INFO("storage " << storage << " threads " << threads << " T " << T << " matrix " << j);
            CHECK(std::memcmp(shared[j].data(), alone[j].data(), shared[j].size() * sizeof(float)) == 0);
        }
    }
    ThreadPool::global().set_threads(threads_before);
}

namespace {

// n_blocks random blocks of format f: random integer bytes, and float16 scales (and minimums) that are
// finite: normal values of either sign, and now and then a subnormal, the largest float16 or a zero.
std::vector<std::byte> random_blocks(BlockFormat f, int64_t n_blocks, std::mt19937& rng) {
    const BlockLayout layout = block_layout(f);
    std::vector<std::byte> out(size_t(n_blocks * layout.bytes));
    std::uniform_int_distribution<int> byte(0, 255), pick(0, 9), special_index(0, 7), normal(0, 0x1FFF);
    const uint16_t special[] = {0x0001, 0x03FF, 0x0200, 0x7BFF, 0x0000, 0x8000, 0x8001, 0x0400};
    const bool two = f == BlockFormat::Q4_1 || f == BlockFormat::Q5_1 || f == BlockFormat::Q4_K || f == BlockFormat::Q5_K;
    const int64_t at = f == BlockFormat::Q6_K ? 208 : 0;
    for (std::byte& v : out) v = std::byte(byte(rng));
    for (int64_t b = 0; b < n_blocks; ++b)
        for (int64_t s = 0; s < (two ? 2 : 1); ++s) {
            const int p = pick(rng);
            const uint16_t h = p < 2 ? special[special_index(rng)] : uint16_t(0x1C00 + normal(rng) + (p == 2 ? 0x8000 : 0));
            std::memcpy(out.data() + b * layout.bytes + at + 2 * s, &h, 2);
        }
    return out;
}

bool dotted_in_integers(BlockFormat f) { return f != BlockFormat::Q4_1 && f != BlockFormat::Q5_1; }

float half_value(const std::byte* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    const int e = (h >> 10) & 31, m = h & 1023;
    const double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
    return float(h & 0x8000 ? -v : v);  // finite scales only (random_blocks)
}

// x's 256 values as the Q8_K integers block_rows.h states, written from that statement: q and d, the sums
// left to the callers.
struct Q8K {
    int q[256];
    float d;
};
Q8K quantized(const float* x, int n = 256) {
    Q8K out{};
    float amax = 0.0f;
    for (int k = 0; k < n; ++k) amax = std::max(amax, std::fabs(x[k]));
    if (amax < 0x1p-120f) return out;
    out.d = amax / 127.0f;
    const float scale = 127.0f / amax;
    for (int k = 0; k < n; ++k) out.q[k] = int(std::nearbyint(x[k] * scale));
    return out;
}

// Weight k's small integer in a Q4_0, Q5_0 or Q8_0 block, from ggml's layout (quant_blocks.h).
int block32_weight(BlockFormat f, const unsigned char* b, int k) {
    if (f == BlockFormat::Q8_0) return static_cast<signed char>(b[2 + k]);
    if (f == BlockFormat::Q4_0) return (b[2 + k % 16] >> (4 * (k / 16)) & 15) - 8;
    const uint32_t high = uint32_t(b[2]) | uint32_t(b[3]) << 8 | uint32_t(b[4]) << 16 | uint32_t(b[5]) << 24;
    return ((b[6 + k % 16] >> (4 * (k / 16)) & 15) | int(high >> k & 1) << 4) - 16;
}

// One K-format super-block's small integers, weight by weight from ggml's layout: q_k, the scale (and min)
// of weight k's sub-block.
void super_block_weight(BlockFormat f, const unsigned char* b, int k, int& q, int& scale, int& min) {
    if (f == BlockFormat::Q6_K) {
        const int n = k / 128, s = k % 128 / 32, l = k % 32;
        const int ql = b[64 * n + 32 * (s % 2) + l] >> (4 * (s / 2)) & 15, qh = b[128 + 32 * n + l] >> (2 * s) & 3;
        q = (ql | qh << 4) - 32;
        scale = static_cast<signed char>(b[192 + k / 16]);
        min = 0;
        return;
    }
    const unsigned char* sm = b + 4;
    const int j = k / 32, l = k % 32;
    const unsigned char* qs = b + (f == BlockFormat::Q5_K ? 48 : 16);
    q = qs[32 * (j / 2) + l] >> (4 * (j % 2)) & 15;
    if (f == BlockFormat::Q5_K) q |= (b[16 + l] >> j & 1) << 4;
    scale = j < 4 ? sm[j] & 63 : (sm[j + 4] & 15) | (sm[j - 4] >> 6) << 4;
    min = j < 4 ? sm[j + 4] & 63 : (sm[j + 4] >> 4) | (sm[j] >> 6) << 4;
}

// y (T, N) = x · wᵀ + bias for an integer-dotted matrix as block_rows.h states it: exact integers per block or
// super-block (int64 here), then acc = fma(d · dx, i, acc) and, with mins, acc = fma(-(dmin · dx), m, acc).
std::vector<float> integer_product(BlockFormat f, const std::byte* blocks, const float* x, const float* bias, int64_t T,
                                   int64_t K, int64_t N) {
    const int64_t bytes = block_layout(f).bytes;
    std::vector<float> y(size_t(T * N));
    if (block_layout(f).elements == 32) {  // per block: an exact integer against x quantized per 32, then one fma
        const int64_t KB = K / 32;
        for (int64_t t = 0; t < T; ++t)
            for (int64_t n = 0; n < N; ++n) {
                float acc = 0.0f;
                for (int64_t s = 0; s < KB; ++s) {
                    const Q8K xq = quantized(x + t * K + 32 * s, 32);
                    const auto* b = reinterpret_cast<const unsigned char*>(blocks) + (n * KB + s) * bytes;
                    int64_t i = 0;
                    for (int k = 0; k < 32; ++k) i += int64_t(block32_weight(f, b, k)) * xq.q[k];
                    acc = std::fma(half_value(reinterpret_cast<const std::byte*>(b)) * xq.d, float(i), acc);
                }
                y[size_t(t * N + n)] = acc + (bias ? bias[n] : 0.0f);
            }
        return y;
    }
    const int64_t KB = K / 256;
    for (int64_t t = 0; t < T; ++t) {
        std::vector<Q8K> xq;
        for (int64_t s = 0; s < KB; ++s) xq.push_back(quantized(x + t * K + 256 * s));
        for (int64_t n = 0; n < N; ++n) {
            float acc = 0.0f;
            for (int64_t s = 0; s < KB; ++s) {
                const auto* b = reinterpret_cast<const unsigned char*>(blocks) + (n * KB + s) * bytes;
                int64_t i = 0, m = 0;
                for (int k = 0; k < 256; ++k) {
                    int q = 0, scale = 0, min = 0;
                    super_block_weight(f, b, k, q, scale, min);
                    i += int64_t(scale) * q * xq[size_t(s)].q[k];
                    m += int64_t(min) * xq[size_t(s)].q[k];
                }
                const auto* p = reinterpret_cast<const std::byte*>(b);
                const float d = half_value(p + (f == BlockFormat::Q6_K ? 208 : 0)), dx = xq[size_t(s)].d;
                acc = std::fma(d * dx, float(i), acc);
                if (f != BlockFormat::Q6_K) acc = std::fma(-(half_value(p + 2) * dx), float(m), acc);
            }
            y[size_t(t * N + n)] = acc + (bias ? bias[n] : 0.0f);
        }
    }
    return y;
}

constexpr BlockFormat kAllFormats[] = {BlockFormat::Q4_0, BlockFormat::Q4_1, BlockFormat::Q5_0, BlockFormat::Q5_1,
                                       BlockFormat::Q8_0, BlockFormat::Q4_K, BlockFormat::Q5_K, BlockFormat::Q6_K};

}  // namespace

TEST_CASE("the vectorized block dequantizers give the reference's bits, block for block") {
    // dequantize_blocks runs this build's AVX-512 or AVX2 kernel where there is one (all formats but Q5_K);
    // dequantize_reference is ggml's reference order, checked against numpy in gguf.tests.cpp.
    std::mt19937 rng(49);
    for (BlockFormat f : kAllFormats) {
        const int64_t n = 64 * block_layout(f).elements;
        const std::vector<std::byte> blocks = random_blocks(f, 64, rng);
        std::vector<float> want(static_cast<size_t>(n)), got(static_cast<size_t>(n), -1.0f);
        dequantize_reference(f, blocks.data(), n, want.data());
        dequantize_blocks(f, blocks.data(), n, got.data());
        INFO(block_layout(f).name);
        CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
        CHECK(first_non_finite_block(f, blocks.data(), n) == -1);
        CHECK(all_finite(want.data(), n));
    }
}

TEST_CASE("matrices of blocks give the bits of their dequantized float32 copy, or of the integer dots, whatever the rows, threads and targets") {
    // The kernels dequantize into L1 (decode), into a group's float copy (small batches) or into the packed
    // panels (prefill); each must equal matmul_nk on the float32 matrix the reference dequantizer makes of the
    // same blocks. The K formats are dotted in integers against x as Q8_K: integer_product's bits, for every
    // T (a decode row is a prefill row). Scales include float16 subnormals, the largest float16 and both
    // zeros; the longest K runs two prefill spans.
    std::mt19937 rng(48);
    std::normal_distribution<float> d(0.0f, 1.0f);
    const int threads_before = ThreadPool::global().n_threads();
    for (BlockFormat f : kAllFormats) {
        const BlockLayout layout = block_layout(f);
        const std::vector<int64_t> widths = layout.elements == 32 ? std::vector<int64_t>{32, 96, 576, 1088}
                                                                  : std::vector<int64_t>{256, 768, 1280};
        for (int64_t K : widths) {
            const int64_t N = 150, T_max = 31, row_bytes = K / layout.elements * layout.bytes;
            const std::vector<std::byte> blocks = random_blocks(f, N * K / layout.elements, rng);
            std::vector<float> w(size_t(N * K)), x(size_t(T_max * K)), bias(static_cast<size_t>(N));
            dequantize_reference(f, blocks.data(), N * K, w.data());
            for (float& v : x) v = d(rng);
            for (float& v : bias) v = d(rng);
            for (int threads : {1, 2, 3})
                for (int64_t T : {1, 2, 3, 5, 8, 23, 24, 25, 31})
                    for (bool with_bias : {false, true}) {
                        ThreadPool::global().set_threads(threads);
                        std::vector<float> want(size_t(T * N)), got(size_t(T * N), -1.0f);
                        const float* b = with_bias ? bias.data() : nullptr;
                        if (dotted_in_integers(f)) want = integer_product(f, blocks.data(), x.data(), b, T, K, N);
                        else matmul_nk(want.data(), x.data(), WeightRef(w.data()), b, T, K, N);
                        matmul_nk(got.data(), x.data(), WeightRef(BlockMatrix{f, blocks.data()}), b, T, K, N);
                        INFO(layout.name << " K " << K << " threads " << threads << " T " << T << " bias " << with_bias);
                        CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
                    }
            // Several matrices in one fork (q, k, v), this format and Q6_K mixed as Q4_K_M files mix them: each
            // gets its own result.
            ThreadPool::global().set_threads(2);
            const std::vector<std::byte> other = random_blocks(BlockFormat::Q6_K, N * K / 256, rng);
            for (int64_t T : {1, 5, 24}) {
                const int64_t widths3[3] = {150, 37, 6};
                std::vector<std::vector<float>> shared(3), alone(3);
                std::vector<MatmulTarget> targets;
                for (size_t j = 0; j < 3; ++j) {
                    shared[j].assign(size_t(T * widths3[j]), -1.0f);
                    alone[j].assign(size_t(T * widths3[j]), -2.0f);
                    const int64_t rows_n = std::min(widths3[j], N - int64_t(j) * 2);
                    // overlapping row ranges of one matrix; the middle one Q6_K where rows of 256 allow it
                    const BlockMatrix m = j == 1 && K % 256 == 0 ? BlockMatrix{BlockFormat::Q6_K, other.data() + 2 * (K / 256) * 210}
                                                                  : BlockMatrix{f, blocks.data() + int64_t(j) * 2 * row_bytes};
                    matmul_nk(alone[j].data(), x.data(), WeightRef(m), bias.data(), T, K, rows_n);
                    targets.push_back({shared[j].data(), WeightRef(m), bias.data(), rows_n});
                }
                matmul_nk_shared(x.data(), T, K, targets);
                for (size_t j = 0; j < 3; ++j) {
                    INFO(layout.name << " K " << K << " shared T " << T << " matrix " << j);
                    CHECK(std::memcmp(shared[j].data(), alone[j].data(), size_t(T * targets[j].N) * sizeof(float)) == 0);
                }
            }
        }
    }
    ThreadPool::global().set_threads(threads_before);
}

TEST_CASE("matrices packed in panels at load give the integer dots' bits, whatever the rows, threads and targets") {
    // pack_panels reorders a Q4_0, Q8_0, Q4_K or Q6_K matrix in place (quant_blocks.h: BlockOrder::Panels); every T
    // then runs on the panels, decode too. The results must be integer_product's on the blocks as the file has
    // them, alone and in a fork beside a matrix in rows and a Q6_K one. T = 31 runs Q4_K's AMX tile of 16 rows where
    // the build and the kernel allow it (amx.h), then the vpdpbusd tiles of 8, 4 and 3.
    std::mt19937 rng(51);
    std::normal_distribution<float> d(0.0f, 1.0f);
    const int threads_before = ThreadPool::global().n_threads();
    for (BlockFormat f : {BlockFormat::Q4_0, BlockFormat::Q8_0, BlockFormat::Q4_K, BlockFormat::Q6_K}) {
        const int64_t R = panel_rows(f);
        if (R == 0) continue;  // the portable build keeps rows (and AVX2 the K formats)
        const BlockLayout layout = block_layout(f);
        const std::vector<int64_t> widths = layout.elements == 32 ? std::vector<int64_t>{32, 96, 512, 576, 1088}
                                                                  : std::vector<int64_t>{256, 512, 2304};
        for (int64_t K : widths) {
            const int64_t N = 5 * R, T_max = 31;
            const std::vector<std::byte> blocks = random_blocks(f, N * K / layout.elements, rng);
            std::vector<std::byte> panels = blocks;
            pack_panels(panels.data(), f, N, K);
            CHECK(panels != blocks);
            const int64_t row_bytes = K / layout.elements * layout.bytes;
            std::vector<std::byte> row(static_cast<size_t>(row_bytes));
            bool rows_back = true;  // an embedding lookup unpacks a row: the file's bytes again
            for (int64_t n = 0; n < N; ++n) {
                panel_row_blocks(row.data(), f, panels.data(), K, n);
                rows_back = rows_back && std::memcmp(row.data(), blocks.data() + n * row_bytes, size_t(row_bytes)) == 0;
            }
            CHECK(rows_back);
            const BlockMatrix packed{f, panels.data(), BlockOrder::Panels};
            std::vector<float> x(size_t(T_max * K)), bias(static_cast<size_t>(N));
            for (float& v : x) v = d(rng);
            for (float& v : bias) v = d(rng);
            for (int threads : {1, 2, 3})
                for (int64_t T : {1, 2, 3, 5, 6, 7, 8, 13, 31})
                    for (bool with_bias : {false, true}) {
                        ThreadPool::global().set_threads(threads);
                        const float* b = with_bias ? bias.data() : nullptr;
                        const std::vector<float> want = integer_product(f, blocks.data(), x.data(), b, T, K, N);
                        std::vector<float> got(size_t(T * N), -1.0f);
                        matmul_nk(got.data(), x.data(), WeightRef(packed), b, T, K, N);
                        INFO(layout.name << " K " << K << " threads " << threads << " T " << T << " bias " << with_bias);
                        CHECK(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0);
                    }
            ThreadPool::global().set_threads(2);
            const std::vector<std::byte> q6 = random_blocks(BlockFormat::Q6_K, 64 * ((K + 255) / 256), rng);
            for (int64_t T : {1, 4, 9}) {
                std::vector<float> in_panels(size_t(T * N), -1.0f), in_rows(size_t(T * 3), -1.0f), q6_out(size_t(T * 64), -1.0f);
                std::vector<MatmulTarget> targets{{in_panels.data(), WeightRef(packed), bias.data(), N},
                                                  {in_rows.data(), WeightRef(BlockMatrix{f, blocks.data()}), nullptr, 3}};
                const bool with_q6 = K % 256 == 0;
                if (with_q6) targets.push_back({q6_out.data(), WeightRef(BlockMatrix{BlockFormat::Q6_K, q6.data()}), nullptr, 64});
                matmul_nk_shared(x.data(), T, K, targets);
                INFO(layout.name << " K " << K << " shared T " << T);
                const std::vector<float> want = integer_product(f, blocks.data(), x.data(), bias.data(), T, K, N);
                CHECK(std::memcmp(in_panels.data(), want.data(), want.size() * sizeof(float)) == 0);
                const std::vector<float> want_rows = integer_product(f, blocks.data(), x.data(), nullptr, T, K, 3);
                CHECK(std::memcmp(in_rows.data(), want_rows.data(), want_rows.size() * sizeof(float)) == 0);
                if (with_q6) {
                    const std::vector<float> want_q6 = integer_product(BlockFormat::Q6_K, q6.data(), x.data(), nullptr, T, K, 64);
                    CHECK(std::memcmp(q6_out.data(), want_q6.data(), want_q6.size() * sizeof(float)) == 0);
                }
            }
        }
    }
    ThreadPool::global().set_threads(threads_before);
}

TEST_CASE("quantize_q8k gives the stated integers, scale and sums; zero, tiny and non-finite runs of x too") {
    std::mt19937 rng(50);
    std::normal_distribution<float> d(0.0f, 1.0f);
    std::vector<float> x(256 * 8);
    for (float& v : x) v = d(rng) * 3.0f;
    for (int k = 256; k < 512; ++k) x[size_t(k)] = 0.0f;                  // run 1: zeros
    for (int k = 512; k < 768; ++k) x[size_t(k)] = 0x1p-126f * float(k % 7);  // run 2: below 2^-120
    x[800] = -x[800] * 1e30f;                                              // run 3: one huge value
    x[5] = 127.0f, x[6] = -127.0f;                                          // run 0: its own amax
    std::vector<float> with_nan = x, with_inf = x;
    with_nan[1100] = NAN, with_inf[1600] = -INFINITY;  // runs 4 and 6
    for (const std::vector<float>* input : {&x, &with_nan, &with_inf}) {
        std::vector<Q8KBlock> got(8);
        quantize_q8k(got.data(), input->data(), 2048);
        for (int s = 0; s < 8; ++s) {
            INFO("run " << s);
            const float* xs = input->data() + 256 * s;
            if (!std::all_of(xs, xs + 256, [](float v) { return std::isfinite(v); })) {
                CHECK(std::isnan(got[size_t(s)].d));
                CHECK(std::all_of(got[size_t(s)].q, got[size_t(s)].q + 256, [](int8_t q) { return q == 0; }));
                continue;
            }
            const Q8K want = quantized(xs);
            CHECK(std::memcmp(&got[size_t(s)].d, &want.d, sizeof(float)) == 0);
            bool same = true;
            for (int k = 0; k < 256; ++k) same = same && got[size_t(s)].q[k] == want.q[k] && std::abs(want.q[k]) <= 127;
            CHECK(same);
            for (int g = 0; g < 16; ++g) {
                int sum = 0;
                for (int k = 16 * g; k < 16 * g + 16; ++k) sum += want.q[k];
                CHECK(got[size_t(s)].sums[g] == sum);
            }
            for (int j = 0; j < 8; ++j) {
                int sum = 0;
                for (int k = 32 * j; k < 32 * j + 32; ++k) sum += want.q[k];
                CHECK(got[size_t(s)].sums32[j] == sum);
            }
        }
    }
    std::vector<Q8KBlock> run(8);
    quantize_q8k(run.data(), x.data(), 2048);
    CHECK(run[1].d == 0.0f);
    CHECK(run[2].d == 0.0f);
    CHECK(run[0].q[5] == 127);
    CHECK(run[0].q[6] == -127);
}

TEST_CASE("quantize_x8 gives each 32 values the stated integers, scale and sum; zero, tiny and non-finite blocks too") {
    std::mt19937 rng(52);
    std::normal_distribution<float> d(0.0f, 1.0f);
    const int64_t K = 512, T = 3, KB = K / 32;
    std::vector<float> x(size_t(T * K));
    for (float& v : x) v = d(rng) * 3.0f;
    for (int k = 32; k < 64; ++k) x[size_t(k)] = 0.0f;                        // row 0, block 1: zeros
    for (int k = 64; k < 96; ++k) x[size_t(k)] = 0x1p-126f * float(k % 7);      // block 2: below 2^-120
    x[100] = -x[100] * 1e30f;                                                  // block 3: one huge value
    x[5] = 127.0f, x[6] = -127.0f;                                              // block 0: its own amax
    x[size_t(K + 200)] = NAN, x[size_t(2 * K + 511)] = INFINITY;               // row 1 block 6, row 2 block 15
    std::vector<int8_t> q(size_t(T * K), 99);
    std::vector<float> scales(size_t(T * KB), -1.0f);
    std::vector<int32_t> sums(size_t(T * KB), -1);
    const X8Rows rows{q.data(), scales.data(), sums.data(), K};
    for (int64_t t = 0; t < T; ++t) quantize_x8(rows, t, x.data() + t * K, K);
    for (int64_t t = 0; t < T; ++t)
        for (int64_t b = 0; b < KB; ++b) {
            INFO("row " << t << " block " << b);
            const float* xs = x.data() + t * K + 32 * b;
            const int8_t* got = q.data() + t * K + 32 * b;
            const size_t at = size_t(t * KB + b);
            if (!std::all_of(xs, xs + 32, [](float v) { return std::isfinite(v); })) {
                CHECK(std::isnan(scales[at]));
                CHECK(std::all_of(got, got + 32, [](int8_t v) { return v == 0; }));
                CHECK(sums[at] == 0);
                continue;
            }
            const Q8K want = quantized(xs, 32);
            CHECK(std::memcmp(&scales[at], &want.d, sizeof(float)) == 0);
            int sum = 0;
            bool same = true;
            for (int k = 0; k < 32; ++k) same = same && got[k] == want.q[k] && std::abs(want.q[k]) <= 127, sum += want.q[k];
            CHECK(same);
            CHECK(sums[at] == sum);
        }
    CHECK(scales[1] == 0.0f);
    CHECK(scales[2] == 0.0f);
    CHECK(q[5] == 127);
    CHECK(q[6] == -127);
    CHECK(std::isnan(scales[size_t(KB + 6)]));
    CHECK(std::isnan(scales[size_t(2 * KB + 15)]));
}

TEST_CASE("the integer dots are the float product but for x's rounding to 8 bits; x not finite gives NaN") {
    // |y - Σ_k w_k x_k| <= Σ_k |w_k| · dx / 2 (each x_k is off by at most half its run's step dx), with w the
    // reference dequantizer's weights and the sum in double; plus float rounding, a few units in the last
    // place of the largest partial sums.
    std::mt19937 rng(51);
    std::normal_distribution<float> d(0.0f, 1.0f);
    const int64_t K = 1024, N = 40, T = 3;
    for (BlockFormat f : {BlockFormat::Q4_0, BlockFormat::Q5_0, BlockFormat::Q8_0, BlockFormat::Q4_K, BlockFormat::Q5_K, BlockFormat::Q6_K}) {
        const int run = int(block_layout(f).elements);  // x is quantized per 32 values for Q4_0 .. Q8_0, per 256 for the K formats
        std::vector<std::byte> blocks = random_blocks(f, N * K / run, rng);
        std::vector<float> w(size_t(N * K)), x(size_t(T * K)), y(size_t(T * N));
        dequantize_reference(f, blocks.data(), N * K, w.data());
        for (float& v : x) v = d(rng);
        matmul_nk(y.data(), x.data(), WeightRef(BlockMatrix{f, blocks.data()}), nullptr, T, K, N);
        double worst = 0.0;
        for (int64_t t = 0; t < T; ++t)
            for (int64_t n = 0; n < N; ++n) {
                double exact = 0.0, bound = 0.0, size = 0.0;
                for (int64_t s = 0; s < K / run; ++s) {
                    const Q8K q = quantized(x.data() + t * K + run * s, run);
                    for (int64_t k = run * s; k < run * s + run; ++k) {
                        const double wk = w[size_t(n * K + k)];
                        exact += wk * x[size_t(t * K + k)];
                        bound += std::fabs(wk) * q.d / 2;
                        size += std::fabs(wk * x[size_t(t * K + k)]);
                    }
                }
                const double error = std::fabs(y[size_t(t * N + n)] - exact);
                INFO(block_layout(f).name << " t " << t << " n " << n << " error " << error << " bound " << bound);
                CHECK(error <= bound + 1e-5 * size);
                worst = std::max(worst, error / (bound + 1e-30));
            }
        CHECK(worst > 0.01);  // the bound is not vacuous: some output comes near it
        x[size_t(K + 300)] = NAN;  // row 1, run 1
        matmul_nk(y.data(), x.data(), WeightRef(BlockMatrix{f, blocks.data()}), nullptr, T, K, N);
        for (int64_t n = 0; n < N; ++n) {
            CHECK(std::isfinite(y[size_t(n)]));
            CHECK(std::isnan(y[size_t(N + n)]));
        }
    }
}

TEST_CASE("matmul_nk's outputs are dot products: 16 lane chains reduced as a tree, bit for bit") {
    // Each output is Σ_k x[k]·w[n][k] with lane l summing k ≡ l (mod 16) in k order (fma), then the lanes
    // reduced as _mm512_reduce_add_ps pairs them (l + l+8, then +4, +2, +1), written out here for every
    // build; dot() is the same sum.
    // bfloat16 weights (AVX2 widens 16 at a time as even and odd halves) must give the same sums as their
    // float32 values.
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (bool bf16 : {false, true})
    for (int64_t T : {1, 6, 31})  // 1: decode; 6: batched decode; 31: the packed prefill tiles
    for (int64_t K : {7, 16, 203, 576, 2080}) {  // 2080: batched decode runs K in spans
        const int64_t N = 11;
        std::vector<float> x(static_cast<size_t>(T * K)), w(static_cast<size_t>(N * K)), bias(static_cast<size_t>(N)),
            y(static_cast<size_t>(T * N));
        std::vector<uint16_t> w16(w.size());
        for (float& v : x) v = u(rng);
        for (size_t i = 0; i < w.size(); ++i) {
            w[i] = u(rng);
            uint32_t bits;
            std::memcpy(&bits, &w[i], 4);
            w16[i] = uint16_t(bits >> 16);
            bits &= 0xFFFF0000u;  // the float32 value of that bfloat16
            std::memcpy(&w[i], &bits, 4);
        }
        for (float& v : bias) v = u(rng);
        matmul_nk(y.data(), x.data(), bf16 ? WeightRef(w16.data()) : WeightRef(w.data()), bias.data(), T, K, N);
        for (int64_t t = 0; t < T; ++t)
            for (int64_t n = 0; n < N; ++n) {
                INFO((bf16 ? "bf16, " : "f32, ") << T << " rows, K " << K << ", row " << t << ", column " << n);
                const float got = y[size_t(t * N + n)];
                CHECK(got == dot(x.data() + t * K, w.data() + n * K, K) + bias[size_t(n)]);
                float lanes[16] = {};
                for (int64_t k = 0; k < K; ++k)
                    lanes[k % 16] = std::fma(x[size_t(t * K + k)], w[size_t(n * K + k)], lanes[k % 16]);
                const float l8[8] = {lanes[0] + lanes[8], lanes[1] + lanes[9], lanes[2] + lanes[10], lanes[3] + lanes[11],
                                     lanes[4] + lanes[12], lanes[5] + lanes[13], lanes[6] + lanes[14], lanes[7] + lanes[15]};
                const float l4[4] = {l8[0] + l8[4], l8[1] + l8[5], l8[2] + l8[6], l8[3] + l8[7]};
                const float sum = (l4[0] + l4[2]) + (l4[1] + l4[3]);
                CHECK(got == sum + bias[size_t(n)]);
            }
    }
}

TEST_CASE("off AVX-512, matmul_kn follows the portable order bit for bit: two fma chains over k, then the bias") {
    // Each output: first = the fma chain over k < K/2, second = over the rest, (first + second) + bias.
    // The AVX-512 kernels split the same way (rows bit-identical is checked above); this pins the order
    // for the portable code and the AVX2 kernels, for the few-row (streamed) and many-row (tiled) paths.
#if !defined(__AVX512F__)
    std::mt19937 rng(9);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t T : {1, 3, 8, 9, 20})
        for (int64_t K : {7, 64, 203}) {
            const int64_t N = 75;
            std::vector<float> x(static_cast<size_t>(T * K)), w(static_cast<size_t>(K * N)), bias(static_cast<size_t>(N)),
                y(static_cast<size_t>(T * N));
            for (float& v : x) v = u(rng);
            for (float& v : w) v = u(rng);
            for (float& v : bias) v = u(rng);
            matmul_kn(y.data(), x.data(), w.data(), bias.data(), T, K, N);
            int64_t differing = 0;
            for (int64_t t = 0; t < T; ++t)
                for (int64_t n = 0; n < N; ++n) {
                    float first = 0.0f, second = 0.0f;
                    for (int64_t k = 0; k < K / 2; ++k) first = std::fma(x[size_t(t * K + k)], w[size_t(k * N + n)], first);
                    for (int64_t k = K / 2; k < K; ++k) second = std::fma(x[size_t(t * K + k)], w[size_t(k * N + n)], second);
                    differing += y[size_t(t * N + n)] != (first + second) + bias[size_t(n)];
                }
            INFO("T " << T << ", K " << K);
            CHECK(differing == 0);
        }
#else
    SUCCEED("AVX-512 build: the order is checked through row determinism above");
#endif
}

TEST_CASE("axpy_rows_heads gives each head exactly axpy_rows's result") {
    // Grouped-query prefill accumulates the values of one K/V head for G query heads at once; each head
    // must get the bits its own axpy_rows would, or grouped and per-head attention would differ.
    std::mt19937 rng(13);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (int64_t D : {8, 45, 64, 72, 128})
        for (int64_t G : {1, 2, 3, 4}) {  // G <= 4 (kernels.h); attend_group passes at most 4
            const int64_t n = 37, stride = n + 3;
            std::vector<float> values(static_cast<size_t>(n * D)), a(static_cast<size_t>(G * stride)),
                y0(static_cast<size_t>(G * D)), y(static_cast<size_t>(G * D)), want(static_cast<size_t>(G * D));
            for (float& v : values) v = u(rng);
            for (float& v : a) v = u(rng);
            for (float& v : y0) v = u(rng);
            std::vector<const float*> rows;
            for (int64_t j = 0; j < n; ++j) rows.push_back(values.data() + j * D);
            y = y0;
            want = y0;
            axpy_rows_heads(y.data(), a.data(), stride, G, rows.data(), n, D);
            for (int64_t g = 0; g < G; ++g) axpy_rows(want.data() + g * D, a.data() + g * stride, rows.data(), n, D);
            INFO("D " << D << ", G " << G);
            CHECK(std::memcmp(y.data(), want.data(), y.size() * sizeof(float)) == 0);
        }
}

namespace {
// values as bfloat16 (the top half of each float32: what a bfloat16 cache holds)
std::vector<uint16_t> bf16_halves(const std::vector<float>& values) {
    std::vector<uint16_t> out(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
        uint32_t bits;
        std::memcpy(&bits, &values[i], 4);
        out[i] = uint16_t(bits >> 16);
    }
    return out;
}

// n rows of size D from store, last first (a kernel must take rows in any order), as float32 and bfloat16 rows
struct ReversedRows {
    std::vector<uint16_t> halves;  // store as bfloat16
    std::vector<const float*> f32;
    std::vector<const uint16_t*> bf16;
    ReversedRows(const std::vector<float>& store, int64_t n, int64_t D) : halves(bf16_halves(store)) {
        for (int64_t j = n - 1; j >= 0; --j) f32.push_back(store.data() + j * D), bf16.push_back(halves.data() + j * D);
    }
};
}  // namespace

TEST_CASE("dot_rows_heads gives each head exactly dot_rows's scores") {
    // Up to 3 heads share each key load: of size 64 on AVX-512, of sizes that are multiples of 16 on AVX2
    // (8 keys at a time); other sizes and builds run dot_rows per head. Every head's scores must keep
    // dot_rows's bits, or grouped and ungrouped attention would differ.
    std::mt19937 rng(8);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (int64_t D : {64, 80, 128})
    for (int64_t G : {1, 2, 3, 4, 7})
    for (int64_t n : {0, 1, 3, 4, 9, 13, 24, 70}) {
        std::vector<float> q(size_t(G * D)), store(size_t(n * D));
        for (float& v : q) v = d(rng);
        for (float& v : store) v = d(rng);
        const ReversedRows reversed(store, n, D);
        const std::vector<const float*>& rows = reversed.f32;
        const std::vector<const uint16_t*>& rows16 = reversed.bf16;
        const int64_t stride = n + 5;
        std::vector<float> grouped(size_t(G * stride), -7.0f), grouped16(grouped.size(), -7.0f);
        dot_rows_heads(grouped.data(), stride, q.data(), G, rows.data(), n, D, 0.125f);
        dot_rows_heads(grouped16.data(), stride, q.data(), G, rows16.data(), n, D, 0.125f);
        for (int64_t g = 0; g < G; ++g) {
            std::vector<float> alone(size_t(n) + 1), alone16(size_t(n) + 1);
            dot_rows(alone.data(), q.data() + g * D, rows.data(), n, D, 0.125f);
            dot_rows(alone16.data(), q.data() + g * D, rows16.data(), n, D, 0.125f);
            INFO("D " << D << " G " << G << " n " << n << " head " << g);
            CHECK(std::memcmp(grouped.data() + g * stride, alone.data(), size_t(n) * sizeof(float)) == 0);
            CHECK(std::memcmp(grouped16.data() + g * stride, alone16.data(), size_t(n) * sizeof(float)) == 0);
            CHECK(grouped[size_t(g * stride + n)] == -7.0f);  // nothing written past the n scores
        }
    }
}

TEST_CASE("dot_rows_block and axpy_rows_block give each query row exactly dot_rows_heads's and axpy_rows_heads's bits") {
    // A prefill block's rows share each key and value load; every row must keep the bits its own calls
    // would give, or a prompt's attention would depend on how its rows were blocked.
    std::mt19937 rng(21);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (int64_t D : {64, 96, 80})
    for (int64_t G : {1, 3, 4, 7})
    for (int64_t R : {1, 2, 4, 5, 8})
    for (int64_t n : {0, 1, 6, 17, 40}) {
        INFO("D " << D << " G " << G << " R " << R << " n " << n);
        std::vector<float> q(size_t(R * G * D)), store(size_t(n * D));
        for (float& v : q) v = d(rng);
        for (float& v : store) v = d(rng);
        const ReversedRows reversed(store, n, D);
        const std::vector<const float*>& rows = reversed.f32;
        const std::vector<const uint16_t*>& rows16 = reversed.bf16;
        const int64_t stride = n + 3;
        // scores: row r's at (r, G, stride) from offset r (the rows' offsets differ in attend_rows)
        std::vector<float> blocked(size_t(R * G * stride + R), -7.0f), blocked16(blocked), alone(blocked), alone16(blocked);
        std::vector<float*> out, out16;
        std::vector<const float*> qs;
        for (int64_t r = 0; r < R; ++r) {
            out.push_back(blocked.data() + r * G * stride + r);
            out16.push_back(blocked16.data() + r * G * stride + r);
            qs.push_back(q.data() + r * G * D);
            dot_rows_heads(alone.data() + r * G * stride + r, stride, qs.back(), G, rows.data(), n, D, 0.125f);
            dot_rows_heads(alone16.data() + r * G * stride + r, stride, qs.back(), G, rows16.data(), n, D, 0.125f);
        }
        dot_rows_block(out.data(), stride, qs.data(), R, G, rows.data(), n, D, 0.125f);
        dot_rows_block(out16.data(), stride, qs.data(), R, G, rows16.data(), n, D, 0.125f);
        CHECK(std::memcmp(blocked.data(), alone.data(), blocked.size() * sizeof(float)) == 0);
        CHECK(std::memcmp(blocked16.data(), alone16.data(), blocked16.size() * sizeof(float)) == 0);
        // values: the scores as weights, y starting from values of its own
        std::vector<float> y0(size_t(R * G * D));
        for (float& v : y0) v = d(rng);
        std::vector<float> y = y0, y16 = y0, want = y0, want16 = y0;
        std::vector<float*> ys, ys16;
        std::vector<const float*> as;
        for (int64_t r = 0; r < R; ++r) {
            ys.push_back(y.data() + r * G * D);
            ys16.push_back(y16.data() + r * G * D);
            as.push_back(out[size_t(r)]);
            for (int64_t g0 = 0; g0 < G; g0 += 4) {
                const int64_t heads = std::min<int64_t>(4, G - g0);
                axpy_rows_heads(want.data() + (r * G + g0) * D, as.back() + g0 * stride, stride, heads, rows.data(), n, D);
                axpy_rows_heads(want16.data() + (r * G + g0) * D, as.back() + g0 * stride, stride, heads, rows16.data(), n, D);
            }
        }
        axpy_rows_block(ys.data(), as.data(), stride, R, G, rows.data(), n, D);
        axpy_rows_block(ys16.data(), as.data(), stride, R, G, rows16.data(), n, D);
        CHECK(std::memcmp(y.data(), want.data(), y.size() * sizeof(float)) == 0);
        CHECK(std::memcmp(y16.data(), want16.data(), y16.size() * sizeof(float)) == 0);
        // and the same sums as plain double arithmetic, within float rounding
        if (n > 0) {
            double score = 0.0, sum = y0[0];
            for (int64_t k = 0; k < D; ++k) score += double(q[size_t(k)]) * store[size_t((n - 1) * D + k)];
            CHECK(std::abs(blocked[0] - score * 0.125) <= 1e-5 * (1.0 + std::abs(score)));
            for (int64_t j = 0; j < n; ++j) sum += double(blocked[size_t(j)]) * store[size_t((n - 1 - j) * D)];
            CHECK(std::abs(y[0] - sum) <= 1e-4 * (1.0 + std::abs(sum)));
        }
    }
}

TEST_CASE("attend_rows gives each query row attend_group's weights and output, bit for bit") {
    // A prefill block's rows see ranges that differ at both ends (causal rows, sliding windows): the keys
    // before and after the shared ones go row by row, in position order around the block's kernels.
    std::mt19937 rng(5);
    std::normal_distribution<float> d(0.0f, 1.0f);
    const int64_t D = 64, n_pos = 90;
    std::vector<float> k(size_t(n_pos * D)), v(k.size());
    for (float& x : k) x = d(rng);
    for (float& x : v) x = d(rng);
    const std::vector<uint16_t> k16 = bf16_halves(k), v16 = bf16_halves(v);
    for (int64_t G : {1, 3, 4, 5})
    for (int64_t R : {2, 3, 4, 8})
    for (int64_t window : {0, 30, 70})
    for (int64_t first : {20, 61, 86}) {
        if (first + R > n_pos) continue;
        INFO("G " << G << " R " << R << " window " << window << " first row " << first);
        std::vector<KeyRange> keys;
        for (int64_t r = 0; r < R; ++r) keys.push_back(visible_keys(first + r, window, 0));
        const KeyRange span{0, keys[0].lo, keys[size_t(R - 1)].hi};  // a task's table: its rows' keys
        std::vector<const float*> key_rows, value_rows;
        std::vector<const uint16_t*> key_rows16, value_rows16;
        for (int64_t j = 0; j < span.count(); ++j) {
            key_rows.push_back(k.data() + span.position(j) * D), value_rows.push_back(v.data() + span.position(j) * D);
            key_rows16.push_back(k16.data() + span.position(j) * D), value_rows16.push_back(v16.data() + span.position(j) * D);
        }
        std::vector<float> q(size_t(R * G * D));
        for (float& x : q) x = d(rng);
        const int64_t stride = n_pos + 1;
        auto check_rows = [&](auto key_table, auto value_table) {
            std::vector<float> out(size_t(R * G * D), 9.0f), weights(size_t(R * G * stride), 9.0f);
            std::vector<float*> outs;
            std::vector<const float*> qs;
            for (int64_t r = 0; r < R; ++r) outs.push_back(out.data() + r * G * D), qs.push_back(q.data() + r * G * D);
            attend_rows(outs.data(), weights.data(), stride, qs.data(), R, G, key_table, value_table, keys.data(), D, 0.125f);
            for (int64_t r = 0; r < R; ++r) {
                INFO("row " << r);
                std::vector<float> want_out(size_t(G * D)), want_w(size_t(G * stride), 9.0f);
                attend_group<false>(want_out.data(), want_w.data(), stride, qs[size_t(r)], G, key_table, value_table,
                                    keys[size_t(r)], D, 0.125f);
                CHECK(std::memcmp(outs[size_t(r)], want_out.data(), want_out.size() * sizeof(float)) == 0);
                for (int64_t g = 0; g < G; ++g)
                    CHECK(std::memcmp(weights.data() + (r * G + g) * stride, want_w.data() + g * stride,
                                      size_t(keys[size_t(r)].count()) * sizeof(float)) == 0);
            }
        };
        check_rows(RowTable<const float*>{key_rows.data(), span}, RowTable<const float*>{value_rows.data(), span});
        check_rows(RowTable<const uint16_t*>{key_rows16.data(), span}, RowTable<const uint16_t*>{value_rows16.data(), span});
    }
}

TEST_CASE("max_of is the largest value, with a zero maximum's sign and NaN skipping as a left-to-right scan") {
    // The scan keeps m unless x > m: -0 and +0 tie (the first seen stays), NaN never replaces m. AVX-512
    // reduces as a tree and returns NaN when one is present, so that part is checked off AVX-512 only.
    std::mt19937 rng(11);
    std::uniform_int_distribution<int> pick(0, 5);
    std::normal_distribution<float> value(0.0f, 3.0f);
    for (int64_t n : {1, 7, 15, 16, 17, 31, 32, 33, 100, 1000})
        for (int trial = 0; trial < 40; ++trial) {
            std::vector<float> x(static_cast<size_t>(n));
            const bool zeros = trial % 2 == 0;  // half the arrays: nothing above zero, several zeros of each sign
            for (float& v : x) {
                const int k = pick(rng);
                v = k == 0 ? 0.0f : k == 1 ? -0.0f : k == 2 && trial % 4 == 1 ? NAN : k == 3 ? -INFINITY : value(rng);
                if (zeros && v > 0.0f) v = -v;
            }
            float scan = -INFINITY;
            bool has_nan = false;
            for (float v : x) {
                scan = v > scan ? v : scan;
                has_nan = has_nan || std::isnan(v);
            }
            const float got = max_of(x.data(), n);
            INFO("n " << n << " trial " << trial);
#if defined(__AVX512F__)
            if (has_nan) continue;
            CHECK(got == scan);  // a tie of +0 and -0 may come out either way
#else
            CHECK(std::memcmp(&got, &scan, sizeof got) == 0);
#endif
        }
}

TEST_CASE("level1_data_cache_bytes is the level-1 data cache the C library reads off the CPU") {
    // glibc's sysconf asks the CPU itself (cpuid), not sysfs: an independent reading where sysfs lists the
    // caches; where it lists none (some VMs), the reading must still be the CPU's.
    const long from_cpu = sysconf(_SC_LEVEL1_DCACHE_SIZE);
    const int64_t l1 = level1_data_cache_bytes();
    if (from_cpu > 0) CHECK(l1 == from_cpu);
    if (l1 > 0 && last_level_cache_bytes() > 0) CHECK(l1 < last_level_cache_bytes());
}
