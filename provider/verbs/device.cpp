// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
//
// MetaRoCE devices: a name bound to a local IP address, as a verbs_device
// whose sysfs pointer is NULL. libibverbs' verbs_open_device() then opens no
// character device and passes cmd_fd = -1 to our alloc_context, which is all
// a kernel-less provider needs. The devices of a process live until it exits
// (our own reference keeps libibverbs' refcount above zero).
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <mutex>
#include <new>

#include "metaroce/abi.h"
#include "provider.h"

namespace metaroce::verbs {
namespace {

// Devices named metaroce*; match_device below finds the others.
const verbs_match_ent kMatchTable[] = {
    {nullptr, {"rdma_device:*Nmetaroce*"}, 0, 0, VERBS_MATCH_MODALIAS},
    {nullptr, {nullptr}, 0, 0, VERBS_MATCH_SENTINEL},
};

// Reads the first line of a sysfs file; empty if it cannot.
std::string read_sysfs_line(const std::string& path) {
  std::string line;
  if (FILE* f = std::fopen(path.c_str(), "re")) {
    char buf[256] = {};
    if (std::fgets(buf, sizeof buf, f)) line = buf;
    std::fclose(f);
  }
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  return line;
}

// metaroce.ko devices carry no device/modalias (there is no bus device
// behind them) and may have any name, so they are recognised by the
// firmware version string the module reports ("metaroce <version>").
bool match_device(verbs_sysfs_dev* sysfs_dev) {
  const auto* head = reinterpret_cast<const verbs_sysfs_dev_head*>(sysfs_dev);
  const std::string fw = read_sysfs_line(std::string(head->ibdev_path) + "/fw_ver");
  return fw.rfind(METAROCE_HCA_TYPE " ", 0) == 0;
}

verbs_device* alloc_device(verbs_sysfs_dev* sysfs_dev) {
  const auto* head = reinterpret_cast<const verbs_sysfs_dev_head*>(sysfs_dev);
  auto* d = new (std::nothrow) Device;
  if (!d) {
    errno = ENOMEM;
    return nullptr;
  }
  d->kernel = true;
  d->name = head->ibdev_name;
  // The netdev of port 1: the RDMA core lists it for every GID entry.
  d->netdev = read_sysfs_line(std::string(head->ibdev_path) + "/ports/1/gid_attrs/ndevs/0");
  // libibverbs fills the ibv_device fields, ops and refcount after this.
  return &d->vdev;
}

void uninit_device(verbs_device* vdev) {
  // Kernel-less devices are never released (this process keeps a
  // reference); kernel devices go when libibverbs drops the last one.
  Device* d = reinterpret_cast<Device*>(vdev);
  if (d->kernel) delete d;
}

struct Registry {
  std::mutex mutex;
  std::vector<Device*> devices;
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: devices outlive static destructors
  return *r;
}

void copy_name(char* dst, size_t size, const std::string& src) {
  const size_t n = std::min(size - 1, src.size());
  std::memcpy(dst, src.data(), n);
  dst[n] = 0;
}

void fill_identity(Device& d, uint32_t index) {
  std::memset(&d.gid, 0, sizeof d.gid);
  uint8_t guid[8] = {0x02, 'M', 'R', static_cast<uint8_t>(index), 0, 0, 0, 0};
  if (d.address.ss_family == AF_INET) {
    const auto& sin = reinterpret_cast<const sockaddr_in&>(d.address);
    d.gid.raw[10] = 0xff;
    d.gid.raw[11] = 0xff;
    std::memcpy(&d.gid.raw[12], &sin.sin_addr, 4);
    std::memcpy(&guid[4], &sin.sin_addr, 4);
  } else {
    const auto& sin6 = reinterpret_cast<const sockaddr_in6&>(d.address);
    std::memcpy(d.gid.raw, &sin6.sin6_addr, 16);
    std::memcpy(&guid[4], &sin6.sin6_addr.s6_addr[12], 4);
  }
  std::memcpy(&d.guid_be, guid, 8);  // bytes already in network order
}

}  // namespace

const verbs_device_ops kDeviceOps = {
    "metaroce",     // name
    0,              // match_min_abi_version
    INT_MAX,        // match_max_abi_version
    kMatchTable,    // match_table
    nullptr,        // static_providers
    match_device,   // match_device
    alloc_context,  // alloc_context
    nullptr,        // import_context
    alloc_device,   // alloc_device
    uninit_device,  // uninit_device
};

Device* device_of(ibv_device* device) {
  if (!device) return nullptr;
  auto* vdev = reinterpret_cast<verbs_device*>(device);
  if (vdev->ops != &kDeviceOps) return nullptr;
  return reinterpret_cast<Device*>(vdev);
}

std::string address_text_of(const sockaddr_storage& address) {
  char text[INET6_ADDRSTRLEN] = {};
  if (address.ss_family == AF_INET)
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in&>(address).sin_addr, text, sizeof text);
  else inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6&>(address).sin6_addr, text, sizeof text);
  return text;
}

bool resolve_kernel_device(Device& d) {
  std::lock_guard<std::mutex> lock(d.kernel_mutex);
  if (d.resolved) return true;
  if (d.netdev.empty()) {
    errno = ENODEV;  // no GID entry names a netdev: the port has none
    return false;
  }
  sockaddr_storage address{};
  std::string netdev;
  uint32_t ifindex = 0;
  // The netdev must be visible here (this network namespace) with an address.
  if (!resolve_address(d.netdev, address, netdev, ifindex)) {
    errno = EADDRNOTAVAIL;
    return false;
  }
  d.address = address;
  d.address_text = address_text_of(address);
  d.ifindex = ifindex;
  const uint64_t guid = d.guid_be;  // the kernel's, set from the context response
  fill_identity(d, 0);
  if (guid) d.guid_be = guid;
  d.resolved = true;
  return true;
}

bool resolve_plane(const std::string& netdev_or_ip, Device::Plane& plane) {
  if (!resolve_address(netdev_or_ip, plane.address, plane.netdev, plane.ifindex)) return false;
  plane.address_text = address_text_of(plane.address);
  return true;
}

bool resolve_address(const std::string& netdev_or_ip, sockaddr_storage& out, std::string& netdev, uint32_t& ifindex) {
  std::memset(&out, 0, sizeof out);
  netdev.clear();
  ifindex = 0;
  in_addr v4{};
  in6_addr v6{};
  if (inet_pton(AF_INET, netdev_or_ip.c_str(), &v4) == 1) {
    auto& sin = reinterpret_cast<sockaddr_in&>(out);
    sin.sin_family = AF_INET;
    sin.sin_addr = v4;
  } else if (inet_pton(AF_INET6, netdev_or_ip.c_str(), &v6) == 1) {
    auto& sin6 = reinterpret_cast<sockaddr_in6&>(out);
    sin6.sin6_family = AF_INET6;
    sin6.sin6_addr = v6;
  } else {
    netdev = netdev_or_ip;
  }
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) {
    if (!netdev.empty()) return false;  // errno from getifaddrs
    return true;
  }
  // An interface: its first IPv4 address, else its first IPv6 address. A
  // literal: the interface that carries it, for ndev_ifindex.
  const ifaddrs* v4_match = nullptr;
  const ifaddrs* v6_match = nullptr;
  for (const ifaddrs* a = list; a; a = a->ifa_next) {
    if (!a->ifa_addr) continue;
    const int family = a->ifa_addr->sa_family;
    if (family != AF_INET && family != AF_INET6) continue;
    if (!netdev.empty()) {
      if (netdev != a->ifa_name) continue;
      if (family == AF_INET && !v4_match) v4_match = a;
      if (family == AF_INET6 && !v6_match) v6_match = a;
    } else if (family == out.ss_family) {
      const bool same = family == AF_INET ? std::memcmp(&reinterpret_cast<const sockaddr_in*>(a->ifa_addr)->sin_addr,
                                                        &reinterpret_cast<const sockaddr_in&>(out).sin_addr, 4) == 0
                                          : std::memcmp(&reinterpret_cast<const sockaddr_in6*>(a->ifa_addr)->sin6_addr,
                                                        &reinterpret_cast<const sockaddr_in6&>(out).sin6_addr, 16) == 0;
      if (same && !v4_match) v4_match = a;
    }
  }
  const ifaddrs* chosen = v4_match ? v4_match : v6_match;
  bool ok = true;
  if (chosen) {
    ifindex = if_nametoindex(chosen->ifa_name);
    if (!netdev.empty()) {
      if (chosen->ifa_addr->sa_family == AF_INET) std::memcpy(&out, chosen->ifa_addr, sizeof(sockaddr_in));
      else std::memcpy(&out, chosen->ifa_addr, sizeof(sockaddr_in6));
    }
  } else if (!netdev.empty()) {
    errno = EINVAL;  // no such interface, or it has no address
    ok = false;
  }
  freeifaddrs(list);
  return ok;
}

namespace {

// "netdev_or_ip[,netdev_or_ip...]" resolved, one entry per plane; false
// (errno EINVAL) for an empty item, more than kMaxDevicePlanes, planes of
// different address families or one address named twice.
bool resolve_planes(const std::string& spec, std::vector<Device::Plane>& planes) {
  planes.clear();
  size_t start = 0;
  while (true) {
    const size_t end = std::min(spec.find(',', start), spec.size());
    Device::Plane plane;
    if (end == start || planes.size() == kMaxDevicePlanes || !resolve_plane(spec.substr(start, end - start), plane)) {
      if (end == start || planes.size() == kMaxDevicePlanes) errno = EINVAL;
      return false;
    }
    for (const Device::Plane& other : planes) {
      if (other.address.ss_family != plane.address.ss_family || other.address_text == plane.address_text) {
        errno = EINVAL;
        return false;
      }
    }
    planes.push_back(std::move(plane));
    if (end == spec.size()) return true;
    start = end + 1;
  }
}

// The addresses of a device's planes, comma-separated.
std::string planes_text(const std::string& first, const std::vector<Device::Plane>& more) {
  std::string text = first;
  for (const Device::Plane& p : more) text += "," + p.address_text;
  return text;
}

}  // namespace

Device* find_or_create_device(const char* name, const char* netdev_or_ip) {
  if (!name || !*name || std::strlen(name) >= IBV_SYSFS_NAME_MAX || !netdev_or_ip || !*netdev_or_ip) {
    errno = EINVAL;
    return nullptr;
  }
  std::vector<Device::Plane> planes;
  if (!resolve_planes(netdev_or_ip, planes)) return nullptr;
  const std::vector<Device::Plane> more(std::make_move_iterator(planes.begin() + 1),
                                        std::make_move_iterator(planes.end()));

  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (Device* d : r.devices) {
    if (d->name != name) continue;
    if (planes_text(d->address_text, d->more_planes) != planes_text(planes.front().address_text, more)) {
      errno = EEXIST;
      return nullptr;
    }
    return d;
  }
  auto* d = new Device;
  d->name = name;
  d->netdev = planes.front().netdev;
  d->address_text = planes.front().address_text;
  d->address = planes.front().address;
  d->ifindex = planes.front().ifindex;
  d->more_planes = more;
  fill_identity(*d, static_cast<uint32_t>(r.devices.size()));
  ibv_device& dev = d->vdev.device;
  dev.node_type = IBV_NODE_CA;
  dev.transport_type = IBV_TRANSPORT_IB;  // what RoCE devices report
  copy_name(dev.name, sizeof dev.name, d->name);
  copy_name(dev.dev_name, sizeof dev.dev_name, "metaroce-" + d->name);
  dev.dev_path[0] = 0;    // no character device
  dev.ibdev_path[0] = 0;  // no sysfs directory
  d->vdev.ops = &kDeviceOps;
  __atomic_store_n(&d->vdev.refcount, 1, __ATOMIC_RELEASE);  // our reference, never dropped
  d->vdev.sysfs = nullptr;
  d->vdev.core_support = 0;
  r.devices.push_back(d);
  return d;
}

}  // namespace metaroce::verbs

using namespace metaroce::verbs;

// Registers the provider with libibverbs when the library is loaded, as
// every provider does (harmless when no kernel device matches).
__attribute__((constructor)) static void metaroce_register_driver() { verbs_register_driver_34(&kDeviceOps); }

extern "C" {

ibv_device** metaroce_dv_get_device_list(const metaroce_dv_device_spec* specs, int count, int* num) {
  if (num) *num = 0;
  std::vector<std::pair<std::string, std::string>> wanted;
  if (specs) {
    if (count < 0) {
      errno = EINVAL;
      return nullptr;
    }
    for (int i = 0; i < count; ++i) {
      if (!specs[i].name || !specs[i].netdev_or_ip) {
        errno = EINVAL;
        return nullptr;
      }
      wanted.emplace_back(specs[i].name, specs[i].netdev_or_ip);
    }
  } else if (const char* env = std::getenv("METAROCE_DEVICES")) {
    // name=netdev_or_ip[,netdev_or_ip...][,name=...]: an item without '='
    // is a further plane of the device before it.
    std::string list = env;
    size_t start = 0;
    while (start <= list.size()) {
      size_t end = list.find(',', start);
      if (end == std::string::npos) end = list.size();
      const std::string item = list.substr(start, end - start);
      start = end + 1;
      if (item.empty()) continue;
      const size_t eq = item.find('=');
      if (eq == std::string::npos && !wanted.empty()) {
        wanted.back().second += "," + item;
        continue;
      }
      if (eq == std::string::npos || eq == 0 || eq + 1 == item.size()) {
        errno = EINVAL;
        return nullptr;
      }
      wanted.emplace_back(item.substr(0, eq), item.substr(eq + 1));
    }
  }
  auto** out = static_cast<ibv_device**>(std::calloc(wanted.size() + 1, sizeof(ibv_device*)));
  if (!out) {
    errno = ENOMEM;
    return nullptr;
  }
  for (size_t i = 0; i < wanted.size(); ++i) {
    Device* d = find_or_create_device(wanted[i].first.c_str(), wanted[i].second.c_str());
    if (!d) {
      const int saved = errno;
      std::free(out);
      errno = saved;
      return nullptr;
    }
    out[i] = &d->vdev.device;
  }
  if (num) *num = static_cast<int>(wanted.size());
  return out;
}

void metaroce_dv_free_device_list(ibv_device** list) { std::free(list); }

ibv_context* metaroce_dv_open(ibv_device* device, const metaroce_dv_options* opts) {
  if (!device_of(device)) {
    errno = EINVAL;
    return nullptr;
  }
  // private_data reaches our alloc_context unchanged.
  return verbs_open_device(device, const_cast<metaroce_dv_options*>(opts));
}

ibv_context* metaroce_dv_open_device(const char* name, const char* netdev_or_ip, const metaroce_dv_options* opts) {
  Device* d = find_or_create_device(name, netdev_or_ip);
  if (!d) return nullptr;
  return metaroce_dv_open(&d->vdev.device, opts);
}

bool metaroce_dv_is_metaroce_device(ibv_device* device) { return device_of(device) != nullptr; }

bool metaroce_dv_is_metaroce_context(ibv_context* context) { return context && device_of(context->device) != nullptr; }

uint16_t metaroce_dv_home_port(ibv_context* context) {
  if (!metaroce_dv_is_metaroce_context(context)) return 0;
  return context_of(context)->shards.front()->runtime->home_port();
}

int metaroce_dv_progress_threads(ibv_context* context) {
  if (!metaroce_dv_is_metaroce_context(context)) return 0;
  return static_cast<int>(context_of(context)->shards.size());
}

__be64 metaroce_priv_device_guid(ibv_device* device) {
  Device* d = device_of(device);
  return d ? d->guid_be : 0;
}

}  // extern "C"
