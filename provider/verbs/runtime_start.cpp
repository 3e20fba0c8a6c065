// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "runtime_start.h"

#include <net/if.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>

#include "metaroce/abi.h"
#include "metaroce/splitmix64.h"

namespace metaroce::verbs {
namespace {

// True when nothing is bound to (address, port) over UDP right now.
bool port_looks_free(const sockaddr_storage& address, uint16_t port) {
  sockaddr_storage a = address;
  socklen_t len = sizeof(sockaddr_in);
  if (a.ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in&>(a).sin_port = htons(port);
  } else {
    reinterpret_cast<sockaddr_in6&>(a).sin6_port = htons(port);
    len = sizeof(sockaddr_in6);
  }
  const int fd = ::socket(a.ss_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return true;  // let the runtime report the real error
  const bool ok = ::bind(fd, reinterpret_cast<const sockaddr*>(&a), len) == 0 || errno != EADDRINUSE;
  ::close(fd);
  return ok;
}

// The seed of the runtime's test drops: the option's, else one derived from
// the home port, so that contexts on different ports drop differently.
uint64_t test_seed_for(const Options& o, uint16_t home_port) {
  return o.test_seed ? o.test_seed : splitmix64_mix(home_port);
}

// The interface's entry `leaf` in sysfs (/sys/class/net/NAME/leaf); empty
// when the index names no interface.
std::string netdev_sysfs_path(uint32_t ifindex, const char* leaf) {
  char name[IF_NAMESIZE] = {};
  if (ifindex == 0 || !if_indextoname(ifindex, name)) return {};
  return std::string("/sys/class/net/") + name + "/" + leaf;
}

// The number in the interface's sysfs entry `leaf`, 0 unless it holds a
// positive one (reading `speed` fails with EINVAL where it is unknown).
uint64_t netdev_number(uint32_t ifindex, const char* leaf) {
  const std::string path = netdev_sysfs_path(ifindex, leaf);
  std::FILE* f = path.empty() ? nullptr : std::fopen(path.c_str(), "re");
  if (!f) return 0;
  long value = 0;
  const bool ok = std::fscanf(f, "%ld", &value) == 1;
  std::fclose(f);
  return ok && value > 0 ? static_cast<uint64_t>(value) : 0;
}

// The speed the kernel reports for the interface (ethtool's), 0 if it has
// none (loopback, some virtual devices) or it is unknown.
uint64_t netdev_speed_bps(uint32_t ifindex) { return netdev_number(ifindex, "speed") * 1'000'000; }

// A NIC has a device behind it in sysfs; loopback, veth, bridges and tunnels
// do not, and the kernel copies what they carry when it delivers it.
bool netdev_is_nic(uint32_t ifindex) {
  const std::string path = netdev_sysfs_path(ifindex, "device");
  struct stat st;
  return !path.empty() && ::stat(path.c_str(), &st) == 0;
}

bool use_zerocopy(const std::vector<Device::Plane>& planes, ZeroCopy setting) {
  if (setting != ZeroCopy::Auto) return setting == ZeroCopy::On;
  return std::all_of(planes.begin(), planes.end(), [](const Device::Plane& p) { return netdev_is_nic(p.ifindex); });
}

// `paths` rounded up to a multiple of `planes` (so that every plane gets as
// many), at most wire::kMaxPaths.
uint16_t paths_for_planes(size_t paths, size_t planes) {
  return static_cast<uint16_t>(
      std::min<size_t>((std::max<size_t>(paths, 1) + planes - 1) / planes * planes, wire::kMaxPaths / planes * planes));
}

// The payload that fits every plane's netdev.
uint32_t payload_for_planes(const std::vector<Device::Plane>& planes) {
  uint32_t link_mtu = UINT32_MAX;
  for (const Device::Plane& plane : planes) link_mtu = std::min(link_mtu, netdev_mtu(plane.ifindex));
  return metaroce_payload_for_link_mtu(link_mtu, planes.front().address.ss_family == AF_INET6);
}

// Sets what depends on the planes: their addresses, the paths (a multiple
// of the planes), the payload (unless chosen) and the link capacity.
void apply_planes(const std::vector<Device::Plane>& planes, const Options& o, io::RuntimeOptions& ro) {
  ro.plane_addresses.clear();
  for (size_t k = 1; k < planes.size(); ++k) ro.plane_addresses.push_back(planes[k].address_text);
  ro.endpoint.paths = paths_for_planes(ro.endpoint.paths, planes.size());
  if (o.mtu == 0) ro.endpoint.mtu = payload_for_planes(planes);
  if (const uint64_t link = o.link_bps ? o.link_bps : netdev_speed_bps(planes.front().ifindex)) {
    // Every path can carry its plane's whole link, and everything arrives
    // through the planes' links.
    ro.endpoint.path_rate_bps = link;
    ro.endpoint.inbound_capacity_bps = link * planes.size();
  }
}

// metaroced's [devices.NAME] planes for a device given one netdev: the
// netdevs resolved, the device's own first; `planes` unchanged (and a
// warning) when the list does not start with it or a netdev has no address.
void adopt_daemon_planes(const Device& device, const std::vector<std::string>& names,
                         std::vector<Device::Plane>& planes) {
  if (names.size() < 2 || planes.size() != 1) return;
  if (names.front() != device.netdev) {
    warn_once(device.name + ": metaroced's planes start with " + names.front() + ", not the device's netdev '" +
              device.netdev + "'; using one plane");
    return;
  }
  std::vector<Device::Plane> adopted{planes.front()};
  for (size_t k = 1; k < names.size(); ++k) {
    Device::Plane& plane = adopted.emplace_back();
    if (!resolve_plane(names[k], plane) || plane.address.ss_family != planes.front().address.ss_family) {
      warn_once(device.name + ": metaroced's plane " + names[k] + " has no usable address; using one plane");
      return;
    }
  }
  planes = std::move(adopted);
}

// Creates the runtime on the home port and source ports metaroced leases;
// null (and `daemon` reset) when there is no daemon or its lease fails.
// Sets o.progress_threads, unless set, to the device's setting if it has one.
std::unique_ptr<io::Runtime> start_with_daemon(const Device& device, Options& o, io::RuntimeOptions ro,
                                               std::vector<Device::Plane>& planes,
                                               std::unique_ptr<DaemonClient>& daemon) {
  std::string why;
  daemon = DaemonClient::connect(why);
  if (!daemon) {
    warn_once("no metaroced (" + why + "); choosing ports locally, integrity mode (datagrams are not authenticated)");
    return nullptr;
  }
  const transport::CongestionConfig baseline = ro.endpoint.cc;
  const double baseline_rate_hint = ro.endpoint.rate_hint_utilization;
  // A leased port can still be taken by a process that bypasses the daemon:
  // lease again (the daemon never hands out the same port twice in a row).
  for (int attempt = 0; attempt < 4; ++attempt) {
    std::optional<DaemonLease> lease = daemon->lease(device.name, device.address_text, o.paths_explicit ? o.paths : 0,
                                                     o.traffic_class, o.home_port, why);
    if (!lease) break;
    if (lease->home_port < kHomePortBase || lease->home_port >= kHomePortBase + kHomePortCount) {
      why = "leased home port " + std::to_string(lease->home_port) + " is outside [" + std::to_string(kHomePortBase) +
            ", " + std::to_string(kHomePortBase + kHomePortCount) + ")";
      break;
    }
    ro.home_port = lease->home_port;
    ro.endpoint.qpn_base = qpn_base_for_port(ro.home_port);
    ro.test_seed = test_seed_for(o, ro.home_port);
    ro.path_source_ports = lease->source_ports;
    ro.endpoint.security = lease->security;
    if (!o.paths_explicit) ro.endpoint.paths = static_cast<uint16_t>(lease->source_ports.size());
    std::vector<Device::Plane> leased_planes = planes;
    adopt_daemon_planes(device, lease->planes, leased_planes);
    apply_planes(leased_planes, o, ro);
    // Path i binds port i % leased on plane i % planes: a port number is
    // used once per plane's address.
    for (size_t i = lease->source_ports.size(); !lease->source_ports.empty() && i < ro.endpoint.paths; ++i)
      ro.path_source_ports.push_back(lease->source_ports[i % lease->source_ports.size()]);
    if (!o.busy_poll_explicit && lease->busy_poll_us) ro.busy_poll_ns = uint64_t{*lease->busy_poll_us} * 1000;
    if (!o.progress_threads && lease->progress_threads) o.progress_threads = *lease->progress_threads;
    ctl::apply_policy(lease->policy, ro.endpoint.cc);
    if (lease->policy.rate_hint_utilization) ro.endpoint.rate_hint_utilization = *lease->policy.rate_hint_utilization;
    std::unique_ptr<io::Runtime> runtime = io::Runtime::create(ro, why);
    if (runtime) {
      planes = std::move(leased_planes);
      daemon->attach(runtime.get(), device.name, lease->stats_interval_ms, baseline, baseline_rate_hint);
      return runtime;
    }
    if (why.find("in use") == std::string::npos) break;
  }
  warn_once("metaroced lease failed (" + why +
            "); choosing ports locally, integrity mode (datagrams are not authenticated)");
  daemon.reset();
  return nullptr;
}

}  // namespace

void warn_once(const std::string& message) {
  static std::atomic<bool> warned{false};
  if (!warned.exchange(true)) std::fprintf(stderr, "metaroce: %s\n", message.c_str());
}

uint32_t netdev_mtu(uint32_t ifindex) {
  constexpr uint32_t kEthernetMtu = 1500;
  const uint64_t mtu = netdev_number(ifindex, "mtu");
  return mtu > 0 ? static_cast<uint32_t>(std::min<uint64_t>(mtu, UINT32_MAX)) : kEthernetMtu;
}

namespace {

// The runtime on a home port chosen here: o.home_port, or the first free one.
std::unique_ptr<io::Runtime> start_locally(const Device& device, const Options& o, io::RuntimeOptions& ro,
                                           std::string& error) {
  const uint32_t first = o.home_port ? o.home_port : kHomePortBase;
  const uint32_t last = o.home_port ? o.home_port + 1 : kHomePortBase + kHomePortCount;
  int races = 0;
  for (uint32_t port = first; port < last; ++port) {
    if (!o.home_port && !port_looks_free(device.address, static_cast<uint16_t>(port))) continue;
    ro.home_port = static_cast<uint16_t>(port);
    ro.endpoint.qpn_base = qpn_base_for_port(ro.home_port);
    ro.test_seed = test_seed_for(o, ro.home_port);
    std::unique_ptr<io::Runtime> runtime = io::Runtime::create(ro, error);
    if (runtime) return runtime;
    // Another process may have taken the port since the probe.
    if (o.home_port || ++races > 16 || error.find("in use") == std::string::npos) return nullptr;
  }
  if (error.empty()) error = "no free home port on " + device.address_text;
  return nullptr;
}

}  // namespace

std::unique_ptr<io::Runtime> start_runtime(const Device& device, Options& o, std::vector<Device::Plane>& planes,
                                           const std::shared_ptr<transport::MemoryRegistry>& memory,
                                           std::unique_ptr<DaemonClient>& daemon, std::string& error) {
  io::RuntimeOptions ro;
  ro.memory = memory;
  ro.local_address = device.address_text;
  ro.allow_io_uring = o.io_uring;
  ro.inline_transmit = o.inline_transmit;
  ro.zerocopy = use_zerocopy(planes, o.zerocopy);
  ro.busy_poll_ns = o.busy_poll_ns;
  ro.progress_slice_ns = o.progress_slice_ns;
  ro.test_drop_probability = o.test_loss;
  ro.endpoint.profile = o.profile;
  ro.endpoint.paths = o.paths;
  ro.endpoint.mtu = o.mtu;
  ro.endpoint.max_qps = kMaxQpsPerContext;
  ro.endpoint.max_outstanding_messages = kMaxQpWr;
  ro.endpoint.base_rtt_ns = o.base_rtt_ns;
  ro.endpoint.cc.target_queue_delay_ns = o.target_delay_ns;
  ro.endpoint.ack_delay_ns = o.ack_delay_ns;
  ro.endpoint.min_rto_ns = o.min_rto_ns;
  apply_planes(planes, o, ro);
  std::unique_ptr<io::Runtime> runtime;
  // A home port the caller chose is theirs: no daemon then. One the kernel
  // chose is leased as it is.
  if (o.use_daemon && (!o.home_port || o.home_port_from_kernel))
    runtime = start_with_daemon(device, o, ro, planes, daemon);
  if (!runtime) runtime = start_locally(device, o, ro, error);
  // The payload the engine was given (apply_planes chose it when o.mtu was 0).
  if (runtime && o.mtu == 0)
    o.mtu = runtime->with_engine([](transport::Endpoint& e, transport::Time) { return e.config().mtu; });
  return runtime;
}

bool start_shards(const Device& device, Options& o, std::vector<Device::Plane>& planes,
                  const std::shared_ptr<transport::MemoryRegistry>& memory, std::vector<std::unique_ptr<Shard>>& shards,
                  std::string& error) {
  auto first = std::make_unique<Shard>();
  first->runtime = start_runtime(device, o, planes, memory, first->daemon, error);
  if (!first->runtime) return false;
  uint32_t wanted = o.progress_threads;
  if (wanted == 0) wanted = default_progress_threads();
  if (o.home_port_from_kernel) {
    // Said only to whoever asked for more, not to every user of a many-core host.
    if (o.progress_threads > 1)
      warn_once(device.name + ": a kernel device's context has one port slot, so one progress thread");
    wanted = 1;
  }
  shards.push_back(std::move(first));
  // The home port a caller chose is the first shard's; the others take free
  // ones (or metaroced's leases).
  Options more = o;
  more.home_port = 0;
  while (shards.size() < wanted) {
    auto shard = std::make_unique<Shard>();
    std::string why;
    std::vector<Device::Plane> same_planes = planes;
    shard->runtime = start_runtime(device, more, same_planes, memory, shard->daemon, why);
    if (!shard->runtime) {
      warn_once(device.name + ": " + std::to_string(shards.size()) + " progress threads, not " +
                std::to_string(wanted) + " (" + why + ")");
      break;
    }
    shards.push_back(std::move(shard));
  }
  return true;
}

}  // namespace metaroce::verbs
