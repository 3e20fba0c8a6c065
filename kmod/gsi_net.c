// SPDX-License-Identifier: GPL-2.0-only
/*
 * The UDP sockets that carry the GSI QPs' datagrams: one IPv4 and one IPv6
 * socket on the GSI port per network namespace that holds a metaroce
 * device, shared by the devices there (as rxe shares its port 4791).
 * A datagram is handed to the device that owns its destination address
 * (gsi.c); the socket layer has already checked the UDP checksum.
 *
 * Lifetime: devices hold a reference (newlink to dealloc_driver). When the
 * namespace goes away first, its sockets are closed at once (the pernet
 * exit below) and the devices, whose removal the netdev's unregistration
 * has queued, send into nothing until they are gone.
 *
 * This is connection management only: user QPs' datagrams never come here.
 */
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/module.h>
#include <net/ipv6.h>
#include <net/net_namespace.h>
#include <net/udp_tunnel.h>

#include "mroce.h"

/* Datagrams waiting for the receive work, per namespace: a flood beyond
 * this is dropped before any work is done for it. */
#define MROCE_GSI_RXQ_MAX 1024
#define MROCE_GSI_RX_BUDGET 64

struct mroce_gsi_net {
	struct list_head node;	/* mroce_gsi_nets, while the namespace lives */
	struct kref ref;	/* held by devices */
	struct net *net;	/* compared, never dereferenced: no reference */
	struct mutex lock;	/* sock4, sock6 */
	struct socket *sock4;
	struct socket *sock6;
	struct sk_buff_head rxq;
	struct work_struct rx_work;
	atomic64_t rx_overflow;	/* dropped: rxq full */
	atomic64_t rx_no_device;	/* dropped: no device owns the address */
};

static LIST_HEAD(mroce_gsi_nets);
static DEFINE_MUTEX(mroce_gsi_nets_lock);

ushort mroce_gsi_port = METAROCE_GSI_PORT_DEFAULT;
module_param_named(gsi_port, mroce_gsi_port, ushort, 0444);
MODULE_PARM_DESC(gsi_port, "UDP port of the devices' QP1 (rdma_cm's MADs); the same on every host");

static int mroce_gsi_encap_recv(struct sock *sk, struct sk_buff *skb)
{
	struct mroce_gsi_net *g = rcu_dereference_sk_user_data(sk);

	if (!g || skb_queue_len(&g->rxq) >= MROCE_GSI_RXQ_MAX) {
		if (g)
			atomic64_inc(&g->rx_overflow);
		kfree_skb(skb);
		return 0;
	}
	skb_queue_tail(&g->rxq, skb);
	queue_work(mroce_wq, &g->rx_work);
	return 0;
}

static bool mroce_skb_addrs(const struct sk_buff *skb, struct mroce_addr *src, struct mroce_addr *dst)
{
	memset(src, 0, sizeof(*src));
	memset(dst, 0, sizeof(*dst));
	if (skb->protocol == htons(ETH_P_IP)) {
		const struct iphdr *ip = ip_hdr(skb);

		src->family = dst->family = MROCE_IPV4;
		memcpy(src->ip, &ip->saddr, 4);
		memcpy(dst->ip, &ip->daddr, 4);
		return true;
	}
	if (skb->protocol == htons(ETH_P_IPV6)) {
		const struct ipv6hdr *ip6 = ipv6_hdr(skb);

		src->family = dst->family = MROCE_IPV6;
		memcpy(src->ip, &ip6->saddr, 16);
		memcpy(dst->ip, &ip6->daddr, 16);
		return true;
	}
	return false;
}

static void mroce_gsi_rx_one(struct mroce_gsi_net *g, struct sk_buff *skb)
{
	u8 buf[MROCE_GSI_DATAGRAM_LEN];
	struct mroce_addr src, dst;
	int off = skb_transport_offset(skb) + (int)sizeof(struct udphdr);
	int len = (int)skb->len - off;
	int err;

	if (len < 0 || !mroce_skb_addrs(skb, &src, &dst))
		return;
	/* Longer than one MAD's datagram: the device counts it by length. */
	if (skb_copy_bits(skb, off, buf, min_t(int, len, sizeof(buf))))
		return;
	err = mroce_gsi_deliver(g, &src, &dst, buf, len);
	if (err == -ENODEV)
		atomic64_inc(&g->rx_no_device);
}

static void mroce_gsi_rx_work(struct work_struct *work)
{
	struct mroce_gsi_net *g = container_of(work, struct mroce_gsi_net, rx_work);
	struct sk_buff *skb;
	int n;

	for (n = 0; n < MROCE_GSI_RX_BUDGET; n++) {
		skb = skb_dequeue(&g->rxq);
		if (!skb)
			return;
		mroce_gsi_rx_one(g, skb);
		consume_skb(skb);
	}
	if (!skb_queue_empty(&g->rxq))
		queue_work(mroce_wq, &g->rx_work);
}

static int mroce_gsi_sock(struct mroce_gsi_net *g, bool ipv6, struct socket **out)
{
	struct udp_port_cfg cfg = {};
	struct udp_tunnel_sock_cfg tnl = {};
	struct socket *sock;
	int err;

	cfg.local_udp_port = htons(mroce_gsi_port);
	if (ipv6) {
		cfg.family = AF_INET6;
		cfg.ipv6_v6only = 1;
		cfg.use_udp6_tx_checksums = 1;
		cfg.use_udp6_rx_checksums = 1;
	} else {
		cfg.family = AF_INET;
		cfg.use_udp_checksums = 1;
	}
	err = udp_sock_create(g->net, &cfg, &sock);
	if (err)
		return err;
	tnl.sk_user_data = g;
	tnl.encap_type = 1;
	tnl.encap_rcv = mroce_gsi_encap_recv;
	setup_udp_tunnel_sock(g->net, sock, &tnl);
	*out = sock;
	return 0;
}

/* Closes the sockets (no datagram reaches g afterwards) and drops what
 * waits in rxq. Idempotent. */
static void mroce_gsi_net_shutdown(struct mroce_gsi_net *g)
{
	struct socket *s4, *s6;

	mutex_lock(&g->lock);
	s4 = g->sock4;
	s6 = g->sock6;
	g->sock4 = g->sock6 = NULL;
	mutex_unlock(&g->lock);
	/* Each waits for receivers in flight (RCU) before closing. */
	if (s4)
		udp_tunnel_sock_release(s4);
	if (s6)
		udp_tunnel_sock_release(s6);
	cancel_work_sync(&g->rx_work);
	skb_queue_purge(&g->rxq);
}

static struct mroce_gsi_net *mroce_gsi_net_find_locked(const struct net *net)
{
	struct mroce_gsi_net *g;

	list_for_each_entry(g, &mroce_gsi_nets, node)
		if (net_eq(g->net, net))
			return g;
	return NULL;
}

int mroce_gsi_net_get(struct net *net, struct mroce_gsi_net **out)
{
	struct mroce_gsi_net *g;
	int err;

	mutex_lock(&mroce_gsi_nets_lock);
	g = mroce_gsi_net_find_locked(net);
	if (g) {
		kref_get(&g->ref);
		goto found;
	}
	g = kzalloc(sizeof(*g), GFP_KERNEL);
	if (!g) {
		err = -ENOMEM;
		goto unlock;
	}
	kref_init(&g->ref);
	g->net = net;
	mutex_init(&g->lock);
	skb_queue_head_init(&g->rxq);
	INIT_WORK(&g->rx_work, mroce_gsi_rx_work);
	err = mroce_gsi_sock(g, false, &g->sock4);
	if (err)
		goto free;
	/* A kernel without IPv6 (ipv6.disable=1): IPv4 only. */
	err = mroce_gsi_sock(g, true, &g->sock6);
	if (err == -EAFNOSUPPORT)
		err = 0;
	if (err)
		goto free;
	list_add_tail(&g->node, &mroce_gsi_nets);
found:
	*out = g;
	mutex_unlock(&mroce_gsi_nets_lock);
	return 0;
free:
	pr_info("metaroce: cannot open the GSI port %u: %d\n", mroce_gsi_port, err);
	mroce_gsi_net_shutdown(g);
	kfree(g);
unlock:
	mutex_unlock(&mroce_gsi_nets_lock);
	return err;
}

static void mroce_gsi_net_release(struct kref *ref)
	__releases(&mroce_gsi_nets_lock)
{
	struct mroce_gsi_net *g = container_of(ref, struct mroce_gsi_net, ref);

	list_del_init(&g->node);
	mutex_unlock(&mroce_gsi_nets_lock);
	mroce_gsi_net_shutdown(g);
	if (atomic64_read(&g->rx_overflow) || atomic64_read(&g->rx_no_device))
		pr_info("metaroce: GSI datagrams dropped in a namespace: %lld (queue full), %lld (no device)\n",
			(long long)atomic64_read(&g->rx_overflow), (long long)atomic64_read(&g->rx_no_device));
	kfree(g);
}

void mroce_gsi_net_put(struct mroce_gsi_net *g)
{
	kref_put_mutex(&g->ref, mroce_gsi_net_release, &mroce_gsi_nets_lock);
}

bool mroce_gsi_net_is(const struct mroce_gsi_net *g, const struct net *net)
{
	return net_eq(g->net, net);
}

int mroce_gsi_net_xmit(struct mroce_gsi_net *g, const struct mroce_addr *src, const struct mroce_addr *dst,
		       u16 port, int ifindex, const void *buf, size_t len)
{
	union {
		struct sockaddr_in v4;
		struct sockaddr_in6 v6;
	} to = {};
	union {
		struct cmsghdr hdr;
		u8 room[CMSG_SPACE(sizeof(struct in6_pktinfo))];
	} control = {};
	struct kvec iov = { .iov_base = (void *)buf, .iov_len = len };
	struct msghdr msg = { .msg_name = &to, .msg_control = &control, .msg_flags = MSG_DONTWAIT };
	struct cmsghdr *cmsg = &control.hdr;
	struct socket *sock;
	int err;

	/* The source address is the address handle's GID: the receiver finds
	 * its peer (and its reply's destination) from it. */
	if (dst->family == MROCE_IPV4) {
		struct in_pktinfo *pi = (struct in_pktinfo *)CMSG_DATA(cmsg);

		to.v4.sin_family = AF_INET;
		to.v4.sin_port = htons(port);
		memcpy(&to.v4.sin_addr, dst->ip, 4);
		msg.msg_namelen = sizeof(to.v4);
		cmsg->cmsg_level = SOL_IP;
		cmsg->cmsg_type = IP_PKTINFO;
		cmsg->cmsg_len = CMSG_LEN(sizeof(*pi));
		memcpy(&pi->ipi_spec_dst, src->ip, 4);
		msg.msg_controllen = CMSG_SPACE(sizeof(*pi));
	} else {
		struct in6_pktinfo *pi = (struct in6_pktinfo *)CMSG_DATA(cmsg);

		to.v6.sin6_family = AF_INET6;
		to.v6.sin6_port = htons(port);
		memcpy(&to.v6.sin6_addr, dst->ip, 16);
		if (ipv6_addr_type(&to.v6.sin6_addr) & IPV6_ADDR_LINKLOCAL) {
			to.v6.sin6_scope_id = ifindex;
			pi->ipi6_ifindex = ifindex;
		}
		msg.msg_namelen = sizeof(to.v6);
		cmsg->cmsg_level = SOL_IPV6;
		cmsg->cmsg_type = IPV6_PKTINFO;
		cmsg->cmsg_len = CMSG_LEN(sizeof(*pi));
		memcpy(&pi->ipi6_addr, src->ip, 16);
		msg.msg_controllen = CMSG_SPACE(sizeof(*pi));
	}
	mutex_lock(&g->lock);
	sock = dst->family == MROCE_IPV4 ? g->sock4 : g->sock6;
	err = sock ? kernel_sendmsg(sock, &msg, &iov, 1, len) : -ENETDOWN;
	mutex_unlock(&g->lock);
	return err < 0 ? err : 0;
}

static void __net_exit mroce_gsi_net_exit(struct net *net)
{
	struct mroce_gsi_net *g;

	mutex_lock(&mroce_gsi_nets_lock);
	g = mroce_gsi_net_find_locked(net);
	if (g) {
		/* The devices keep g until they are removed; a namespace
		 * created later at the same address must not find it. */
		list_del_init(&g->node);
		kref_get(&g->ref);
	}
	mutex_unlock(&mroce_gsi_nets_lock);
	if (g) {
		mroce_gsi_net_shutdown(g);
		mroce_gsi_net_put(g);
	}
}

static struct pernet_operations mroce_gsi_net_ops = {
	.exit = mroce_gsi_net_exit,
};

int mroce_gsi_nets_init(void)
{
	if (mroce_gsi_port >= METAROCE_HOME_PORT_BASE &&
	    mroce_gsi_port <= METAROCE_HOME_PORT_BASE + METAROCE_SLOT_MAX) {
		pr_err("metaroce: gsi_port %u is one of the home ports %u..%u\n", mroce_gsi_port,
		       METAROCE_HOME_PORT_BASE, METAROCE_HOME_PORT_BASE + METAROCE_SLOT_MAX);
		return -EINVAL;
	}
	if (!mroce_gsi_port) {
		pr_err("metaroce: gsi_port 0\n");
		return -EINVAL;
	}
	return register_pernet_subsys(&mroce_gsi_net_ops);
}

void mroce_gsi_nets_exit(void)
{
	unregister_pernet_subsys(&mroce_gsi_net_ops);
}
