// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "plane_monitor.h"
#include "library_thread.h"

#include <net/if.h>
#include <netlink/cache.h>
#include <netlink/netlink.h>
#include <netlink/route/link.h>
#include <poll.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <thread>

namespace metaroce::io {
namespace {

class PlaneMonitorImpl final : public PlaneMonitor {
 public:
  PlaneMonitorImpl(std::vector<uint32_t> ifindexes, std::function<void(uint16_t, bool)> on_change)
      : ifindexes_(std::move(ifindexes)), on_change_(std::move(on_change)), up_(ifindexes_.size(), true) {}

  ~PlaneMonitorImpl() override {
    if (thread_.joinable()) {
      const uint64_t one = 1;
      (void)!::write(stop_fd_, &one, sizeof one);
      thread_.join();
    }
    if (stop_fd_ >= 0) ::close(stop_fd_);
    if (manager_) nl_cache_mngr_free(manager_);  // and the cache
  }

  bool open(std::string& error) {
    stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (stop_fd_ < 0) {
      error = "eventfd failed";
      return false;
    }
    int err = nl_cache_mngr_alloc(nullptr, NETLINK_ROUTE, 0, &manager_);
    if (err >= 0) err = nl_cache_mngr_add(manager_, "route/link", nullptr, nullptr, &links_);
    if (err < 0) {
      error = std::string("rtnetlink: ") + nl_geterror(err);
      return false;
    }
    thread_ = start_library_thread([this] { run(); });
    return true;
  }

 private:
  void run() {
    pthread_setname_np(pthread_self(), "metaroce-planes");
    report_changes();
    pollfd fds[2] = {{nl_cache_mngr_get_fd(manager_), POLLIN, 0}, {stop_fd_, POLLIN, 0}};
    while (::poll(fds, 2, -1) >= 0 || errno == EINTR) {
      if (fds[1].revents != 0) return;
      if (fds[0].revents != 0) {
        nl_cache_mngr_data_ready(manager_);
        report_changes();
      }
    }
  }

  // Compares every plane's netdev with what was last reported.
  void report_changes() {
    for (size_t k = 0; k < ifindexes_.size(); ++k) {
      if (ifindexes_[k] == 0) continue;
      bool up = false;
      if (rtnl_link* link = rtnl_link_get(links_, static_cast<int>(ifindexes_[k]))) {
        const unsigned flags = rtnl_link_get_flags(link);
        up = (flags & IFF_UP) != 0 && (flags & IFF_RUNNING) != 0;
        rtnl_link_put(link);
      }
      if (up == up_[k]) continue;
      up_[k] = up;
      on_change_(static_cast<uint16_t>(k), up);
    }
  }

  const std::vector<uint32_t> ifindexes_;
  const std::function<void(uint16_t, bool)> on_change_;
  std::vector<bool> up_;  // as last reported (all up before the first report)
  nl_cache_mngr* manager_ = nullptr;
  nl_cache* links_ = nullptr;
  int stop_fd_ = -1;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<PlaneMonitor> PlaneMonitor::start(std::vector<uint32_t> ifindexes,
                                                  std::function<void(uint16_t plane, bool up)> on_change,
                                                  std::string& error) {
  auto monitor = std::make_unique<PlaneMonitorImpl>(std::move(ifindexes), std::move(on_change));
  if (!monitor->open(error)) return nullptr;
  return monitor;
}

}  // namespace metaroce::io
