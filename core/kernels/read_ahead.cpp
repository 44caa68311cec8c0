#include "kernels/read_ahead.h"

#include "kernels/machine_probe.h"

namespace kvscope {
namespace {

// A K panel's super-block (super_block_panels.cpp): 16 rows of 144 (Q4_K) or 210 (Q6_K) bytes.
constexpr int64_t kQ4KPanelBlock = 16 * 144, kQ6KPanelBlock = 16 * 210;

}  // namespace

// Block rows: into L1 where it holds 48 KiB (the block kernels spend more time per byte than float32 rows, so what
// arrives stays until it is used), else into L2. EPYC Zen 5 (48 KiB), K 2048 x N 16384 from memory, 1 thread:
// Q6_K 30.1 -> 34.8 GB/s into L1, Q4_K 31.4 -> 34.4, Q8_0 36.4 -> 36.8. EPYC Zen 4 (32 KiB), us into L1 -> into L2,
// 1 thread Q6_K 2554 -> 991, Q4_K 906 -> 867, Q8_0 1850 -> 1800; 2 threads Q6_K 1388 -> 653, Q4_K 622 -> 466.
//
// Q8_0 and Q4_0 panels at one row of x: 4 KiB into L2, tuned on the Intel Xeon (family 6 model 207), 79-81 % of the
// probe against 74-76 without. EPYC Zen 4 (family 25 model 17), interleaved pairs of `generate` on the 1B files:
// Q8_0's byte panels at 3 KiB won 21 of 24 on one thread (median 1.05x; 2 threads even), Q4_0's nibble panels at
// 6 KiB 18 of 18 on one (1.04-1.17x) and 6 of 8 on two (docs/benchmarks.md). Zen 5 (48 KiB L1) keeps 4 KiB: not
// measured with these.
//
// Q4_K and Q6_K panels: Intel one super-block into L2 (super_block_panels.cpp's panel_tile has the Xeon's figures).
// AMD about 9 KiB, whole super-blocks, into L2; at one row of x into L1 where it holds 48 KiB, and nothing
// where it holds less (first about 2 KiB, below). EPYC Zen 5 (family 26 model 2), K 2048 x N 16384 from memory, 1 row of x, share of
// the probe, 1 | 2 threads: into L2, Q4_K one super-block 48-66 | 63-68 %, two 69-77 | 54-82 %, four 67-79 | 75-83 %;
// Q6_K one 71 | 76-80 %, three 77 | 83-88 %; four Q4_K super-blocks into L1 74-88 | 83 %. The 1B Q4_K_M file,
// interleaved pairs: decode, four and three into L2 against one, 1.12x on 2 threads (6 pairs), 1.17x on one (4),
// batch 8 and prefill unchanged; then into L1 at one row, decode 1.08x on 2 threads (8 pairs), 1.14x on one (4);
// into L1 at every tile made prefill 0.97x (10 pairs). EPYC Zen 4 (family 25 model 17, 32 KiB L1), one row of x,
// those 9 KiB into L2 -> Q4_K one super-block and Q6_K half of one: from memory as above, median of 3 rounds, Q4_K
// 1158 -> 1025 us on one thread, 743 -> 623 on two; Q6_K 1425 -> 1168 and 873 -> 776. The 1B Q4_K_M file,
// interleaved: decode 1.07x on 2 threads (18 pairs and rounds), 1.22x on one (5 rounds); into L1 lost (0.93x), and
// so did the short distance at 8 rows (batch 8 0.90x). Zen 4's one-row choice on that Zen 5: decode 0.70x (7
// rounds); 14-18 KiB into L1 0.94-0.96x, within the noise. Then on Zen 4 no requests at one row of x (the hardware's
// own read-ahead alone), against those 2304 / 1680 bytes: the 1B Q4_K_M file, interleaved pairs of `generate`, one
// thread 10 of 10 (1.01-1.39x, median 1.18x: 17.9-21.7 -> 19.9-27.6 tokens/s), two threads 10 of 18 (0.88-1.25x:
// even); the Q4_0 file (Q6_K `output`) 5 of 6 on one. K 2048 x N 16384 from memory, one thread, Q4_K 14.3-19.5 ->
// 18.4-25.6 GB/s (5 of 6 rounds); two threads 30.5-33.4 -> 26.3-28.9 (0 of 3), Q6_K even.
ReadAhead read_ahead_for(Core core) {
    ReadAhead r;
    r.rows_into_l1 = core.l1_data_bytes >= (48 << 10);
    const bool small_amd_l1 = core.amd && !r.rows_into_l1;
    r.byte_panels_one_row = small_amd_l1 ? 3072 : 4096;
    r.nibble_panels_one_row = small_amd_l1 ? 6144 : 4096;
    if (!core.amd) {
        r.q4k_panels = r.q4k_panels_one_row = kQ4KPanelBlock;
        r.q6k_panels = r.q6k_panels_one_row = kQ6KPanelBlock;
        return r;
    }
    r.q4k_panels = 4 * kQ4KPanelBlock;
    r.q6k_panels = 3 * kQ6KPanelBlock;
    r.k_panels_one_row_into_l1 = r.rows_into_l1;
    r.q4k_panels_one_row = r.rows_into_l1 ? r.q4k_panels : 0;
    r.q6k_panels_one_row = r.rows_into_l1 ? r.q6k_panels : 0;
    return r;
}

const ReadAhead& read_ahead() {
    static const ReadAhead table = [] {
        Core core;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
        __builtin_cpu_init();  // before main (a kernel's table is a namespace-scope constant) the CPU is not read yet
        core.amd = __builtin_cpu_is("amd");
#endif
        core.l1_data_bytes = level1_data_cache_bytes();
        return read_ahead_for(core);
    }();
    return table;
}

}  // namespace kvscope
