// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// provider/verbs/ibverbs_private.h and include/metaroce/metaroce_dv.h must be
// usable from C: compiled here as C11 and compared with the C++ view.
#include <stddef.h>

#include "ibverbs_private.h"
#include "metaroce/metaroce_dv.h"

_Static_assert(sizeof(struct verbs_context_ops) == 76 * sizeof(void*), "76 ops in rdma-core 44");
_Static_assert(offsetof(struct verbs_device, ops) == sizeof(struct ibv_device), "ops after ibv_device");

size_t abi_c_sizeof_context_ops(void);
size_t abi_c_offsetof_verbs_device_sysfs(void);

size_t abi_c_sizeof_context_ops(void) { return sizeof(struct verbs_context_ops); }
size_t abi_c_offsetof_verbs_device_sysfs(void) { return offsetof(struct verbs_device, sysfs); }
