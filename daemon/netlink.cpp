// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "netlink.h"

#include <arpa/inet.h>
#include <net/if.h>
#include <netlink/cache.h>
#include <netlink/netlink.h>
#include <netlink/route/addr.h>
#include <netlink/route/link.h>
#include <netlink/route/route.h>

#include <cstring>

namespace metaroce::daemon {
namespace {

std::string addr_text(nl_addr* a) {
  if (!a) return "";
  char buf[128];
  return nl_addr2str(a, buf, sizeof buf);
}

class NetlinkImpl final : public Netlink {
 public:
  explicit NetlinkImpl(std::function<void(const NetChange&)> listener) : listener_(std::move(listener)) {}
  ~NetlinkImpl() override {
    if (mngr_) nl_cache_mngr_free(mngr_);
  }

  bool open(std::string& error) {
    int err = nl_cache_mngr_alloc(nullptr, NETLINK_ROUTE, NL_AUTO_PROVIDE, &mngr_);
    if (err < 0) return fail(error, "nl_cache_mngr_alloc", err);
    if ((err = nl_cache_mngr_add(mngr_, "route/link", &NetlinkImpl::changed, this, &links_)) < 0)
      return fail(error, "route/link", err);
    if ((err = nl_cache_mngr_add(mngr_, "route/addr", &NetlinkImpl::changed, this, &addrs_)) < 0)
      return fail(error, "route/addr", err);
    if ((err = nl_cache_mngr_add(mngr_, "route/route", &NetlinkImpl::changed, this, &routes_)) < 0)
      return fail(error, "route/route", err);
    return true;
  }

  int fd() const override { return nl_cache_mngr_get_fd(mngr_); }
  void on_readable() override { nl_cache_mngr_data_ready(mngr_); }

  nlohmann::json snapshot(const std::vector<std::string>& planes) const override {
    nlohmann::json out;
    out["links"] = nlohmann::json::array();
    for (nl_object* o = nl_cache_get_first(links_); o; o = nl_cache_get_next(o)) {
      auto* link = reinterpret_cast<rtnl_link*>(o);
      const char* name = rtnl_link_get_name(link);
      if (!name) continue;
      const bool wanted =
          planes.empty() ? std::strcmp(name, "lo") != 0 : std::find(planes.begin(), planes.end(), name) != planes.end();
      if (!wanted) continue;
      nlohmann::json l;
      l["name"] = name;
      l["ifindex"] = rtnl_link_get_ifindex(link);
      l["up"] = (rtnl_link_get_flags(link) & IFF_UP) != 0;
      l["carrier"] = rtnl_link_get_carrier(link) != 0;
      l["mtu"] = rtnl_link_get_mtu(link);
      l["addresses"] = nlohmann::json::array();
      for (nl_object* ao = nl_cache_get_first(addrs_); ao; ao = nl_cache_get_next(ao)) {
        auto* a = reinterpret_cast<rtnl_addr*>(ao);
        if (rtnl_addr_get_ifindex(a) == rtnl_link_get_ifindex(link) && rtnl_addr_get_family(a) == AF_INET)
          l["addresses"].push_back(addr_text(rtnl_addr_get_local(a)));
      }
      out["links"].push_back(std::move(l));
    }
    out["routes"] = nlohmann::json::array();
    for (nl_object* o = nl_cache_get_first(routes_); o; o = nl_cache_get_next(o)) {
      auto* r = reinterpret_cast<rtnl_route*>(o);
      if (rtnl_route_get_family(r) != AF_INET || rtnl_route_get_table(r) != RT_TABLE_MAIN) continue;
      nlohmann::json j;
      j["dst"] = addr_text(rtnl_route_get_dst(r));
      j["nexthops"] = nlohmann::json::array();
      const int n = rtnl_route_get_nnexthops(r);
      for (int i = 0; i < n; ++i) {
        rtnl_nexthop* nh = rtnl_route_nexthop_n(r, i);
        nlohmann::json h;
        h["via"] = addr_text(rtnl_route_nh_get_gateway(nh));
        char dev[IF_NAMESIZE] = {};
        h["dev"] = if_indextoname(static_cast<unsigned>(rtnl_route_nh_get_ifindex(nh)), dev) ? dev : "";
        h["weight"] = rtnl_route_nh_get_weight(nh);
        j["nexthops"].push_back(std::move(h));
      }
      out["routes"].push_back(std::move(j));
    }
    return out;
  }

 private:
  static bool fail(std::string& error, const char* what, int err) {
    error = std::string("netlink ") + what + ": " + nl_geterror(err);
    return false;
  }

  static void changed(nl_cache*, nl_object* obj, int action, void* arg) {
    auto* self = static_cast<NetlinkImpl*>(arg);
    NetChange change;
    const char* type = nl_object_get_type(obj);
    const char* verb = action == NL_ACT_NEW ? "new" : action == NL_ACT_DEL ? "deleted" : "changed";
    char buf[256] = {};
    nl_object_dump_buf(obj, buf, sizeof buf);
    if (type && std::strcmp(type, "route/route") == 0) {
      auto* r = reinterpret_cast<rtnl_route*>(obj);
      if (rtnl_route_get_family(r) != AF_INET) return;
      change.kind = NetChange::Kind::Route;
      nl_addr* dst = rtnl_route_get_dst(r);
      change.route_prefix = dst && nl_addr_get_prefixlen(dst) > 0 ? addr_text(dst) : "0.0.0.0/0";
      if (change.route_prefix.find('/') == std::string::npos) change.route_prefix += "/32";
    } else if (type && std::strcmp(type, "route/addr") == 0) {
      change.kind = NetChange::Kind::Address;
    } else {
      change.kind = NetChange::Kind::Link;
    }
    std::string text(buf);
    while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
    change.description = std::string(verb) + " " + (type ? type : "?") + ": " + text;
    self->listener_(change);
  }

  std::function<void(const NetChange&)> listener_;
  nl_cache_mngr* mngr_ = nullptr;
  nl_cache* links_ = nullptr;
  nl_cache* addrs_ = nullptr;
  nl_cache* routes_ = nullptr;
};

}  // namespace

std::unique_ptr<Netlink> Netlink::open(std::function<void(const NetChange&)> listener, std::string& error) {
  auto n = std::make_unique<NetlinkImpl>(std::move(listener));
  if (!n->open(error)) return nullptr;
  return n;
}

bool in_prefix(const std::string& address, const std::string& prefix) {
  const size_t slash = prefix.find('/');
  in_addr a{}, p{};
  if (inet_pton(AF_INET, address.c_str(), &a) != 1) return false;
  if (inet_pton(AF_INET, prefix.substr(0, slash).c_str(), &p) != 1) return false;
  int len = 32;
  if (slash != std::string::npos) {
    char* end = nullptr;
    const long v = std::strtol(prefix.c_str() + slash + 1, &end, 10);
    if (*end || v < 0 || v > 32) return false;
    len = static_cast<int>(v);
  }
  const uint32_t mask = len == 0 ? 0 : htonl(~uint32_t{0} << (32 - len));
  return (a.s_addr & mask) == (p.s_addr & mask);
}

}  // namespace metaroce::daemon
