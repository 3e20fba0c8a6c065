// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// libmetaroce-preload.so: lets unmodified verbs programs use MetaRoCE
// devices. Loaded with LD_PRELOAD (tools/metaroce-run does it), its
// definitions come before libibverbs' in the global lookup scope, so the
// program's calls below land here. For MetaRoCE devices/contexts they are
// answered by the provider; everything else goes to libibverbs' own
// function, found with dlvsym(RTLD_NEXT, name, version).
//
// Symbol versions: libibverbs exports these as name@@IBVERBS_x.y and the
// program's references carry that version (e.g. ibv_get_device_list@
// IBVERBS_1.1, ibv_create_comp_channel@IBVERBS_1.0). The dynamic linker
// binds a versioned reference only to a definition of the same version name
// (or to an unversioned one), so preload.map defines each function under
// exactly libibverbs' default version: references to the old compat
// versions (ibv_get_device_list@IBVERBS_1.0 ...) keep going to libibverbs.
//
// Interposed, and why (libibverbs 44):
//  ibv_get_device_list / ibv_free_device_list  append the devices of
//      METAROCE_DEVICES; free what we allocated. (No sysfs device, no
//      provider match otherwise; with no RDMA kernel support the real call
//      even fails with ENOSYS.)
//  ibv_get_device_guid   reads sysfs node_guid (returns 0 without sysfs).
//  ibv_query_gid, _ibv_query_gid_ex, _ibv_query_gid_table,
//  ibv_query_gid_type    ioctl on cmd_fd, fallback to sysfs GID files.
//  ibv_query_pkey, ibv_get_pkey_index   sysfs pkeys files.
//  ibv_create_comp_channel / ibv_destroy_comp_channel   kernel command
//      (CREATE_COMP_CHANNEL write on cmd_fd); ours are pipes.
// Not interposed: ibv_open_device (works: no sysfs means cmd_fd = -1),
// ibv_get_cq_event / ibv_ack_cq_events (read the pipe), ibv_get_async_event
// (reads the context's async_fd, a pipe here), and every call that
// dispatches through the context ops.
#include <dlfcn.h>
#include <endian.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "provider.h"

namespace {

template <typename Fn>
Fn real(const char* name, const char* version) {
  void* sym = dlvsym(RTLD_NEXT, name, version);
  if (!sym) sym = dlsym(RTLD_NEXT, name);
  return reinterpret_cast<Fn>(sym);
}

#define REAL(name, version) static const auto real_##name = real<decltype(&name)>(#name, version)

struct Lists {
  std::mutex mutex;
  std::unordered_map<ibv_device**, ibv_device**> combined_to_real;
};

Lists& lists() {
  static Lists* l = new Lists;  // never destroyed
  return *l;
}

bool ours(ibv_context* context) { return metaroce_dv_is_metaroce_context(context); }

int fail(int err) {
  errno = err;
  return -1;
}

}  // namespace

extern "C" {

ibv_device** ibv_get_device_list(int* num) {
  REAL(ibv_get_device_list, "IBVERBS_1.1");
  REAL(ibv_free_device_list, "IBVERBS_1.1");
  int n_real = 0;
  ibv_device** real_list = real_ibv_get_device_list ? real_ibv_get_device_list(&n_real) : nullptr;
  const int real_errno = errno;
  if (!real_list) n_real = 0;
  int n_ours = 0;
  ibv_device** our_list = metaroce_dv_get_device_list(nullptr, 0, &n_ours);
  if (!our_list) {
    static std::once_flag warned;
    const int err = errno;
    std::call_once(warned, [err] {
      std::fprintf(stderr, "metaroce: METAROCE_DEVICES='%s': %s\n",
                   std::getenv("METAROCE_DEVICES") ? std::getenv("METAROCE_DEVICES") : "", std::strerror(err));
    });
    n_ours = 0;
  }
  if (n_ours == 0) {
    metaroce_dv_free_device_list(our_list);
    if (num) *num = n_real;
    if (!real_list) errno = real_errno;
    return real_list;
  }
  auto** combined =
      static_cast<ibv_device**>(std::calloc(static_cast<size_t>(n_real + n_ours) + 1, sizeof(ibv_device*)));
  if (!combined) {
    metaroce_dv_free_device_list(our_list);
    if (real_list && real_ibv_free_device_list) real_ibv_free_device_list(real_list);
    if (num) *num = 0;
    errno = ENOMEM;
    return nullptr;
  }
  for (int i = 0; i < n_real; ++i) combined[i] = real_list[i];
  for (int i = 0; i < n_ours; ++i) combined[n_real + i] = our_list[i];
  metaroce_dv_free_device_list(our_list);  // the devices themselves persist
  {
    Lists& l = lists();
    std::lock_guard<std::mutex> lock(l.mutex);
    l.combined_to_real[combined] = real_list;
  }
  if (num) *num = n_real + n_ours;
  return combined;
}

void ibv_free_device_list(ibv_device** list) {
  REAL(ibv_free_device_list, "IBVERBS_1.1");
  if (!list) return;
  ibv_device** real_list = list;
  bool combined = false;
  {
    Lists& l = lists();
    std::lock_guard<std::mutex> lock(l.mutex);
    auto it = l.combined_to_real.find(list);
    if (it != l.combined_to_real.end()) {
      real_list = it->second;
      combined = true;
      l.combined_to_real.erase(it);
    }
  }
  // The real list drops libibverbs' references to its devices.
  if (real_list && real_ibv_free_device_list) real_ibv_free_device_list(real_list);
  if (combined) std::free(list);
}

__be64 ibv_get_device_guid(ibv_device* device) {
  REAL(ibv_get_device_guid, "IBVERBS_1.1");
  if (metaroce_dv_is_metaroce_device(device)) return metaroce_priv_device_guid(device);
  return real_ibv_get_device_guid(device);
}

int ibv_query_gid(ibv_context* context, uint8_t port_num, int index, union ibv_gid* gid) {
  REAL(ibv_query_gid, "IBVERBS_1.1");
  if (!ours(context)) return real_ibv_query_gid(context, port_num, index, gid);
  const int err = metaroce_priv_query_gid(context, port_num, index, gid);
  return err ? fail(err) : 0;
}

int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index, ibv_gid_entry* entry, uint32_t flags,
                      size_t entry_size) {
  REAL(_ibv_query_gid_ex, "IBVERBS_1.11");
  if (!ours(context)) return real__ibv_query_gid_ex(context, port_num, gid_index, entry, flags, entry_size);
  return metaroce_priv_query_gid_ex(context, port_num, gid_index, entry, flags, entry_size);
}

ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries, uint32_t flags,
                             size_t entry_size) {
  REAL(_ibv_query_gid_table, "IBVERBS_1.11");
  if (!ours(context)) return real__ibv_query_gid_table(context, entries, max_entries, flags, entry_size);
  return metaroce_priv_query_gid_table(context, entries, max_entries, flags, entry_size);
}

int ibv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index, ibv_gid_type_sysfs* type) {
  REAL(ibv_query_gid_type, "IBVERBS_PRIVATE_34");
  if (!ours(context)) return real_ibv_query_gid_type(context, port_num, index, type);
  const int err = metaroce_priv_query_gid_type(context, port_num, index, type);
  return err ? fail(err) : 0;
}

int ibv_query_pkey(ibv_context* context, uint8_t port_num, int index, __be16* pkey) {
  REAL(ibv_query_pkey, "IBVERBS_1.1");
  if (!ours(context)) return real_ibv_query_pkey(context, port_num, index, pkey);
  const int err = metaroce_priv_query_pkey(context, port_num, index, pkey);
  return err ? fail(err) : 0;
}

int ibv_get_pkey_index(ibv_context* context, uint8_t port_num, __be16 pkey) {
  REAL(ibv_get_pkey_index, "IBVERBS_1.5");
  if (!ours(context)) return real_ibv_get_pkey_index(context, port_num, pkey);
  __be16 only = 0;
  if (metaroce_priv_query_pkey(context, port_num, 0, &only) != 0) return fail(EINVAL);
  return pkey == only ? 0 : fail(ENOENT);
}

ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  REAL(ibv_create_comp_channel, "IBVERBS_1.0");
  if (!ours(context)) return real_ibv_create_comp_channel(context);
  return metaroce_priv_create_comp_channel(context);
}

int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  REAL(ibv_destroy_comp_channel, "IBVERBS_1.0");
  if (!metaroce_priv_is_comp_channel(channel)) return real_ibv_destroy_comp_channel(channel);
  return metaroce_priv_destroy_comp_channel(channel);
}

}  // extern "C"
