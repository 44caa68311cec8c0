#pragma once
// AVX-512 (or, without it, AVX2) intrinsics for the kernels that use them, included through this one header,
// and the build's one instruction set as exactly one of three macros set to 1 (the others 0). A kernel
// with variants has one section per level, side by side: #if KVSCOPE_AVX512 / #elif KVSCOPE_AVX2 / #else.
//   KVSCOPE_AVX512    AVX-512F (-march=native on Zen 4, Sapphire Rapids, ...)
//   KVSCOPE_AVX2      AVX2 with FMA, no AVX-512 (Zen 2/3, Haswell on, VMs that hide AVX-512)
//   KVSCOPE_PORTABLE  plain C++ (KVSCOPE_NATIVE=OFF, or a CPU without AVX2 and FMA)
// and KVSCOPE_VNNI 1 where AVX-512 multiplies bytes in fours (VNNI, with BW and VL), else 0; KVSCOPE_AMX 1 where
// it also has AMX's int8 tiles (amx.h: the process must still ask for them), else 0.
#if defined(__AVX512F__)
#define KVSCOPE_AVX512 1
#define KVSCOPE_AVX2 0
#define KVSCOPE_PORTABLE 0
#elif defined(__AVX2__) && defined(__FMA__)
#define KVSCOPE_AVX512 0
#define KVSCOPE_AVX2 1
#define KVSCOPE_PORTABLE 0
#else
#define KVSCOPE_AVX512 0
#define KVSCOPE_AVX2 0
#define KVSCOPE_PORTABLE 1
#endif
#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512VL__)
#define KVSCOPE_VNNI 1
#else
#define KVSCOPE_VNNI 0
#endif
#if KVSCOPE_VNNI && defined(__AMX_TILE__) && defined(__AMX_INT8__)
#define KVSCOPE_AMX 1
#else
#define KVSCOPE_AMX 0
#endif

// GCC 12's _mm512_reduce_add_ps starts from _mm256_undefined_pd() and warns that it is used
// uninitialised; the lanes it leaves undefined are never read, so the warning is silenced here, once.
#if KVSCOPE_AVX512
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

namespace kvscope {
inline float reduce_add(__m512 v) { return _mm512_reduce_add_ps(v); }

// {reduce_add(a0), reduce_add(a1), reduce_add(a2), reduce_add(a3)}, bit for bit: the same pairs of lanes
// are added at each level (i with i+8, then i+4, i+2, i+1; float addition is commutative), but four
// vectors share each shuffle, so it takes 14 instructions instead of about 36.
inline __m128 reduce_add4(__m512 a0, __m512 a1, __m512 a2, __m512 a3) {
    // (a0 | a1) and (a2 | a3) as 8-lane halves: lane i + lane i+8
    const __m512 h01 = _mm512_add_ps(_mm512_shuffle_f32x4(a0, a1, _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_f32x4(a0, a1, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 h23 = _mm512_add_ps(_mm512_shuffle_f32x4(a2, a3, _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_f32x4(a2, a3, _MM_SHUFFLE(3, 2, 3, 2)));
    // 128-bit block v holds a_v's 4 partial sums: lane i + lane i+4
    const __m512 q = _mm512_add_ps(_mm512_shuffle_f32x4(h01, h23, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(h01, h23, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512 p = _mm512_add_ps(q, _mm512_permute_ps(q, _MM_SHUFFLE(1, 0, 3, 2)));  // lane i + lane i+2
    const __m512 s = _mm512_add_ps(p, _mm512_permute_ps(p, _MM_SHUFFLE(2, 3, 0, 1)));  // lane 0 + lane 1
    return _mm512_castps512_ps128(_mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), s));
}
}  // namespace kvscope
#pragma GCC diagnostic pop
#elif KVSCOPE_AVX2
#include <immintrin.h>
#endif
