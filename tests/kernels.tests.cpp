// Kernel-level checks against plain double-precision arithmetic written here.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "kernels.h"

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
    for (int64_t T : {1, 3, 8, 9, 13}) {
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
