// The Llama-family trainer's ops (core/train/llama_ops.h): every op's backward against double-precision
// central differences of its own forward, every forward against plain loops written here.
//
// How the goldens are made: finite differences (f(x+h) - f(x-h)) / 2h with h = 1e-6 of a random projection
// of the op's outputs; loops in this file for the forwards; the engine's own rotary functions for RoPE.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>

#include "model/rotary.h"
#include "train/llama_ops.h"

using namespace kvscope;

namespace {

std::vector<double> randn(size_t n, uint32_t seed, double scale = 1.0) {
    std::mt19937 gen(seed);
    std::normal_distribution<double> d(0.0, scale);
    std::vector<double> v(n);
    for (double& x : v) x = d(gen);
    return v;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}

// Checks analytic gradient `grad` of scalar f at x against central differences, element by element.
void check_grad(const std::string& what, std::vector<double>& x, const std::vector<double>& grad,
                const std::function<double()>& f, double tol = 1e-6) {
    REQUIRE(grad.size() == x.size());
    const double h = 1e-6;
    double worst = 0;
    size_t worst_i = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        const double keep = x[i];
        x[i] = keep + h;
        const double up = f();
        x[i] = keep - h;
        const double down = f();
        x[i] = keep;
        const double fd = (up - down) / (2 * h);
        const double err = std::abs(fd - grad[i]) / std::max(1.0, std::abs(fd));
        if (err > worst) worst = err, worst_i = i;
    }
    INFO(what << ": worst element " << worst_i << " relative error " << worst);
    CHECK(worst < tol);
}

}  // namespace

TEST_CASE("RMSNorm forward matches loops, backward matches finite differences (w and Gemma's 1 + w)") {
    const bool plus_one = GENERATE(false, true);
    const int64_t N = 3, C = 6;
    std::vector<double> x = randn(N * C, 11, 2.0), w = randn(C, 12), p = randn(N * C, 14);
    std::vector<double> y(N * C), rstd(N);
    rms_norm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5, plus_one);
    for (int64_t r = 0; r < N; ++r) {
        double ms = 0;
        for (int64_t c = 0; c < C; ++c) ms += x[r * C + c] * x[r * C + c] / C;
        for (int64_t c = 0; c < C; ++c)
            CHECK(y[r * C + c] == Approx(x[r * C + c] / std::sqrt(ms + 1e-5) * (plus_one ? 1 + w[c] : w[c])).epsilon(1e-12));
    }
    auto f = [&] {
        rms_norm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-5, plus_one);
        return dot(y, p);
    };
    f();
    std::vector<double> dx(N * C, 0.0), dw(C, 0.0);
    rms_norm_backward(dx.data(), dw.data(), p.data(), x.data(), rstd.data(), w.data(), N, C, plus_one);
    check_grad("dx", x, dx, f);
    check_grad("dw", w, dw, f);
}

TEST_CASE("RoPE: the engine's rotation (rotate_half pairs i, i + D/2) bit for bit; backward is its transpose") {
    const int64_t B = 2, T = 5, H = 3, D = 8, half = D / 2;
    RopeSpec rope;
    rope.theta = 500.0;  // fast-turning pairs, so every pair's angle matters
    std::vector<float> cosf(size_t(T * half)), sinf(size_t(T * half));
    rope_table(cosf.data(), sinf.data(), rope, D, T);
    // The engine's functions on the same rows: rotary_angles + apply_rotary (model/rotary.h).
    const std::vector<float> inv_freq = rotary_inv_freq(rope, D);
    const std::vector<double> x0 = randn(size_t(B * T * H * D), 21);
    std::vector<float> xf(x0.begin(), x0.end()), want = xf;
    for (int64_t r = 0; r < B * T; ++r) {
        std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
        rotary_angles(c.data(), s.data(), inv_freq.data(), r % T, half);
        for (int64_t h = 0; h < H; ++h) apply_rotary(want.data() + (r * H + h) * D, c.data(), s.data(), D);
    }
    rope_forward(xf.data(), cosf.data(), sinf.data(), B, T, H, D);
    CHECK(std::memcmp(xf.data(), want.data(), xf.size() * sizeof(float)) == 0);
    // Position 0 is the identity, and a rotation keeps each pair's length.
    for (int64_t i = 0; i < H * D; ++i) CHECK(xf[size_t(i)] == float(x0[size_t(i)]));
    const int64_t r = T + 3;  // sequence 1, position 3
    for (int64_t i = 0; i < half; ++i) {
        const double a = x0[size_t(r * H * D + i)], b = x0[size_t(r * H * D + i + half)];
        const double a2 = xf[size_t(r * H * D + i)], b2 = xf[size_t(r * H * D + i + half)];
        CHECK(a2 * a2 + b2 * b2 == Approx(a * a + b * b).epsilon(1e-5));
    }

    std::vector<double> cos(cosf.begin(), cosf.end()), sin(sinf.begin(), sinf.end());
    std::vector<double> x = x0, y(x.size()), p = randn(x.size(), 22);
    auto f = [&] {
        y = x;
        rope_forward(y.data(), cos.data(), sin.data(), B, T, H, D);
        return dot(y, p);
    };
    std::vector<double> dx = p;
    rope_backward(dx.data(), cos.data(), sin.data(), B, T, H, D);
    check_grad("dx", x, dx, f);
}

TEST_CASE("SwiGLU MLP forward matches loops, backward matches finite differences") {
    const int64_t N = 3, C = 4, F = 6;
    std::vector<double> x = randn(N * C, 31), Wg = randn(F * C, 32), Wu = randn(F * C, 33), Wd = randn(C * F, 34);
    std::vector<double> p = randn(N * C, 35), y(N * C), gate(N * F), up(N * F), h(N * F);
    swiglu_mlp_forward(y.data(), gate.data(), up.data(), h.data(), x.data(), Wg.data(), Wu.data(), Wd.data(), N, C, F);
    for (int64_t r = 0; r < N; ++r) {
        std::vector<double> hid(F);
        for (int64_t j = 0; j < F; ++j) {
            double g = 0, u = 0;
            for (int64_t c = 0; c < C; ++c) g += x[r * C + c] * Wg[j * C + c], u += x[r * C + c] * Wu[j * C + c];
            hid[j] = g / (1 + std::exp(-g)) * u;
        }
        for (int64_t c = 0; c < C; ++c) {
            double o = 0;
            for (int64_t j = 0; j < F; ++j) o += hid[j] * Wd[c * F + j];
            CHECK(y[r * C + c] == Approx(o).epsilon(1e-12));
        }
    }
    auto f = [&] {
        swiglu_mlp_forward(y.data(), gate.data(), up.data(), h.data(), x.data(), Wg.data(), Wu.data(), Wd.data(), N, C, F);
        return dot(y, p);
    };
    f();
    std::vector<double> dx(N * C), dWg(F * C, 0.0), dWu(F * C, 0.0), dWd(C * F, 0.0), s1(N * F), s2(N * F), s3(N * F);
    swiglu_mlp_backward(dx.data(), dWg.data(), dWu.data(), dWd.data(), s1.data(), s2.data(), s3.data(), p.data(),
                        x.data(), gate.data(), up.data(), h.data(), Wg.data(), Wu.data(), Wd.data(), N, C, F, false);
    check_grad("dx", x, dx, f);
    check_grad("dWg", Wg, dWg, f);
    check_grad("dWu", Wu, dWu, f);
    check_grad("dWd", Wd, dWd, f);
}

TEST_CASE("grouped-query attention with a window: forward matches loops, backward matches finite differences") {
    const int64_t window = GENERATE(0, 3);
    const AttentionShape a{2, 6, 4, 2, 3, 0.7, window};  // 4 query heads over 2 K/V heads of 3 dims
    const int64_t B = a.B, T = a.T, H = a.H, K = a.K, D = a.D;
    std::vector<double> q = randn(B * T * H * D, 41), k = randn(B * T * K * D, 42), v = randn(B * T * K * D, 43);
    std::vector<double> p = randn(B * T * H * D, 44), out(B * T * H * D), att(B * H * T * T);
    gqa_attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), a);
    // loops: query head h reads K/V head h / 2; softmax over keys j with t - window < j <= t
    for (int64_t b = 0; b < B; ++b)
        for (int64_t h = 0; h < H; ++h)
            for (int64_t t = 0; t < T; ++t) {
                const int64_t g = h / 2, lo = window ? std::max<int64_t>(0, t - window + 1) : 0;
                std::vector<double> s(T, 0.0);
                double mx = -1e300, sum = 0;
                for (int64_t j = lo; j <= t; ++j) {
                    for (int64_t e = 0; e < D; ++e)
                        s[j] += q[((b * T + t) * H + h) * D + e] * k[((b * T + j) * K + g) * D + e];
                    s[j] *= 0.7;
                    mx = std::max(mx, s[j]);
                }
                for (int64_t j = lo; j <= t; ++j) sum += (s[j] = std::exp(s[j] - mx));
                for (int64_t j = 0; j < T; ++j)
                    CHECK(att[((b * H + h) * T + t) * T + j] == Approx(j >= lo && j <= t ? s[j] / sum : 0.0).margin(1e-14));
                for (int64_t e = 0; e < D; ++e) {
                    double o = 0;
                    for (int64_t j = lo; j <= t; ++j) o += s[j] / sum * v[((b * T + j) * K + g) * D + e];
                    CHECK(out[((b * T + t) * H + h) * D + e] == Approx(o).epsilon(1e-12));
                }
            }
    auto f = [&] {
        gqa_attention_forward(out.data(), att.data(), q.data(), k.data(), v.data(), a);
        return dot(out, p);
    };
    f();
    std::vector<double> dq(q.size()), dk(k.size()), dv(v.size());
    gqa_attention_backward(dq.data(), dk.data(), dv.data(), p.data(), att.data(), q.data(), k.data(), v.data(), a);
    check_grad("dq", q, dq, f);
    check_grad("dk", k, dk, f);
    check_grad("dv", v, dv, f);
}

