# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""The namespace fabric (docs/fabric.md): an ECMP fabric of network
namespaces and veths on one machine, shared by tools/metaroce-fabric (the
command line) and tools/bench/fabric-bench.

  host namespaces   <prefix>-h<i>   (h0, h2, ... on the left switch,
                                     h1, h3, ... on the right switch)
  switch namespaces <prefix>-swl, <prefix>-swr, joined by K parallel veth
  pairs p0..p<K-1> (the K paths); both switches route left<->right traffic
  with an ECMP multipath route over the K links, hashing the UDP 5-tuple.

Addresses (inside the namespaces only, never in the root namespace):
  host i    10.77.<10+i>.2/24 on eth0, gateway 10.77.<10+i>.1
  path k    10.77.<200+k>.1/24 (left switch) <-> 10.77.<200+k>.2/24 (right)

Each prefix keeps its shape and impairments in /run/metaroce-fabric/<prefix>.state
(key=value lines); commands that change a fabric hold /run/lock/metaroce-fabric.lock.
"""

import fcntl
import json
import os
import re
import shutil
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

STATE_DIR = Path("/run/metaroce-fabric")
LOCK_FILE = Path("/run/lock/metaroce-fabric.lock")
NFT_TABLE = "metaroce_fabric"
DEFAULT_PREFIX = "mrf"
DEFAULT_SEED = 1297239875  # 0x4d524f43 ("MROC"), fixed => reproducible port->path maps
HASH_POLICY = 3  # custom field set
HASH_FIELDS = "0x37"  # src ip, dst ip, ip proto, src port, dst port
SOCKBUF_MAX = 67108864  # net.core.{r,w}mem_max raised to at least this (64 MiB)
MAX_HOSTS = 100
MAX_PATHS = 32
ETHERNET_MTU = 1500
JUMBO_MTU = 9000
MIN_MTU = 1280
LOCK_TIMEOUT_S = 60


class FabricError(Exception):
    """A refusal or a failure; its text is one line for the user."""


class NotRoot(FabricError):
    pass


# ---------------------------------------------------------------- naming ---

def host_side(i):
    """Host i hangs off the left switch when i is even, the right one when odd."""
    return "left" if i % 2 == 0 else "right"


def host_ip(i):
    return f"10.77.{10 + i}.2"


def host_gw(i):
    return f"10.77.{10 + i}.1"


def host_net(i):
    return f"10.77.{10 + i}.0/24"


def path_ip_left(k):
    return f"10.77.{200 + k}.1"


def path_ip_right(k):
    return f"10.77.{200 + k}.2"


def _mac(kind, index, end):
    return "02:4d:%02x:%02x:%02x:%02x" % (kind, index // 256, index % 256, end)


def host_mac(i):  # host side of host i's link
    return _mac(0, i, 2)


def host_gw_mac(i):  # switch side of host i's link
    return _mac(0, i, 1)


def path_mac_left(k):
    return _mac(1, k, 1)


def path_mac_right(k):
    return _mac(1, k, 2)


# ---------------------------------------------------------- value syntax ---

_UINT = re.compile(r"[0-9]+")


def is_uint(text):
    return bool(_UINT.fullmatch(str(text)))


def parse_loss(text):
    """"0.1", "10%", "0" -> the loss as parts per million (an int)."""
    text = str(text)
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)%", text)
    if m:
        ppm = int(float(m.group(1)) * 10000 + 0.5)
        if ppm > 1000000:
            raise FabricError(f"loss must be within 0..100%: {text}")
        return ppm
    if re.fullmatch(r"[0-9]*\.?[0-9]+([eE]-?[0-9]+)?", text):
        ppm = int(float(text) * 1000000 + 0.5)
        if ppm > 1000000:
            raise FabricError(f"loss must be a fraction within 0..1 (or a percentage like 10%): {text}")
        return ppm
    raise FabricError(f"bad loss value: {text} (use a fraction like 0.01 or a percentage like 1%)")


def ppm_to_fraction(ppm):
    """As a JSON number: 0 and 1 whole, as %g prints them."""
    ppm = int(ppm)
    return ppm // 1000000 if ppm % 1000000 == 0 else ppm / 1000000


def parse_rate(text):
    """A tc rate ("100mbit", "2.5gbit", "1mbps") -> bits per second (an int)."""
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)(k|m|g|t)?(bit|bps)?", str(text).lower())
    if not m:
        raise FabricError(f"bad rate: {text} (use e.g. 100mbit, 2.5gbit)")
    bps = float(m.group(1)) * {None: 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)]
    if m.group(3) == "bps":  # tc: bps = bytes per second
        bps *= 8
    if bps < 8000:
        raise FabricError(f"rate too low: {text} (minimum 8kbit)")
    return int(round(bps))


def parse_ports(text):
    """"PORT[,PORT...]" -> the ports sorted and unique, comma-separated."""
    if not re.fullmatch(r"[0-9]+(,[0-9]+)*", str(text)):
        raise FabricError("--exempt-port takes PORT[,PORT...] or off")
    ports = sorted({int(p) for p in str(text).split(",")})
    for p in ports:
        if not 1 <= p <= 65535:
            raise FabricError(f"bad port: {p}")
    return ",".join(str(p) for p in ports)


def check_prefix(prefix):
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,15}", prefix):
        raise FabricError(f"bad prefix: {prefix} (letters, digits, _ . - only, at most 16 characters)")
    return prefix


# ------------------------------------------------------------- utilities ---

def require_root():
    if os.geteuid() != 0:
        raise NotRoot("must be run as root (it creates network namespaces); refusing")
    if not shutil.which("ip"):
        raise FabricError("ip (iproute2) not found")


def _run(argv, stdin=None, capture=False):
    """Runs argv (its stderr is the caller's); FabricError when it fails."""
    r = subprocess.run([str(a) for a in argv], input=stdin, text=True,
                       stdout=subprocess.PIPE if capture else subprocess.DEVNULL)
    if r.returncode != 0:
        raise FabricError(f"{' '.join(str(a) for a in argv[:6])} ... failed (exit {r.returncode})")
    return r.stdout if capture else None


def _quiet(argv):
    """Runs argv ignoring its output and status; True when it succeeded."""
    return subprocess.run([str(a) for a in argv], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


def _ip_batch(commands, netns=None):
    """Runs `ip` commands in one process (ip -batch), in netns if given."""
    if commands:
        _run(["ip"] + (["-n", netns] if netns else []) + ["-batch", "-"], stdin="\n".join(commands) + "\n")


def _ns_sysctls(netns, settings):
    """Writes sysctls inside a namespace with one process (a missing one is reported, not fatal)."""
    script = "".join(
        f"f=/proc/sys/{key.replace('.', '/')}; if [ -e $f ]; then echo {value} > $f || exit 1; "
        f"else echo 'missing sysctl {key}' >&2; fi;" for key, value in settings)
    _run(["ip", "netns", "exec", netns, "sh", "-c", script])


def _all_cpus_mask():
    """A CPU mask of every online CPU, in the comma-separated 32-bit groups the kernel's bitmap parser takes."""
    remaining, groups = os.cpu_count() or 1, []
    while remaining > 0:
        bits = min(remaining, 32)
        groups.insert(0, "%08x" % ((1 << bits) - 1))
        remaining -= bits
    return ",".join(groups)


@contextmanager
def _fabric_lock():
    LOCK_FILE.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK_FILE, "w") as f:
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise FabricError(f"could not take {LOCK_FILE}") from None
                time.sleep(0.05)
        yield


def _netns_list():
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def _ns_exists(netns):
    return Path("/run/netns", netns).exists()


# ------------------------------------------------------------ host sysctls --

_SAVED_SYSCTLS = STATE_DIR / "sysctl.saved"
_SOCKBUF_KEYS = ("net.core.rmem_max", "net.core.wmem_max")


def _proc_sys(key):
    return Path("/proc/sys", key.replace(".", "/"))


def _save_and_raise_sysctls():
    if not _SAVED_SYSCTLS.exists():
        tmp = _SAVED_SYSCTLS.with_name(f"{_SAVED_SYSCTLS.name}.tmp.{os.getpid()}")
        tmp.write_text("".join(f"{k}={_proc_sys(k).read_text().strip()}\n" for k in _SOCKBUF_KEYS))
        tmp.replace(_SAVED_SYSCTLS)
    for key in _SOCKBUF_KEYS:
        if int(_proc_sys(key).read_text()) < SOCKBUF_MAX:
            _proc_sys(key).write_text(f"{SOCKBUF_MAX}\n")


def _restore_sysctls_if_last():
    if any(STATE_DIR.glob("*.state")):  # another prefix still up: keep the raised values
        return
    if _SAVED_SYSCTLS.exists():
        for line in _SAVED_SYSCTLS.read_text().splitlines():
            key, _, value = line.partition("=")
            if key:
                _proc_sys(key).write_text(f"{value}\n")
        _SAVED_SYSCTLS.unlink()
    try:
        STATE_DIR.rmdir()
    except OSError:
        pass


# ------------------------------------------------------------------ fabric ---

_CLEAR = {"loss": "0", "bh": "off", "rate": "off", "exempt": "off"}

_SWITCH_SYSCTLS = [
    ("net.ipv6.conf.all.disable_ipv6", 1), ("net.ipv6.conf.default.disable_ipv6", 1),
    ("net.ipv4.ip_forward", 1),
    ("net.ipv4.conf.all.rp_filter", 0), ("net.ipv4.conf.default.rp_filter", 0),
    ("net.ipv4.conf.all.send_redirects", 0), ("net.ipv4.conf.default.send_redirects", 0),
    ("net.ipv4.conf.all.accept_redirects", 0), ("net.ipv4.conf.default.accept_redirects", 0),
    ("net.ipv4.fib_multipath_hash_policy", HASH_POLICY),
    ("net.ipv4.fib_multipath_hash_fields", HASH_FIELDS),
    # (the seed is per fabric: added in _build)
    # ICMP errors are not rate-limited, and a switch answers a TTL-expired
    # probe from the interface the probe came in on (not the one its route
    # back picks), so that traceroute-style path discovery (metaroced) can
    # tell the paths apart.
    ("net.ipv4.icmp_ratelimit", 0), ("net.ipv4.icmp_msgs_per_sec", 100000), ("net.ipv4.icmp_msgs_burst", 10000),
    ("net.ipv4.icmp_errors_use_inbound_ifaddr", 1),
]
_HOST_SYSCTLS = [
    ("net.ipv6.conf.all.disable_ipv6", 1), ("net.ipv6.conf.default.disable_ipv6", 1),
    ("net.ipv4.conf.all.rp_filter", 0), ("net.ipv4.conf.default.rp_filter", 0),
    ("net.ipv4.icmp_ratelimit", 0), ("net.ipv4.icmp_msgs_per_sec", 100000), ("net.ipv4.icmp_msgs_burst", 10000),
]


class Fabric:
    """One fabric, named by its prefix. Methods that touch the system need root."""

    def __init__(self, prefix=DEFAULT_PREFIX):
        self.prefix = check_prefix(prefix)

    # --- names ---
    def host_ns(self, i):
        return f"{self.prefix}-h{i}"

    @property
    def left_ns(self):
        return f"{self.prefix}-swl"

    @property
    def right_ns(self):
        return f"{self.prefix}-swr"

    def switch_ns(self, i):
        """The switch namespace host i hangs off."""
        return self.left_ns if host_side(i) == "left" else self.right_ns

    @property
    def state_file(self):
        return STATE_DIR / f"{self.prefix}.state"

    def namespaces(self):
        """All namespaces of this prefix, whether or not a state file exists."""
        pattern = re.compile(re.escape(self.prefix) + r"-(h[0-9]+|swl|swr)")
        return [n for n in _netns_list() if pattern.fullmatch(n)]

    # --- state ---
    def load_state(self):
        """The state as a dict of strings, or None when the fabric is not up."""
        try:
            text = self.state_file.read_text()
        except OSError:
            return None
        st = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.partition("=")
                st[key] = value
        return st if st.get("hosts") and st.get("paths") else None

    def _save_state(self, st):
        tmp = self.state_file.with_name(f"{self.state_file.name}.tmp.{os.getpid()}")
        tmp.write_text(f"# metaroce-fabric state for prefix {self.prefix}; do not edit\n"
                       + "".join(f"{k}={st[k]}\n" for k in sorted(st)))
        tmp.replace(self.state_file)

    def require_up(self):
        st = self.load_state()
        if st is None:
            raise FabricError(f"fabric '{self.prefix}' is not up (run: metaroce-fabric --prefix {self.prefix} up)")
        return st

    # --- up / down ---
    def up(self, hosts=2, paths=4, seed=DEFAULT_SEED, mtu=ETHERNET_MTU):
        """Builds the fabric with links of that MTU (idempotent: the same shape
        already up only has its impairments cleared). Returns the message to print."""
        if not (is_uint(hosts) and 2 <= int(hosts) <= MAX_HOSTS):
            raise FabricError(f"--hosts must be 2..{MAX_HOSTS}")
        if not (is_uint(paths) and 1 <= int(paths) <= MAX_PATHS):
            raise FabricError(f"--paths must be 1..{MAX_PATHS}")
        if not (is_uint(seed) and 1 <= int(seed) <= 4294967295):
            raise FabricError("--seed must be 1..4294967295")
        if not (is_uint(mtu) and MIN_MTU <= int(mtu) <= JUMBO_MTU):
            raise FabricError(f"--mtu must be {MIN_MTU}..{JUMBO_MTU}")
        hosts, paths, seed, mtu = int(hosts), int(paths), int(seed), int(mtu)
        require_root()
        with _fabric_lock():
            STATE_DIR.mkdir(parents=True, exist_ok=True)
            st = self.load_state()
            if (st and st["hosts"] == str(hosts) and st["paths"] == str(paths) and st.get("seed") == str(seed)
                    and st.get("mtu", str(ETHERNET_MTU)) == str(mtu) and self._healthy(hosts, paths)):
                for k in range(paths):
                    _record_path(st, k, **_CLEAR)
                    self._apply_path(st, k)
                self._save_state(st)
                return f"fabric '{self.prefix}' already up ({hosts} hosts, {paths} paths, MTU {mtu}); impairments cleared"
            self._teardown()
            _save_and_raise_sysctls()
            st = {"hosts": str(hosts), "paths": str(paths), "seed": str(seed), "mtu": str(mtu)}
            for k in range(paths):
                _record_path(st, k, **_CLEAR)
            self._save_state(st)  # first, so that a failed build can still be torn down
            try:
                self._build(hosts, paths, seed, mtu)
            except (FabricError, OSError):
                self._teardown()
                _restore_sysctls_if_last()
                raise FabricError("up failed; partial fabric removed") from None
            return f"fabric '{self.prefix}' up: {hosts} hosts, {paths} paths, MTU {mtu}"

    def down(self, all_prefixes=False):
        require_root()
        with _fabric_lock():
            if all_prefixes:
                for f in sorted(STATE_DIR.glob("*.state")):
                    Fabric(f.name[:-len(".state")])._teardown()
            else:
                self._teardown()
            _restore_sysctls_if_last()

    def _teardown(self):
        for n in self.namespaces():
            _quiet(["ip", "netns", "del", n])
        try:
            self.state_file.unlink()
        except FileNotFoundError:
            pass

    def _healthy(self, hosts, paths):
        names = [self.left_ns, self.right_ns] + [self.host_ns(i) for i in range(hosts)]
        if not all(_ns_exists(n) for n in names):
            return False
        if len(self.namespaces()) != hosts + 2:  # no extra hosts from a bigger earlier fabric
            return False
        for sw in (self.left_ns, self.right_ns):
            if not _quiet(["ip", "netns", "exec", sw, "nft", "list", "table", "inet", NFT_TABLE]):
                return False
        return (_quiet(["ip", "-n", self.left_ns, "link", "show", f"p{paths - 1}"])
                and not _quiet(["ip", "-n", self.left_ns, "link", "show", f"p{paths}"]))

    def _build(self, hosts, paths, seed, mtu):
        left, right = self.left_ns, self.right_ns
        for sw in (left, right):
            _run(["ip", "netns", "add", sw])
            _run(["ip", "-n", sw, "link", "set", "lo", "up"])
            _ns_sysctls(sw, _SWITCH_SYSCTLS + [("net.ipv4.fib_multipath_hash_seed", seed)])
        for i in range(hosts):
            _run(["ip", "netns", "add", self.host_ns(i)])
            _run(["ip", "-n", self.host_ns(i), "link", "set", "lo", "up"])
            _ns_sysctls(self.host_ns(i), _HOST_SYSCTLS)

        # The K paths (p<k> in both switches) and every host's link to its switch.
        links = [f"link add p{k} netns {left} address {path_mac_left(k)} mtu {mtu} type veth "
                 f"peer name p{k} netns {right} address {path_mac_right(k)} mtu {mtu}" for k in range(paths)]
        links += [f"link add eth0 netns {self.host_ns(i)} address {host_mac(i)} mtu {mtu} type veth "
                  f"peer name h{i} netns {self.switch_ns(i)} address {host_gw_mac(i)} mtu {mtu}"
                  for i in range(hosts)]
        _ip_batch(links)

        switch_cmds = {left: [], right: []}
        for k in range(paths):
            for sw, ip, peer_ip, peer_mac in ((left, path_ip_left(k), path_ip_right(k), path_mac_right(k)),
                                              (right, path_ip_right(k), path_ip_left(k), path_mac_left(k))):
                switch_cmds[sw] += [f"addr add {ip}/24 dev p{k}", f"link set p{k} up",
                                    f"neigh replace {peer_ip} lladdr {peer_mac} dev p{k} nud permanent"]
        for i in range(hosts):
            _ip_batch([f"addr add {host_ip(i)}/24 dev eth0", "link set eth0 up",
                       f"route add 10.77.0.0/16 via {host_gw(i)} dev eth0",
                       f"neigh replace {host_gw(i)} lladdr {host_gw_mac(i)} dev eth0 nud permanent"],
                      self.host_ns(i))
            switch_cmds[self.switch_ns(i)] += [
                f"addr add {host_gw(i)}/24 dev h{i}", f"link set h{i} up",
                f"neigh replace {host_ip(i)} lladdr {host_mac(i)} dev h{i} nud permanent"]
        # ECMP: a host on the other side is reachable over all K paths.
        for i in range(hosts):
            far = right if host_side(i) == "left" else left
            via = path_ip_left if far == right else path_ip_right
            nexthops = " ".join(f"nexthop via {via(k)} dev p{k} weight 1" for k in range(paths))
            switch_cmds[far].append(f"route replace {host_net(i)} {nexthops}")
        for sw, cmds in switch_cmds.items():
            _ip_batch(cmds, sw)

        mask = _all_cpus_mask()
        for i in range(hosts):
            self._tune_links(self.host_ns(i), mask, ["eth0"])
        for sw in (left, right):
            devs = [f"p{k}" for k in range(paths)] + [f"h{i}" for i in range(hosts) if self.switch_ns(i) == sw]
            self._tune_links(sw, mask, devs)

        # Counters and (empty) impairment chains.
        for sw in (left, right):
            _run(["ip", "netns", "exec", sw, "nft", "-f", "-"], stdin=_nft_base_ruleset(paths))

    @staticmethod
    def _tune_links(netns, mask, devs):
        """Offloads off so that impairments act on wire-size packets; RPS so that
        the rig does not reorder packets of one flow across CPU backlogs."""
        script = "".join(
            f"ethtool -K {d} tso off gso off tx-udp-segmentation off gro off >/dev/null 2>&1 || "
            f"ethtool -K {d} tso off gso off >/dev/null 2>&1 || true;"
            f"echo {mask} > /sys/class/net/{d}/queues/rx-0/rps_cpus 2>/dev/null || true;" for d in devs)
        _run(["ip", "netns", "exec", netns, "sh", "-c", script])

    # --- impairments ---
    def set(self, which, loss=None, blackhole=None, rate=None, exempt=None):
        """Impairs path `which` (an index, "p<k>" or "all") in both directions:
        loss (a fraction or "N%"), blackhole ("on"/"off"), rate (tc syntax or
        "off"), exempt (ports "P[,P...]" or "off"); None leaves a setting as it is."""
        if loss is None and blackhole is None and rate is None and exempt is None:
            raise FabricError("set: nothing to set (--loss, --blackhole, --rate, --exempt-port)")
        if exempt is not None and exempt != "off":
            exempt = parse_ports(exempt)
        ppm = None if loss is None else str(parse_loss(loss))
        if blackhole not in (None, "on", "off"):
            raise FabricError("--blackhole takes on or off")
        if rate is not None and rate != "off":
            parse_rate(rate)
            rate = rate.lower()
        require_root()
        with _fabric_lock():
            st = self.require_up()
            paths = int(st["paths"])
            if str(which) == "all":
                selected = range(paths)
            else:
                index = str(which).removeprefix("p")
                if not (is_uint(index) and int(index) < paths):
                    raise FabricError(f"no path '{which}' (paths are 0..{paths - 1} or all)")
                selected = [int(index)]
            for k in selected:
                _record_path(st, k, loss=ppm, bh=blackhole, rate=rate, exempt=exempt)
                self._apply_path(st, k)
            self._save_state(st)

    def _apply_path(self, st, k):
        """Installs path k's impairments, as st records them, at both ends of its veth."""
        ppm = int(st.get(f"loss_p{k}", "0"))
        rules = [f"flush chain inet {NFT_TABLE} imp_p{k}"]
        ex = st.get(f"exempt_p{k}", "off")
        if ex != "off":
            rules += [f"add rule inet {NFT_TABLE} imp_p{k} meta l4proto {{ tcp, udp }} th sport {{ {ex} }} accept",
                      f"add rule inet {NFT_TABLE} imp_p{k} meta l4proto {{ tcp, udp }} th dport {{ {ex} }} accept"]
        if st.get(f"bh_p{k}", "off") == "on":
            rules.append(f'add rule inet {NFT_TABLE} imp_p{k} counter name "bh_p{k}" drop')
        if ppm >= 1000000:
            rules.append(f'add rule inet {NFT_TABLE} imp_p{k} counter name "loss_p{k}" drop')
        elif ppm > 0:
            rules.append(f'add rule inet {NFT_TABLE} imp_p{k} numgen random mod 1000000 < {ppm} '
                         f'counter name "loss_p{k}" drop')
        rate_text = st.get(f"rate_p{k}", "off")
        for sw in (self.left_ns, self.right_ns):
            _run(["ip", "netns", "exec", sw, "nft", "-f", "-"], stdin="\n".join(rules) + "\n")
            if rate_text == "off":
                if not _quiet(["ip", "-n", sw, "link", "show", f"p{k}"]):
                    raise FabricError(f"path p{k} missing in {sw}")
                _quiet(["tc", "-n", sw, "qdisc", "del", "dev", f"p{k}", "root"])
            else:
                bps = parse_rate(rate_text)
                # Burst: 5 ms worth of the rate (so that a busy CPU servicing the
                # qdisc watchdog late does not waste capacity), at least 10 frames.
                burst = max(int(bps / 8 / 200), 15140)
                _run(["tc", "-n", sw, "qdisc", "replace", "dev", f"p{k}", "root", "tbf", "rate", f"{bps}bit",
                      "burst", burst, "latency", "20ms"])

    # --- what is there ---
    def host_index(self, st, host):
        """Host "i", "h<i>" or "<prefix>-h<i>" -> i."""
        h = str(host).removeprefix(f"{self.prefix}-").removeprefix("h")
        if not is_uint(h):
            raise FabricError(f"bad host: {host} (use i, h<i> or {self.prefix}-h<i>)")
        if int(h) >= int(st["hosts"]):
            raise FabricError(f"no host {host} (hosts are 0..{int(st['hosts']) - 1})")
        return int(h)

    def addr(self, host):
        require_root()
        return host_ip(self.host_index(self.require_up(), host))

    def exec_argv(self, host, argv):
        """The command line that runs argv in namespace `host` (a host, or swl/left, swr/right)."""
        require_root()
        st = self.require_up()
        if host in ("swl", "left"):
            ns = self.left_ns
        elif host in ("swr", "right"):
            ns = self.right_ns
        else:
            ns = self.host_ns(self.host_index(st, host))
        if not _ns_exists(ns):
            raise FabricError(f"namespace {ns} does not exist (fabric '{self.prefix}' damaged? run up again)")
        return ["ip", "netns", "exec", ns] + list(argv)

    def path(self, src, dst, sport, dport, proto="udp"):
        """The path (index) the switch picks for that 5-tuple (ip route get)."""
        require_root()
        st = self.require_up()
        s, d = self.host_index(st, src), self.host_index(st, dst)
        if not (is_uint(sport) and is_uint(dport)):
            raise FabricError("path: --sport and --dport are required")
        if host_side(s) == host_side(d):
            raise FabricError(f"path: h{s} and h{d} hang off the same switch (no path between switches)")
        out = _run(["ip", "-j", "-n", self.switch_ns(s), "route", "get", host_ip(d), "from", host_ip(s),
                    "iif", f"h{s}", "ipproto", proto, "sport", sport, "dport", dport], capture=True)
        try:
            dev = json.loads(out)[0]["dev"]
        except (ValueError, LookupError, TypeError):
            dev = ""
        m = re.fullmatch(r"p([0-9]+)", dev)
        if not m:
            raise FabricError(f"path: unexpected route: {out.strip()}")
        return int(m.group(1))

    def link_stats(self, netns):
        """{dev: stats64} of the path veths p<k> in a switch namespace (ip -s -j link)."""
        out = _run(["ip", "-n", netns, "-s", "-j", "link", "show"], capture=True)
        return {link["ifname"]: link.get("stats64", {}) for link in json.loads(out or "[]")
                if re.fullmatch(r"p[0-9]+", link.get("ifname", ""))}

    def nft_counters(self, netns):
        """{counter name: (packets, bytes)} of a switch's nft table."""
        out = _run(["ip", "netns", "exec", netns, "nft", "-j", "list", "counters", "table", "inet", NFT_TABLE],
                   capture=True)
        counters = {}
        for item in json.loads(out).get("nftables", []):
            c = item.get("counter")
            if c:
                counters[c["name"]] = (c.get("packets", 0), c.get("bytes", 0))
        return counters

    def path_tx_bytes(self, paths):
        """Bytes sent onto each path so far, both directions added (cheap: one
        `ip -s -j link` a switch)."""
        total = [0] * paths
        for sw in (self.left_ns, self.right_ns):
            for dev, stats in self.link_stats(sw).items():
                k = int(dev[1:])
                if k < paths:
                    total[k] += stats.get("tx", {}).get("bytes", 0)
        return total

    def status(self):
        """The fabric as `status --json` prints it (the same keys, in order)."""
        require_root()
        st = self.load_state()
        if st is None:
            return {"prefix": self.prefix, "up": False}
        hosts, paths = int(st["hosts"]), int(st["paths"])
        nft = {side: self.nft_counters(ns) for side, ns in (("L", self.left_ns), ("R", self.right_ns))}
        links = {side: self.link_stats(ns) for side, ns in (("L", self.left_ns), ("R", self.right_ns))}

        def direction(near, far, k):
            # offered = routed onto the path, dropped = impairment drops,
            # delivered = received by the far switch on that path.
            n, f = nft[near], links[far].get(f"p{k}", {}).get("rx", {})
            return {"offered_packets": n.get(f"tx_p{k}", (0, 0))[0], "offered_bytes": n.get(f"tx_p{k}", (0, 0))[1],
                    "loss_drops": n.get(f"loss_p{k}", (0, 0))[0], "blackhole_drops": n.get(f"bh_p{k}", (0, 0))[0],
                    "sent_packets": links[near].get(f"p{k}", {}).get("tx", {}).get("packets", 0),
                    "delivered_packets": f.get("packets", 0), "delivered_bytes": f.get("bytes", 0)}

        def exempt(k):
            ex = st.get(f"exempt_p{k}", "off")
            return [] if ex == "off" else [int(p) for p in ex.split(",")]

        return {
            "prefix": self.prefix, "up": True, "hosts_count": hosts, "paths_count": paths,
            "mtu": int(st.get("mtu", ETHERNET_MTU)),
            "fragments": nft["L"].get("fragments", (0, 0))[0] + nft["R"].get("fragments", (0, 0))[0],
            "hash": {"policy": HASH_POLICY, "fields": HASH_FIELDS, "seed": int(st["seed"])},
            "switches": {"left": self.left_ns, "right": self.right_ns},
            "hosts": [{"index": i, "name": f"h{i}", "netns": self.host_ns(i), "dev": "eth0", "ip": host_ip(i),
                       "prefixlen": 24, "gateway": host_gw(i), "mac": host_mac(i), "switch": host_side(i),
                       "switch_dev": f"h{i}"} for i in range(hosts)],
            "paths": [{"index": k, "dev": f"p{k}", "left_ip": path_ip_left(k), "right_ip": path_ip_right(k),
                       "loss": ppm_to_fraction(st.get(f"loss_p{k}", "0")), "blackhole": st.get(f"bh_p{k}") == "on",
                       "rate": st.get(f"rate_p{k}", "off"), "exempt_ports": exempt(k),
                       "left_to_right": direction("L", "R", k), "right_to_left": direction("R", "L", k)}
                      for k in range(paths)],
        }


def _record_path(st, k, loss=None, bh=None, rate=None, exempt=None):
    """Records path k's settings in st (None leaves one as it is); loss in ppm."""
    for key, value in ((f"loss_p{k}", loss), (f"bh_p{k}", bh), (f"rate_p{k}", rate), (f"exempt_p{k}", exempt)):
        if value is not None:
            st[key] = str(value)


def _nft_base_ruleset(paths):
    lines = [f"table inet {NFT_TABLE} {{"]
    lines.append("  counter fragments { }")  # IPv4 fragments crossing the switch: MetaRoCE never relies on them
    for k in range(paths):
        lines += [f"  counter tx_p{k} {{ }}", f"  counter loss_p{k} {{ }}", f"  counter bh_p{k} {{ }}",
                  f"  chain imp_p{k} {{ }}"]
    lines += ["  chain forward {", "    type filter hook forward priority filter; policy accept;",
              '    ip frag-off & 0x3fff != 0 counter name "fragments"']
    lines += [f'    oifname "p{k}" counter name "tx_p{k}" jump imp_p{k}' for k in range(paths)]
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"
