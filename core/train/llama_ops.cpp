#include "train/llama_ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/thread_pool.h"
#include "model/rotary.h"
#include "train/matrix_maps.h"
#include "train/train_ops.h"

namespace kvscope {
namespace {

using namespace train_maps;

// The first key a query at t sees (HF masking_utils: sliding_window_overlay keeps kv_idx > q_idx - W).
int64_t first_key(int64_t t, int64_t window) { return window > 0 ? std::max<int64_t>(0, t - window + 1) : 0; }

}  // namespace

template <typename S> void proj_forward(S* y, const S* x, const S* W, int64_t N, int64_t Kin, int64_t M) {
    matmul_nt(y, x, W, N, Kin, M, false);
}

template <typename S>
void proj_backward(S* dx, S* dW, const S* dy, const S* x, const S* W, int64_t N, int64_t Kin, int64_t M, bool acc) {
    if (dx) matmul_nn(dx, dy, W, N, M, Kin, acc);
    matmul_tn(dW, dy, x, N, M, Kin, true);
}

template <typename S>
void rms_norm_forward(S* y, S* rstd, const S* x, const S* w, int64_t N, int64_t C, double eps, bool plus_one) {
    for (int64_t r = 0; r < N; ++r) {
        const S* xr = x + r * C;
        double sq = 0;
        for (int64_t c = 0; c < C; ++c) sq += double(xr[c]) * double(xr[c]);
        const S s = S(1.0 / std::sqrt(sq / double(C) + eps));
        rstd[r] = s;
        for (int64_t c = 0; c < C; ++c) y[r * C + c] = (xr[c] * s) * (plus_one ? S(1) + w[c] : w[c]);
    }
}

template <typename S>
void rms_norm_backward(S* dx, S* dw, const S* dy, const S* x, const S* rstd, const S* w, int64_t N, int64_t C,
                       bool plus_one) {
    for (int64_t r = 0; r < N; ++r) {
        const S* xr = x + r * C;
        const S* dyr = dy + r * C;
        const S s = rstd[r];
        // pass 1: Σ dy·w·x, the one sum through which r couples every element (∂r/∂x_c = -r³·x_c/C)
        S dot = 0;
        for (int64_t c = 0; c < C; ++c) dot += dyr[c] * (plus_one ? S(1) + w[c] : w[c]) * xr[c];
        const S k = s * s * s * dot / S(C);
        // pass 2: gradients
        for (int64_t c = 0; c < C; ++c) {
            dw[c] += dyr[c] * xr[c] * s;
            dx[r * C + c] += s * dyr[c] * (plus_one ? S(1) + w[c] : w[c]) - k * xr[c];
        }
    }
}

template <typename S> void rope_table(S* cos, S* sin, const RopeSpec& rope, int64_t D, int64_t T) {
    const int64_t half = D / 2;
    const std::vector<float> inv_freq = rotary_inv_freq(rope, D);  // (D/2): set-up, once per model
    std::vector<float> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
    for (int64_t t = 0; t < T; ++t) {
        rotary_angles(c.data(), s.data(), inv_freq.data(), t, half);
        for (int64_t i = 0; i < half; ++i) cos[t * half + i] = S(c[size_t(i)]), sin[t * half + i] = S(s[size_t(i)]);
    }
}

template <typename S>
void rope_forward(S* x, const S* cos, const S* sin, int64_t B, int64_t T, int64_t n_heads, int64_t D) {
    const int64_t half = D / 2;
    for (int64_t r = 0; r < B * T; ++r) {
        const S* c = cos + (r % T) * half;
        const S* s = sin + (r % T) * half;
        for (int64_t h = 0; h < n_heads; ++h) {
            S* xh = x + (r * n_heads + h) * D;
            for (int64_t i = 0; i < half; ++i) {  // as apply_rotary (model/rotary.h)
                const S a = xh[i], b = xh[i + half];
                xh[i] = a * c[i] - b * s[i];
                xh[i + half] = b * c[i] + a * s[i];
            }
        }
    }
}

template <typename S>
void rope_backward(S* dx, const S* cos, const S* sin, int64_t B, int64_t T, int64_t n_heads, int64_t D) {
    const int64_t half = D / 2;
    for (int64_t r = 0; r < B * T; ++r) {
        const S* c = cos + (r % T) * half;
        const S* s = sin + (r % T) * half;
        for (int64_t h = 0; h < n_heads; ++h) {
            S* d = dx + (r * n_heads + h) * D;
            for (int64_t i = 0; i < half; ++i) {  // the 2×2 rotation transposed
                const S da = d[i], db = d[i + half];
                d[i] = da * c[i] + db * s[i];
                d[i + half] = db * c[i] - da * s[i];
            }
        }
    }
}

template <typename S> void swiglu_forward(S* h, const S* gate, const S* up, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const S g = gate[i];
        h[i] = g / (S(1) + std::exp(-g)) * up[i];  // nn.SiLU: x·σ(x)
    }
}

template <typename S> void swiglu_backward(S* dgate, S* dup, const S* dh, const S* gate, const S* up, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const S g = gate[i];
        const S sig = S(1) / (S(1) + std::exp(-g));
        dup[i] = dh[i] * g * sig;
        dgate[i] = dh[i] * up[i] * sig * (S(1) + g * (S(1) - sig));  // silu'(g) = σ(g)·(1 + g·(1 - σ(g)))
    }
}

template <typename S>
void swiglu_mlp_forward(S* y, S* gate, S* up, S* h, const S* x, const S* Wg, const S* Wu, const S* Wd, int64_t N,
                        int64_t C, int64_t F) {
    proj_forward(gate, x, Wg, N, C, F);
    proj_forward(up, x, Wu, N, C, F);
    swiglu_forward(h, gate, up, N * F);
    proj_forward(y, h, Wd, N, F, C);
}

template <typename S>
void swiglu_mlp_backward(S* dx, S* dWg, S* dWu, S* dWd, S* dgate, S* dup, S* dh, const S* dy, const S* x,
                         const S* gate, const S* up, const S* h, const S* Wg, const S* Wu, const S* Wd, int64_t N,
                         int64_t C, int64_t F, bool accumulate) {
    proj_backward(dh, dWd, dy, h, Wd, N, F, C, false);
    swiglu_backward(dgate, dup, dh, gate, up, N * F);
    proj_backward(dx, dWg, dgate, x, Wg, N, C, F, accumulate);
    proj_backward(dx, dWu, dup, x, Wu, N, C, F, true);
}

template <typename S>
void gqa_attention_forward(S* out, S* weights, const S* q, const S* k, const S* v, const AttentionShape& a) {
    const int64_t B = a.B, T = a.T, H = a.H, K = a.K, D = a.D, group = H / K;
    const S scale = S(a.scale);
    ThreadPool::global().parallel_for(B * H, [&](int64_t task) {
        const int64_t b = task / H, h = task % H, g = h / group;  // repeat_kv: query head h reads K/V head h / (H/K)
        CStrided<S> qh(q + b * T * H * D + h * D, T, D, Eigen::OuterStride<>(H * D));
        CStrided<S> kg(k + b * T * K * D + g * D, T, D, Eigen::OuterStride<>(K * D));
        CStrided<S> vg(v + b * T * K * D + g * D, T, D, Eigen::OuterStride<>(K * D));
        MapM<S> w(weights + task * T * T, T, T);
        // pass 1: scores = q·kᵀ·scale, then a softmax over the visible keys of each row
        w.noalias() = (qh * kg.transpose()) * scale;
        for (int64_t t = 0; t < T; ++t) {
            const int64_t lo = first_key(t, a.window);
            S mx = w(t, lo);
            for (int64_t j = lo + 1; j <= t; ++j) mx = std::max(mx, w(t, j));
            S sum = 0;
            for (int64_t j = lo; j <= t; ++j) sum += (w(t, j) = std::exp(w(t, j) - mx));
            for (int64_t j = lo; j <= t; ++j) w(t, j) /= sum;
            for (int64_t j = 0; j < lo; ++j) w(t, j) = 0;
            for (int64_t j = t + 1; j < T; ++j) w(t, j) = 0;
        }
        // pass 2: out = weights·v
        Strided<S> o(out + b * T * H * D + h * D, T, D, Eigen::OuterStride<>(H * D));
        o.noalias() = w * vg;
    });
}

template <typename S>
void gqa_attention_backward(S* dq, S* dk, S* dv, const S* dout, const S* weights, const S* q, const S* k, const S* v,
                            const AttentionShape& a) {
    const int64_t B = a.B, T = a.T, H = a.H, K = a.K, D = a.D, group = H / K;
    const S scale = S(a.scale);
    // One task per (sequence, K/V head): it alone writes that head's dk and dv, adding its query heads in order.
    ThreadPool::global().parallel_for(B * K, [&](int64_t task) {
        const int64_t b = task / K, g = task % K;
        const Eigen::OuterStride<> sq(H * D), skv(K * D);
        CStrided<S> kg(k + b * T * K * D + g * D, T, D, skv);
        CStrided<S> vg(v + b * T * K * D + g * D, T, D, skv);
        Strided<S> dkg(dk + b * T * K * D + g * D, T, D, skv);
        Strided<S> dvg(dv + b * T * K * D + g * D, T, D, skv);
        Mat<S> dw(T, T);
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
            CStrided<S> qh(q + b * T * H * D + h * D, T, D, sq);
            CStrided<S> dout_h(dout + b * T * H * D + h * D, T, D, sq);
            CMapM<S> w(weights + (b * H + h) * T * T, T, T);
            Strided<S> dqh(dq + b * T * H * D + h * D, T, D, sq);
            // pass 1: through out = w·v
            if (h == g * group) dvg.noalias() = w.transpose() * dout_h;
            else dvg.noalias() += w.transpose() * dout_h;
            dw.noalias() = dout_h * vg.transpose();
            // pass 2: through the softmax: ds = w ⊙ (dw - Σ_j w·dw); masked entries have w = 0
            for (int64_t t = 0; t < T; ++t) {
                const int64_t lo = first_key(t, a.window);
                S dot = 0;
                for (int64_t j = lo; j <= t; ++j) dot += w(t, j) * dw(t, j);
                for (int64_t j = lo; j <= t; ++j) dw(t, j) = w(t, j) * (dw(t, j) - dot) * scale;
                for (int64_t j = 0; j < lo; ++j) dw(t, j) = 0;
                for (int64_t j = t + 1; j < T; ++j) dw(t, j) = 0;
            }
            // pass 3: through scores = q·kᵀ·scale (scale folded into ds)
            dqh.noalias() = dw * kg;
            if (h == g * group) dkg.noalias() = dw.transpose() * qh;
            else dkg.noalias() += dw.transpose() * qh;
        }
    });
}

template <typename S> void embed_forward(S* x, const int32_t* tokens, const S* E, int64_t N, int64_t C) {
    for (int64_t r = 0; r < N; ++r) std::copy(E + int64_t(tokens[r]) * C, E + int64_t(tokens[r] + 1) * C, x + r * C);
}

template <typename S> void embed_backward(S* dE, const S* dx, const int32_t* tokens, int64_t N, int64_t C) {
    for (int64_t r = 0; r < N; ++r) {
        S* e = dE + int64_t(tokens[r]) * C;
        for (int64_t c = 0; c < C; ++c) e[c] += dx[r * C + c];
    }
}

#define KVSCOPE_LLAMA_OPS(S)                                                                                      \
    template void proj_forward<S>(S*, const S*, const S*, int64_t, int64_t, int64_t);                             \
    template void proj_backward<S>(S*, S*, const S*, const S*, const S*, int64_t, int64_t, int64_t, bool);        \
    template void rms_norm_forward<S>(S*, S*, const S*, const S*, int64_t, int64_t, double, bool);                \
    template void rms_norm_backward<S>(S*, S*, const S*, const S*, const S*, const S*, int64_t, int64_t, bool);   \
    template void rope_table<S>(S*, S*, const RopeSpec&, int64_t, int64_t);                                       \
    template void rope_forward<S>(S*, const S*, const S*, int64_t, int64_t, int64_t, int64_t);                    \
    template void rope_backward<S>(S*, const S*, const S*, int64_t, int64_t, int64_t, int64_t);                   \
    template void swiglu_forward<S>(S*, const S*, const S*, int64_t);                                             \
    template void swiglu_backward<S>(S*, S*, const S*, const S*, const S*, int64_t);                              \
    template void swiglu_mlp_forward<S>(S*, S*, S*, S*, const S*, const S*, const S*, const S*, int64_t, int64_t,  \
                                        int64_t);                                                                 \
    template void swiglu_mlp_backward<S>(S*, S*, S*, S*, S*, S*, S*, const S*, const S*, const S*, const S*,       \
                                         const S*, const S*, const S*, const S*, int64_t, int64_t, int64_t, bool); \
    template void gqa_attention_forward<S>(S*, S*, const S*, const S*, const S*, const AttentionShape&);          \
    template void gqa_attention_backward<S>(S*, S*, S*, const S*, const S*, const S*, const S*, const S*,         \
                                            const AttentionShape&);                                               \
    template void embed_forward<S>(S*, const int32_t*, const S*, int64_t, int64_t);                               \
    template void embed_backward<S>(S*, const S*, const int32_t*, int64_t, int64_t);

KVSCOPE_LLAMA_OPS(float)
KVSCOPE_LLAMA_OPS(double)

}  // namespace kvscope
