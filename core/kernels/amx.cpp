#include "kernels/amx.h"

#include "kernels/simd.h"

#if KVSCOPE_AMX
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace kvscope {

bool amx_tiles_allowed() {
#if KVSCOPE_AMX
    static const bool allowed = [] {
        constexpr long kRequestPermission = 0x1023, kTileData = 18;  // ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA
        return syscall(SYS_arch_prctl, kRequestPermission, kTileData) == 0;
    }();
    return allowed;
#else
    return false;
#endif
}

}  // namespace kvscope
