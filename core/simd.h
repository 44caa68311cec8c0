#pragma once
// AVX-512 intrinsics for the kernels that use them, included through this one header.
// GCC 12's _mm512_reduce_add_ps starts from _mm256_undefined_pd() and warns that it is used
// uninitialised; the lanes it leaves undefined are never read, so the warning is silenced here, once.
#if defined(__AVX512F__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

namespace kvscope {
inline float reduce_add(__m512 v) { return _mm512_reduce_add_ps(v); }
}  // namespace kvscope
#pragma GCC diagnostic pop
#endif
