#include "train/train_ops.h"

#include <algorithm>
#include <cmath>

#include "base/thread_pool.h"
#include "train/matrix_maps.h"

namespace kvscope {
namespace {

using namespace train_maps;

// Blocks of output rows for the pool: a function of the shape only (see the header).
int64_t n_blocks(int64_t rows) { return std::clamp<int64_t>(rows / 64, 1, 8); }

template <typename F> void for_row_blocks(int64_t rows, F&& fn) {
    const int64_t n = n_blocks(rows);
    auto run = [&](int64_t i) {
        const int64_t r0 = rows * i / n, r1 = rows * (i + 1) / n;
        if (r1 > r0) fn(r0, r1 - r0);
    };
    if (n == 1) run(0);
    else ThreadPool::global().parallel_for(n, run);
}

}  // namespace

template <typename S> void matmul_nn(S* Y, const S* A, const S* B, int64_t M, int64_t K, int64_t Nn, bool acc) {
    CMapM<S> b(B, K, Nn);
    for_row_blocks(M, [&](int64_t r0, int64_t n) {
        MapM<S> y(Y + r0 * Nn, n, Nn);
        CMapM<S> a(A + r0 * K, n, K);
        if (acc) y.noalias() += a * b;
        else y.noalias() = a * b;
    });
}

template <typename S> void matmul_nt(S* Y, const S* A, const S* B, int64_t M, int64_t K, int64_t Nn, bool acc) {
    CMapM<S> b(B, Nn, K);
    for_row_blocks(M, [&](int64_t r0, int64_t n) {
        MapM<S> y(Y + r0 * Nn, n, Nn);
        CMapM<S> a(A + r0 * K, n, K);
        if (acc) y.noalias() += a * b.transpose();
        else y.noalias() = a * b.transpose();
    });
}

template <typename S> void matmul_tn(S* Y, const S* A, const S* B, int64_t M, int64_t K, int64_t Nn, bool acc) {
    CMapM<S> a(A, M, K);
    CMapM<S> b(B, M, Nn);
    // Output row block [r0, r0+n) of Y = columns [r0, r0+n) of A, transposed, times all of B.
    for_row_blocks(K, [&](int64_t r0, int64_t n) {
        MapM<S> y(Y + r0 * Nn, n, Nn);
        if (acc) y.noalias() += a.middleCols(r0, n).transpose() * b;
        else y.noalias() = a.middleCols(r0, n).transpose() * b;
    });
}

template <typename S> void linear_forward(S* y, const S* x, const S* W, const S* b, int64_t N, int64_t K, int64_t M) {
    matmul_nn(y, x, W, N, K, M, false);
    if (!b) return;
    for (int64_t r = 0; r < N; ++r)
        for (int64_t j = 0; j < M; ++j) y[r * M + j] += b[j];
}

template <typename S>
void linear_backward(S* dx, S* dW, S* db, const S* dy, const S* x, const S* W, int64_t N, int64_t K, int64_t M) {
    if (dx) matmul_nt(dx, dy, W, N, M, K, false);
    matmul_tn(dW, x, dy, N, K, M, true);
    if (!db) return;
    for (int64_t r = 0; r < N; ++r)
        for (int64_t j = 0; j < M; ++j) db[j] += dy[r * M + j];
}

template <typename S>
void layer_norm_forward(S* y, S* mean, S* rstd, const S* x, const S* g, const S* b, int64_t N, int64_t C, double eps) {
    for (int64_t r = 0; r < N; ++r) {
        const S* xr = x + r * C;
        double sum = 0, sq = 0;
        for (int64_t c = 0; c < C; ++c) sum += double(xr[c]);
        const double m = sum / double(C);
        for (int64_t c = 0; c < C; ++c) sq += (double(xr[c]) - m) * (double(xr[c]) - m);
        const S s = S(1.0 / std::sqrt(sq / double(C) + eps));
        mean[r] = S(m);
        rstd[r] = s;
        for (int64_t c = 0; c < C; ++c) y[r * C + c] = (xr[c] - S(m)) * s * g[c] + b[c];
    }
}

template <typename S>
void layer_norm_backward(S* dx, S* dg, S* db, const S* dy, const S* x, const S* mean, const S* rstd, const S* g,
                         int64_t N, int64_t C) {
    for (int64_t r = 0; r < N; ++r) {
        const S* xr = x + r * C;
        const S* dyr = dy + r * C;
        // pass 1: the two means the normalisation couples every element through
        S mean_dxhat = 0, mean_dxhat_xhat = 0;
        for (int64_t c = 0; c < C; ++c) {
            const S xhat = (xr[c] - mean[r]) * rstd[r];
            const S dxhat = dyr[c] * g[c];
            mean_dxhat += dxhat;
            mean_dxhat_xhat += dxhat * xhat;
        }
        mean_dxhat /= S(C);
        mean_dxhat_xhat /= S(C);
        // pass 2: gradients
        for (int64_t c = 0; c < C; ++c) {
            const S xhat = (xr[c] - mean[r]) * rstd[r];
            dg[c] += dyr[c] * xhat;
            db[c] += dyr[c];
            dx[r * C + c] += rstd[r] * (dyr[c] * g[c] - mean_dxhat - xhat * mean_dxhat_xhat);
        }
    }
}

namespace {
constexpr double kGeluK = 0.7978845608028654;  // sqrt(2/pi)
constexpr double kGeluA = 0.044715;
}  // namespace

template <typename S> void gelu_forward(S* y, const S* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const S v = x[i];
        y[i] = S(0.5) * v * (S(1) + std::tanh(S(kGeluK) * (v + S(kGeluA) * v * v * v)));
    }
}

template <typename S> void gelu_backward(S* dx, const S* dy, const S* x, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const S v = x[i];
        const S th = std::tanh(S(kGeluK) * (v + S(kGeluA) * v * v * v));
        const S dinner = S(kGeluK) * (S(1) + S(3 * kGeluA) * v * v);
        dx[i] = dy[i] * (S(0.5) * (S(1) + th) + S(0.5) * v * (S(1) - th * th) * dinner);
    }
}

template <typename S>
void attention_forward(S* out, S* weights, const S* qkv, int64_t B, int64_t T, int64_t C, int64_t H) {
    const int64_t D = C / H;
    const S scale = S(1.0 / std::sqrt(double(D)));
    ThreadPool::global().parallel_for(B * H, [&](int64_t task) {
        const int64_t b = task / H, h = task % H;
        const S* base = qkv + b * T * 3 * C;
        CStrided<S> q(base + h * D, T, D, Eigen::OuterStride<>(3 * C));
        CStrided<S> k(base + C + h * D, T, D, Eigen::OuterStride<>(3 * C));
        CStrided<S> v(base + 2 * C + h * D, T, D, Eigen::OuterStride<>(3 * C));
        MapM<S> w(weights + task * T * T, T, T);
        // pass 1: scores = q·kᵀ/√D, then a softmax over keys 0..t of each row t
        w.noalias() = (q * k.transpose()) * scale;
        for (int64_t t = 0; t < T; ++t) {
            S mx = w(t, 0);
            for (int64_t j = 1; j <= t; ++j) mx = std::max(mx, w(t, j));
            S sum = 0;
            for (int64_t j = 0; j <= t; ++j) sum += (w(t, j) = std::exp(w(t, j) - mx));
            for (int64_t j = 0; j <= t; ++j) w(t, j) /= sum;
            for (int64_t j = t + 1; j < T; ++j) w(t, j) = 0;
        }
        // pass 2: out = weights·v
        Strided<S> o(out + b * T * C + h * D, T, D, Eigen::OuterStride<>(C));
        o.noalias() = w * v;
    });
}

template <typename S>
void attention_backward(S* dqkv, const S* dout, const S* weights, const S* qkv, int64_t B, int64_t T, int64_t C,
                        int64_t H) {
    const int64_t D = C / H;
    const S scale = S(1.0 / std::sqrt(double(D)));
    ThreadPool::global().parallel_for(B * H, [&](int64_t task) {
        const int64_t b = task / H, h = task % H;
        const S* base = qkv + b * T * 3 * C;
        const Eigen::OuterStride<> s3(3 * C);
        CStrided<S> q(base + h * D, T, D, s3);
        CStrided<S> k(base + C + h * D, T, D, s3);
        CStrided<S> v(base + 2 * C + h * D, T, D, s3);
        CStrided<S> dout_h(dout + b * T * C + h * D, T, D, Eigen::OuterStride<>(C));
        CMapM<S> w(weights + task * T * T, T, T);
        S* dbase = dqkv + b * T * 3 * C;
        Strided<S> dq(dbase + h * D, T, D, s3);
        Strided<S> dk(dbase + C + h * D, T, D, s3);
        Strided<S> dv(dbase + 2 * C + h * D, T, D, s3);
        // pass 1: through out = w·v
        dv.noalias() = w.transpose() * dout_h;
        Mat<S> dw = dout_h * v.transpose();  // (T, T)
        // pass 2: through the softmax: ds = w ⊙ (dw - Σ_j w·dw); masked entries have w = 0
        for (int64_t t = 0; t < T; ++t) {
            S dot = 0;
            for (int64_t j = 0; j <= t; ++j) dot += w(t, j) * dw(t, j);
            for (int64_t j = 0; j <= t; ++j) dw(t, j) = w(t, j) * (dw(t, j) - dot) * scale;
            for (int64_t j = t + 1; j < T; ++j) dw(t, j) = 0;
        }
        // pass 3: through scores = q·kᵀ·scale (scale already folded into ds)
        dq.noalias() = dw * k;
        dk.noalias() = dw.transpose() * q;
    });
}

template <typename S>
double cross_entropy_forward(S* probs, const S* logits, const int32_t* targets, int64_t N, int64_t V) {
    double loss = 0;
    int64_t n_scored = 0;
    for (int64_t r = 0; r < N; ++r) {
        const S* l = logits + r * V;
        S* p = probs + r * V;
        S mx = l[0];
        for (int64_t j = 1; j < V; ++j) mx = std::max(mx, l[j]);
        double sum = 0;
        for (int64_t j = 0; j < V; ++j) sum += double(p[j] = std::exp(l[j] - mx));
        const S inv = S(1.0 / sum);
        for (int64_t j = 0; j < V; ++j) p[j] *= inv;
        if (targets[r] < 0) continue;  // not scored
        ++n_scored;
        loss += -(double(l[targets[r]] - mx) - std::log(sum));
    }
    return loss / double(std::max<int64_t>(n_scored, 1));
}

template <typename S>
void cross_entropy_backward(S* dlogits, const S* probs, const int32_t* targets, int64_t N, int64_t V) {
    int64_t n_scored = 0;
    for (int64_t r = 0; r < N; ++r) n_scored += targets[r] >= 0;
    const S inv_n = S(1.0 / double(std::max<int64_t>(n_scored, 1)));
    for (int64_t r = 0; r < N; ++r) {
        if (targets[r] < 0) {
            std::fill(dlogits + r * V, dlogits + (r + 1) * V, S(0));
            continue;
        }
        for (int64_t j = 0; j < V; ++j) dlogits[r * V + j] = probs[r * V + j] * inv_n;
        dlogits[r * V + targets[r]] -= inv_n;
    }
}

template <typename S>
void embedding_forward(S* x, const int32_t* tokens, const S* wte, const S* wpe, int64_t B, int64_t T, int64_t C) {
    for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t) {
            const S* e = wte + int64_t(tokens[b * T + t]) * C;
            const S* p = wpe + t * C;
            S* xr = x + (b * T + t) * C;
            for (int64_t c = 0; c < C; ++c) xr[c] = e[c] + p[c];
        }
}

template <typename S>
void embedding_backward(S* dwte, S* dwpe, const S* dx, const int32_t* tokens, int64_t B, int64_t T, int64_t C) {
    for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t) {
            const S* d = dx + (b * T + t) * C;
            S* e = dwte + int64_t(tokens[b * T + t]) * C;
            S* p = dwpe + t * C;
            for (int64_t c = 0; c < C; ++c) {
                e[c] += d[c];
                p[c] += d[c];
            }
        }
}

#define KVSCOPE_TRAIN_OPS(S)                                                                                      \
    template void matmul_nn<S>(S*, const S*, const S*, int64_t, int64_t, int64_t, bool);                         \
    template void matmul_nt<S>(S*, const S*, const S*, int64_t, int64_t, int64_t, bool);                         \
    template void matmul_tn<S>(S*, const S*, const S*, int64_t, int64_t, int64_t, bool);                         \
    template void linear_forward<S>(S*, const S*, const S*, const S*, int64_t, int64_t, int64_t);                \
    template void linear_backward<S>(S*, S*, S*, const S*, const S*, const S*, int64_t, int64_t, int64_t);       \
    template void layer_norm_forward<S>(S*, S*, S*, const S*, const S*, const S*, int64_t, int64_t, double);      \
    template void layer_norm_backward<S>(S*, S*, S*, const S*, const S*, const S*, const S*, const S*, int64_t,   \
                                         int64_t);                                                                \
    template void gelu_forward<S>(S*, const S*, int64_t);                                                         \
    template void gelu_backward<S>(S*, const S*, const S*, int64_t);                                              \
    template void attention_forward<S>(S*, S*, const S*, int64_t, int64_t, int64_t, int64_t);                     \
    template void attention_backward<S>(S*, const S*, const S*, const S*, int64_t, int64_t, int64_t, int64_t);    \
    template double cross_entropy_forward<S>(S*, const S*, const int32_t*, int64_t, int64_t);                     \
    template void cross_entropy_backward<S>(S*, const S*, const int32_t*, int64_t, int64_t);                      \
    template void embedding_forward<S>(S*, const int32_t*, const S*, const S*, int64_t, int64_t, int64_t);        \
    template void embedding_backward<S>(S*, S*, const S*, const int32_t*, int64_t, int64_t, int64_t);

KVSCOPE_TRAIN_OPS(float)
KVSCOPE_TRAIN_OPS(double)

}  // namespace kvscope
