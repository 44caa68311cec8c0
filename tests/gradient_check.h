#pragma once
// Gradient checks for the trainer's tests (train, llama_train):
//   randn(n, seed, scale)          n normal draws, the same for a seed
//   dot(a, b)                      the scalar a random projection of an op's outputs makes
//   check_grad(what, x, grad, f)   the analytic gradient of scalar f at x against central differences
//                                  (f(x + h) - f(x - h)) / 2h, h = 1e-6, element by element
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace kvtest {

inline std::vector<double> randn(size_t n, uint32_t seed, double scale = 1.0) {
    std::mt19937 gen(seed);
    std::normal_distribution<double> d(0.0, scale);
    std::vector<double> v(n);
    for (double& x : v) x = d(gen);
    return v;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}

inline void check_grad(const std::string& what, std::vector<double>& x, const std::vector<double>& grad,
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

}  // namespace kvtest
