/* kcs_abi_check.c - compiles kcs_abi.h on its own (no other includes) and
 * pins the struct layout every kernel of ABI kcs-cpu-v1 relies on.
 */
#include "kcs_abi.h"

#include <stddef.h>

_Static_assert(offsetof(KcsRuntime, version) == 0, "KcsRuntime.version");
_Static_assert(offsetof(KcsRuntime, reserved) == 4, "KcsRuntime.reserved");
_Static_assert(offsetof(KcsRuntime, ctx) == 8, "KcsRuntime.ctx");
_Static_assert(offsetof(KcsRuntime, parallel_for) == 16, "KcsRuntime.parallel_for");
_Static_assert(offsetof(KcsRuntime, alloc) == 24, "KcsRuntime.alloc");
_Static_assert(offsetof(KcsRuntime, free) == 32, "KcsRuntime.free");
_Static_assert(offsetof(KcsRuntime, num_threads) == 40, "KcsRuntime.num_threads");
_Static_assert(sizeof(KcsRuntime) == 48, "KcsRuntime size");
