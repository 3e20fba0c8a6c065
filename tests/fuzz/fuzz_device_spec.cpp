// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// The provider's device specifications on arbitrary text: the netdev_or_ip
// of metaroce_dv_get_device_list ("eth0,eth1": one plane each) and the
// METAROCE_DEVICES list. Neither may crash; a list is returned whole, with
// MetaRoCE devices only, or not at all with errno saying why.
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "metaroce/metaroce_dv.h"

namespace {

void check(ibv_device** list, int count) {
  if (!list) {
    if (errno != EINVAL && errno != EEXIST && errno != ENOMEM) std::abort();
    return;
  }
  for (int i = 0; i < count; ++i)
    if (!list[i] || !metaroce_dv_is_metaroce_device(list[i])) std::abort();
  if (list[count] != nullptr) std::abort();
  metaroce_dv_free_device_list(list);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  // One name: the registry then holds at most one device from this path.
  const metaroce_dv_device_spec spec = {"mrfuzz", text.c_str()};
  int count = -1;
  ibv_device** list = metaroce_dv_get_device_list(&spec, 1, &count);
  if (list && count != 1) std::abort();
  check(list, count);
  if (setenv("METAROCE_DEVICES", text.c_str(), 1) == 0) {
    list = metaroce_dv_get_device_list(nullptr, 0, &count);
    check(list, count);
    unsetenv("METAROCE_DEVICES");
  }
  return 0;
}
