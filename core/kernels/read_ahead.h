#pragma once
// How far ahead of its loads each block kernel asks for the weights' stream, and into which cache: one table per
// core, chosen once per process from the CPU's vendor and level-1 data cache (machine_probe.h). read_ahead.cpp
// holds the measurements behind each entry. Requests only: no entry changes a result, only how soon bytes arrive.
//
//   ReadAhead                        the table
//     rows_into_l1                   block rows (block_vectors.h's GroupRows, 16 KiB past the group): into L1,
//                                    else into L2
//     byte_panels_one_row            Q8_0 panels (block_panels.cpp), one row of x (decode): bytes ahead, into L2
//     nibble_panels_one_row          Q4_0 panels, the same
//     q4k_panels, q6k_panels         Q4_K / Q6_K panels (super_block_panels.cpp), the leading tile of several rows
//                                    of x: bytes ahead, into L2
//     q4k_panels_one_row, q6k_panels_one_row, k_panels_one_row_into_l1
//                                    the same panels at one row of x: bytes ahead, into L1 or L2; 0: no requests
//   Core                             what the table depends on: vendor and level-1 data cache
//   read_ahead_for(core)             the table for a core
//   read_ahead()                     this machine's (cpu0's) table, decided on first use
#include <cstdint>

namespace kvscope {

struct ReadAhead {
    bool rows_into_l1 = false;
    int64_t byte_panels_one_row = 0, nibble_panels_one_row = 0;
    int64_t q4k_panels = 0, q6k_panels = 0;
    int64_t q4k_panels_one_row = 0, q6k_panels_one_row = 0;
    bool k_panels_one_row_into_l1 = false;
};

struct Core {
    bool amd = false;
    int64_t l1_data_bytes = 0;  // 0: not known
};

ReadAhead read_ahead_for(Core core);
const ReadAhead& read_ahead();

}  // namespace kvscope
