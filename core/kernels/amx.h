#pragma once
// Intel's AMX tiles (Sapphire Rapids on): eight 1 KiB registers of up to 16 rows of 64 bytes and a unit that
// multiplies two of them into a third (tdpbsud: signed bytes by unsigned bytes, summed in exact int32).
//
//   KVSCOPE_AMX            1 where the build may emit tile instructions (simd.h), else 0
//   amx_tiles_allowed()    whether this process may run them: Linux lends a thread the tiles' 8 KiB of state
//                          only after the process asks (arch_prctl); asked once, on the first call. False on
//                          builds without KVSCOPE_AMX, on older kernels, or when the request is refused.
namespace kvscope {

bool amx_tiles_allowed();

}  // namespace kvscope
