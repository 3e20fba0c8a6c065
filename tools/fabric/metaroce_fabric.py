# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""The namespace fabric (docs/fabric.md): an ECMP fabric of network
namespaces and veths on one machine, shared by tools/metaroce-fabric (the
command line) and tools/bench/fabric-bench.

  host namespaces   <prefix>-h<i>   (h0, h2, ... on the left switch,
                                     h1, h3, ... on the right switch)
  switch namespaces <prefix>-swl, <prefix>-swr, joined by K parallel veth
  pairs p0..p<K-1> (the K paths); both switches route left<->right traffic
  with an ECMP multipath route over the K links, hashing the UDP 5-tuple.

With P planes, plane p >= 1 is another such switch pair, <prefix>-swl<p> and
<prefix>-swr<p>, with K paths of its own, and every host has one more link,
eth<p>, to plane p: plane p is plane 0 with 77+p for 77 in the addresses.

Addresses (inside the namespaces only, never in the root namespace):
  host i    10.<77+p>.<10+i>.2/24 on eth<p>, gateway 10.<77+p>.<10+i>.1
  path k    10.<77+p>.<200+k>.1/24 (left switch) <-> 10.<77+p>.<200+k>.2/24 (right)

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
MAX_PLANES = 4
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


# A host's plane-p address differs from its plane-0 address in the second
# octet only (77 -> 77+p), the same bits for every host: the provider derives
# a peer's plane-p address from its plane-0 address that way.
def _plane_octet(plane):
    return 77 + plane


def plane_net(plane=0):
    """Everything of plane `plane`: the route hosts send that plane's traffic by."""
    return f"10.{_plane_octet(plane)}.0.0/16"


def host_dev(plane=0):
    """A host's link to plane `plane`."""
    return f"eth{plane}"


def host_ip(i, plane=0):
    return f"10.{_plane_octet(plane)}.{10 + i}.2"


def host_gw(i, plane=0):
    return f"10.{_plane_octet(plane)}.{10 + i}.1"


def host_net(i, plane=0):
    return f"10.{_plane_octet(plane)}.{10 + i}.0/24"


def path_ip_left(k, plane=0):
    return f"10.{_plane_octet(plane)}.{200 + k}.1"


def path_ip_right(k, plane=0):
    return f"10.{_plane_octet(plane)}.{200 + k}.2"


def _mac(kind, index, end, plane):
    # kind 0 (host links) and 1 (paths) of plane 0 keep the MACs of a
    # single-plane fabric; plane p takes kinds 2p and 2p+1.
    return "02:4d:%02x:%02x:%02x:%02x" % (2 * plane + kind, index // 256, index % 256, end)


def host_mac(i, plane=0):  # host side of host i's link
    return _mac(0, i, 2, plane)


def host_gw_mac(i, plane=0):  # switch side of host i's link
    return _mac(0, i, 1, plane)


def path_mac_left(k, plane=0):
    return _mac(1, k, 1, plane)


def path_mac_right(k, plane=0):
    return _mac(1, k, 2, plane)


def path_tag(k, plane=0):
    """Path k of plane `plane` in state keys and messages: p<k> on plane 0, plane<p>_p<k> on others."""
    return f"p{k}" if plane == 0 else f"plane{plane}_p{k}"


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


def normalize_blackhole(text):
    """"on", "off" or "after:BYTES" (BYTES a positive integer) -> the state string; else FabricError."""
    text = str(text)
    m = re.fullmatch(r"after:([0-9]+)", text)
    if text in ("on", "off") or (m and int(m.group(1)) > 0):
        return text if not m else f"after:{int(m.group(1))}"
    raise FabricError(f"--blackhole takes on, off or after:BYTES (a positive byte count): {text}")


def blackhole_after_bytes(state):
    """The N of an "after:N" blackhole state; None for "on" and "off"."""
    return int(state.split(":", 1)[1]) if state.startswith("after:") else None


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

    def switches(self, plane=0):
        """(left, right): the switch namespaces of plane `plane`."""
        suffix = str(plane) if plane else ""
        return f"{self.prefix}-swl{suffix}", f"{self.prefix}-swr{suffix}"

    @property
    def left_ns(self):
        return self.switches()[0]

    @property
    def right_ns(self):
        return self.switches()[1]

    def switch_ns(self, i, plane=0):
        """The switch namespace host i hangs off on plane `plane`."""
        left, right = self.switches(plane)
        return left if host_side(i) == "left" else right

    @property
    def state_file(self):
        return STATE_DIR / f"{self.prefix}.state"

    def namespaces(self):
        """All namespaces of this prefix, whether or not a state file exists."""
        pattern = re.compile(re.escape(self.prefix) + r"-(h[0-9]+|sw[lr][0-9]*)")
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

    @staticmethod
    def plane_count(st):
        return int(st.get("planes", "1"))  # state files from before planes have none

    # --- up / down ---
    def up(self, hosts=2, paths=4, seed=DEFAULT_SEED, mtu=ETHERNET_MTU, planes=1):
        """Builds the fabric with links of that MTU (idempotent: the same shape
        already up only has its impairments cleared and its host links brought
        up). Returns the message to print."""
        if not (is_uint(hosts) and 2 <= int(hosts) <= MAX_HOSTS):
            raise FabricError(f"--hosts must be 2..{MAX_HOSTS}")
        if not (is_uint(paths) and 1 <= int(paths) <= MAX_PATHS):
            raise FabricError(f"--paths must be 1..{MAX_PATHS}")
        if not (is_uint(seed) and 1 <= int(seed) <= 4294967295):
            raise FabricError("--seed must be 1..4294967295")
        if not (is_uint(mtu) and MIN_MTU <= int(mtu) <= JUMBO_MTU):
            raise FabricError(f"--mtu must be {MIN_MTU}..{JUMBO_MTU}")
        if not (is_uint(planes) and 1 <= int(planes) <= MAX_PLANES):
            raise FabricError(f"--planes must be 1..{MAX_PLANES}")
        hosts, paths, seed, mtu, planes = int(hosts), int(paths), int(seed), int(mtu), int(planes)
        shape = f"{hosts} hosts, {paths} paths" + (f", {planes} planes" if planes > 1 else "") + f", MTU {mtu}"
        require_root()
        with _fabric_lock():
            STATE_DIR.mkdir(parents=True, exist_ok=True)
            st = self.load_state()
            if (st and st["hosts"] == str(hosts) and st["paths"] == str(paths) and st.get("seed") == str(seed)
                    and st.get("mtu", str(ETHERNET_MTU)) == str(mtu) and self.plane_count(st) == planes
                    and self._healthy(hosts, paths, planes)):
                self._clear_impairments(st)
                self._save_state(st)
                return f"fabric '{self.prefix}' already up ({shape}); impairments cleared"
            self._teardown()
            _save_and_raise_sysctls()
            st = {"hosts": str(hosts), "paths": str(paths), "seed": str(seed), "mtu": str(mtu), "planes": str(planes)}
            for plane in range(planes):
                for k in range(paths):
                    _record_path(st, path_tag(k, plane), **_CLEAR)
            self._save_state(st)  # first, so that a failed build can still be torn down
            try:
                self._build(hosts, paths, seed, mtu, planes)
            except (FabricError, OSError):
                self._teardown()
                _restore_sysctls_if_last()
                raise FabricError("up failed; partial fabric removed") from None
            return f"fabric '{self.prefix}' up: {shape}"

    def _clear_impairments(self, st):
        """Every path of every plane unimpaired, every host link up (as st records them)."""
        for plane in range(self.plane_count(st)):
            for k in range(int(st["paths"])):
                _record_path(st, path_tag(k, plane), **_CLEAR)
                self._apply_path(st, k, plane)
            for i in range(int(st["hosts"])):
                if st.get(_link_key(i, plane)) == "down":
                    self._apply_link(st, i, plane, "up")

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

    def _healthy(self, hosts, paths, planes):
        switches = [sw for plane in range(planes) for sw in self.switches(plane)]
        names = switches + [self.host_ns(i) for i in range(hosts)]
        if not all(_ns_exists(n) for n in names):
            return False
        if len(self.namespaces()) != len(names):  # no extra hosts or planes from a bigger earlier fabric
            return False
        for sw in switches:
            if not _quiet(["ip", "netns", "exec", sw, "nft", "list", "table", "inet", NFT_TABLE]):
                return False
        return all(_quiet(["ip", "-n", left, "link", "show", f"p{paths - 1}"])
                   and not _quiet(["ip", "-n", left, "link", "show", f"p{paths}"])
                   for left, _ in map(self.switches, range(planes)))

    def _build(self, hosts, paths, seed, mtu, planes):
        for i in range(hosts):
            _run(["ip", "netns", "add", self.host_ns(i)])
            _run(["ip", "-n", self.host_ns(i), "link", "set", "lo", "up"])
            _ns_sysctls(self.host_ns(i), _HOST_SYSCTLS)
        for plane in range(planes):
            self._build_plane(plane, hosts, paths, seed, mtu)
        mask = _all_cpus_mask()
        for i in range(hosts):
            self._tune_links(self.host_ns(i), mask, [host_dev(plane) for plane in range(planes)])

    def _build_plane(self, plane, hosts, paths, seed, mtu):
        """Plane `plane`'s switch pair, its K paths, and every host's link eth<plane> to it."""
        left, right = self.switches(plane)
        for sw in (left, right):
            _run(["ip", "netns", "add", sw])
            _run(["ip", "-n", sw, "link", "set", "lo", "up"])
            _ns_sysctls(sw, _SWITCH_SYSCTLS + [("net.ipv4.fib_multipath_hash_seed", seed)])

        # The K paths (p<k> in both switches) and every host's link to its switch.
        links = [f"link add p{k} netns {left} address {path_mac_left(k, plane)} mtu {mtu} type veth "
                 f"peer name p{k} netns {right} address {path_mac_right(k, plane)} mtu {mtu}" for k in range(paths)]
        links += [f"link add {host_dev(plane)} netns {self.host_ns(i)} address {host_mac(i, plane)} mtu {mtu} "
                  f"type veth peer name h{i} netns {self.switch_ns(i, plane)} address {host_gw_mac(i, plane)} "
                  f"mtu {mtu}" for i in range(hosts)]
        _ip_batch(links)

        switch_cmds = {left: [], right: []}
        for k in range(paths):
            ip_l, ip_r = path_ip_left(k, plane), path_ip_right(k, plane)
            for sw, ip, peer_ip, peer_mac in ((left, ip_l, ip_r, path_mac_right(k, plane)),
                                              (right, ip_r, ip_l, path_mac_left(k, plane))):
                switch_cmds[sw] += [f"addr add {ip}/24 dev p{k}", f"link set p{k} up",
                                    f"neigh replace {peer_ip} lladdr {peer_mac} dev p{k} nud permanent"]
        for i in range(hosts):
            _ip_batch(_host_link_cmds(i, plane), self.host_ns(i))
            switch_cmds[self.switch_ns(i, plane)] += [
                f"addr add {host_gw(i, plane)}/24 dev h{i}", f"link set h{i} up",
                f"neigh replace {host_ip(i, plane)} lladdr {host_mac(i, plane)} dev h{i} nud permanent"]
        # ECMP: a host on the other side is reachable over all K paths.
        for i in range(hosts):
            far = right if host_side(i) == "left" else left
            via = path_ip_left if far == right else path_ip_right
            nexthops = " ".join(f"nexthop via {via(k, plane)} dev p{k} weight 1" for k in range(paths))
            switch_cmds[far].append(f"route replace {host_net(i, plane)} {nexthops}")
        for sw, cmds in switch_cmds.items():
            _ip_batch(cmds, sw)

        mask = _all_cpus_mask()
        for sw in (left, right):
            devs = [f"p{k}" for k in range(paths)] + [f"h{i}" for i in range(hosts) if self.switch_ns(i, plane) == sw]
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
    def set(self, which, loss=None, blackhole=None, rate=None, exempt=None, plane=0):
        """Impairs path `which` (an index, "p<k>" or "all") of plane `plane` in both directions:
        loss (a fraction or "N%"), blackhole ("on", "off" or "after:BYTES"), rate
        (tc syntax or "off"), exempt (ports "P[,P...]" or "off"); None leaves a
        setting as it is."""
        if loss is None and blackhole is None and rate is None and exempt is None:
            raise FabricError("set: nothing to set (--loss, --blackhole, --rate, --exempt-port)")
        if exempt is not None and exempt != "off":
            exempt = parse_ports(exempt)
        ppm = None if loss is None else str(parse_loss(loss))
        if blackhole is not None:
            blackhole = normalize_blackhole(blackhole)
        if rate is not None and rate != "off":
            parse_rate(rate)
            rate = rate.lower()
        require_root()
        with _fabric_lock():
            st = self.require_up()
            plane = self.plane_index(st, plane)
            paths = int(st["paths"])
            if str(which) == "all":
                selected = range(paths)
            else:
                index = str(which).removeprefix("p")
                if not (is_uint(index) and int(index) < paths):
                    raise FabricError(f"no path '{which}' (paths are 0..{paths - 1} or all)")
                selected = [int(index)]
            for k in selected:
                _record_path(st, path_tag(k, plane), loss=ppm, bh=blackhole, rate=rate, exempt=exempt)
                self._apply_path(st, k, plane)
            self._save_state(st)

    def _apply_path(self, st, k, plane=0):
        """Installs path k's impairments, as st records them, at both ends of its veth
        (each plane's switches have a table of their own, with the same chain names)."""
        tag = path_tag(k, plane)
        ppm = int(st.get(f"loss_{tag}", "0"))
        rules = [f"flush chain inet {NFT_TABLE} imp_p{k}"]
        ex = st.get(f"exempt_{tag}", "off")
        if ex != "off":
            rules += [f"add rule inet {NFT_TABLE} imp_p{k} meta l4proto {{ tcp, udp }} th sport {{ {ex} }} accept",
                      f"add rule inet {NFT_TABLE} imp_p{k} meta l4proto {{ tcp, udp }} th dport {{ {ex} }} accept"]
        bh = st.get(f"bh_{tag}", "off")
        if bh != "off":
            # after:N: nft's quota passes the first N bytes that reach this rule
            # in each direction, then matches; installing the rule restarts it.
            quota = "" if bh == "on" else f"quota over {blackhole_after_bytes(bh)} bytes "
            rules.append(f'add rule inet {NFT_TABLE} imp_p{k} {quota}counter name "bh_p{k}" drop')
        if ppm >= 1000000:
            rules.append(f'add rule inet {NFT_TABLE} imp_p{k} counter name "loss_p{k}" drop')
        elif ppm > 0:
            rules.append(f'add rule inet {NFT_TABLE} imp_p{k} numgen random mod 1000000 < {ppm} '
                         f'counter name "loss_p{k}" drop')
        rate_text = st.get(f"rate_{tag}", "off")
        for sw in self.switches(plane):
            _run(["ip", "netns", "exec", sw, "nft", "-f", "-"], stdin="\n".join(rules) + "\n")
            if rate_text == "off":
                if not _quiet(["ip", "-n", sw, "link", "show", f"p{k}"]):
                    raise FabricError(f"path {tag} missing in {sw}")
                _quiet(["tc", "-n", sw, "qdisc", "del", "dev", f"p{k}", "root"])
            else:
                bps = parse_rate(rate_text)
                # Burst: 5 ms worth of the rate (so that a busy CPU servicing the
                # qdisc watchdog late does not waste capacity), at least 10 frames.
                burst = max(int(bps / 8 / 200), 15140)
                _run(["tc", "-n", sw, "qdisc", "replace", "dev", f"p{k}", "root", "tbf", "rate", f"{bps}bit",
                      "burst", burst, "latency", "20ms"])

    def set_link(self, plane, host="all", state=None):
        """Takes the link of host `host` (or of every host: "all") to plane
        `plane` down or brings it up again (state "down"/"up"), as when a
        host's NIC on that plane fails."""
        if state not in ("up", "down"):
            raise FabricError("set-plane: --state takes up or down")
        require_root()
        with _fabric_lock():
            st = self.require_up()
            plane = self.plane_index(st, plane)
            selected = range(int(st["hosts"])) if str(host) == "all" else [self.host_index(st, host)]
            for i in selected:
                self._apply_link(st, i, plane, state)
            self._save_state(st)

    def _apply_link(self, st, i, plane, state):
        """Sets host i's link to plane `plane` up or down, and records it in st."""
        _ip_batch(_host_link_cmds(i, plane) if state == "up" else [f"link set {host_dev(plane)} down"],
                  self.host_ns(i))
        st[_link_key(i, plane)] = state

    # --- what is there ---
    def plane_index(self, st, plane):
        """Plane "p" (a number) -> p, checked against the fabric's plane count."""
        planes = self.plane_count(st)
        if not (is_uint(plane) and int(plane) < planes):
            raise FabricError(f"no plane {plane} (planes are 0..{planes - 1})")
        return int(plane)

    def host_index(self, st, host):
        """Host "i", "h<i>" or "<prefix>-h<i>" -> i."""
        h = str(host).removeprefix(f"{self.prefix}-").removeprefix("h")
        if not is_uint(h):
            raise FabricError(f"bad host: {host} (use i, h<i> or {self.prefix}-h<i>)")
        if int(h) >= int(st["hosts"]):
            raise FabricError(f"no host {host} (hosts are 0..{int(st['hosts']) - 1})")
        return int(h)

    def addr(self, host, plane=0):
        require_root()
        st = self.require_up()
        return host_ip(self.host_index(st, host), self.plane_index(st, plane))

    def exec_argv(self, host, argv):
        """The command line that runs argv in namespace `host` (a host, or
        swl/left, swr/right, swl<p>/swr<p> for plane p's switches)."""
        require_root()
        st = self.require_up()
        switch = re.fullmatch(r"sw([lr])([0-9]*)", host)
        if host in ("left", "right"):
            ns = self.left_ns if host == "left" else self.right_ns
        elif switch:
            left, right = self.switches(self.plane_index(st, switch.group(2) or "0"))
            ns = left if switch.group(1) == "l" else right
        else:
            ns = self.host_ns(self.host_index(st, host))
        if not _ns_exists(ns):
            raise FabricError(f"namespace {ns} does not exist (fabric '{self.prefix}' damaged? run up again)")
        return ["ip", "netns", "exec", ns] + list(argv)

    def path(self, src, dst, sport, dport, proto="udp", plane=0):
        """The path (index) plane `plane`'s switch picks for that 5-tuple (ip route get)."""
        require_root()
        st = self.require_up()
        s, d, plane = self.host_index(st, src), self.host_index(st, dst), self.plane_index(st, plane)
        if not (is_uint(sport) and is_uint(dport)):
            raise FabricError("path: --sport and --dport are required")
        if host_side(s) == host_side(d):
            raise FabricError(f"path: h{s} and h{d} hang off the same switch (no path between switches)")
        out = _run(["ip", "-j", "-n", self.switch_ns(s, plane), "route", "get", host_ip(d, plane),
                    "from", host_ip(s, plane),
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

    def path_tx_bytes(self, paths, plane=0):
        """Bytes sent onto each path of plane `plane` so far, both directions
        added (cheap: one `ip -s -j link` a switch)."""
        total = [0] * paths
        for sw in self.switches(plane):
            for dev, stats in self.link_stats(sw).items():
                k = int(dev[1:])
                if k < paths:
                    total[k] += stats.get("tx", {}).get("bytes", 0)
        return total

    def status(self):
        """The fabric as `status --json` prints it (the same keys, in order):
        plane 0 at the top level, as a fabric without planes has it, and
        planes 1..P-1 in "extra_planes"."""
        require_root()
        st = self.load_state()
        if st is None:
            return {"prefix": self.prefix, "up": False}
        planes = self.plane_count(st)
        base = self._plane_status(st, 0)
        return {
            "prefix": self.prefix, "up": True, "hosts_count": int(st["hosts"]), "paths_count": int(st["paths"]),
            "mtu": int(st.get("mtu", ETHERNET_MTU)), "fragments": base["fragments"],
            "hash": {"policy": HASH_POLICY, "fields": HASH_FIELDS, "seed": int(st["seed"])},
            "switches": base["switches"], "hosts": base["hosts"], "paths": base["paths"],
            "planes_count": planes, "extra_planes": [self._plane_status(st, p) for p in range(1, planes)],
        }

    def _plane_status(self, st, plane):
        """One plane's switches, host links and paths (with their counters)."""
        hosts, paths = int(st["hosts"]), int(st["paths"])
        left, right = self.switches(plane)
        nft = {"L": self.nft_counters(left), "R": self.nft_counters(right)}
        links = {"L": self.link_stats(left), "R": self.link_stats(right)}

        def direction(near, far, k):
            # offered = routed onto the path, dropped = impairment drops,
            # delivered = received by the far switch on that path.
            n, f = nft[near], links[far].get(f"p{k}", {}).get("rx", {})
            return {"offered_packets": n.get(f"tx_p{k}", (0, 0))[0], "offered_bytes": n.get(f"tx_p{k}", (0, 0))[1],
                    "loss_drops": n.get(f"loss_p{k}", (0, 0))[0], "blackhole_drops": n.get(f"bh_p{k}", (0, 0))[0],
                    "sent_packets": links[near].get(f"p{k}", {}).get("tx", {}).get("packets", 0),
                    "delivered_packets": f.get("packets", 0), "delivered_bytes": f.get("bytes", 0)}

        def exempt(tag):
            ex = st.get(f"exempt_{tag}", "off")
            return [] if ex == "off" else [int(p) for p in ex.split(",")]

        tags = [path_tag(k, plane) for k in range(paths)]
        return {
            "plane": plane,
            "fragments": nft["L"].get("fragments", (0, 0))[0] + nft["R"].get("fragments", (0, 0))[0],
            "switches": {"left": left, "right": right},
            "hosts": [{"index": i, "name": f"h{i}", "netns": self.host_ns(i), "dev": host_dev(plane),
                       "ip": host_ip(i, plane), "prefixlen": 24, "gateway": host_gw(i, plane),
                       "mac": host_mac(i, plane), "switch": host_side(i), "switch_dev": f"h{i}",
                       "link": st.get(_link_key(i, plane), "up")} for i in range(hosts)],
            "paths": [{"index": k, "dev": f"p{k}", "left_ip": path_ip_left(k, plane),
                       "right_ip": path_ip_right(k, plane), "loss": ppm_to_fraction(st.get(f"loss_{tag}", "0")),
                       "blackhole": st.get(f"bh_{tag}", "off") != "off",
                       "blackhole_after_bytes": blackhole_after_bytes(st.get(f"bh_{tag}", "off")),
                       "rate": st.get(f"rate_{tag}", "off"),
                       "exempt_ports": exempt(tag), "left_to_right": direction("L", "R", k),
                       "right_to_left": direction("R", "L", k)} for k, tag in enumerate(tags)],
        }


def _record_path(st, tag, loss=None, bh=None, rate=None, exempt=None):
    """Records the settings of the path `tag` names (path_tag) in st (None leaves one as it is); loss in ppm."""
    for key, value in ((f"loss_{tag}", loss), (f"bh_{tag}", bh), (f"rate_{tag}", rate), (f"exempt_{tag}", exempt)):
        if value is not None:
            st[key] = str(value)


def _link_key(i, plane):
    """The state key of host i's link to plane `plane` ("up" or "down"; no key: up)."""
    return f"link_h{i}_{host_dev(plane)}"


def _host_link_cmds(i, plane):
    """The `ip` commands, run in host i, that configure its link to plane
    `plane` and bring it up. They replace rather than add, because taking the
    link down deletes its route and static neighbour, and these restore them."""
    dev, gw = host_dev(plane), host_gw(i, plane)
    return [f"addr replace {host_ip(i, plane)}/24 dev {dev}", f"link set {dev} up",
            f"route replace {plane_net(plane)} via {gw} dev {dev}",
            f"neigh replace {gw} lladdr {host_gw_mac(i, plane)} dev {dev} nud permanent"]


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
