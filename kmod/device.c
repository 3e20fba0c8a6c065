// SPDX-License-Identifier: GPL-2.0-only
/*
 * Device lifetime: one ib_device per netdev, created by `rdma link add`,
 * removed by `rdma link del`, by the netdev's unregistration (asynchronously,
 * like rxe: the netdev waits for the core to drop its reference) or by
 * module unload.
 *
 * mroce_devices lists the devices from registration until dealloc_driver;
 * it answers "does this netdev already have a metaroce device" exactly
 * (ib_device_get_by_netdev(RDMA_DRIVER_UNKNOWN) would also find other
 * drivers' devices) and lets module exit find what is left.
 */
#include <linux/if_arp.h>
#include <linux/random.h>
#include <net/addrconf.h>
#include <rdma/ib_cache.h>

#include "mroce.h"

LIST_HEAD(mroce_devices);
DEFINE_MUTEX(mroce_devices_lock);

static void mroce_dealloc_driver(struct ib_device *ib)
{
	struct mroce_dev *dev = to_mdev(ib);

	mutex_lock(&mroce_devices_lock);
	list_del_init(&dev->node);
	mutex_unlock(&mroce_devices_lock);
	if (dev->gnet)
		mroce_gsi_net_put(dev->gnet);
	dev_put(dev->ndev);
}

static const struct ib_device_ops mroce_dev_ops = {
	.owner = THIS_MODULE,
	.driver_id = RDMA_DRIVER_UNKNOWN,
	.uverbs_abi_ver = METAROCE_UVERBS_ABI_VERSION,
	.dealloc_driver = mroce_dealloc_driver,
};

static struct mroce_dev *mroce_find_locked(const struct net_device *ndev)
{
	struct mroce_dev *dev;

	list_for_each_entry(dev, &mroce_devices, node)
		if (dev->ndev == ndev)
			return dev;
	return NULL;
}

int mroce_newlink(const char *ibdev_name, struct net_device *ndev)
{
	struct ib_device *same_name;
	struct mroce_dev *dev, *other;
	int err;

	if (ndev->type != ARPHRD_ETHER) {
		pr_info("metaroce: %s: not an Ethernet device\n", netdev_name(ndev));
		return -EINVAL;
	}
	/* The core would refuse the name too, with a less telling errno. */
	same_name = ib_device_get_by_name(ibdev_name, RDMA_DRIVER_UNKNOWN);
	if (same_name) {
		ib_device_put(same_name);
		pr_info("metaroce: an RDMA device named %s already exists\n", ibdev_name);
		return -EEXIST;
	}

	dev = ib_alloc_device(mroce_dev, ib);
	if (!dev)
		return -ENOMEM;
	INIT_LIST_HEAD(&dev->node);
	/* Our own reference, dropped in dealloc_driver (which
	 * ib_dealloc_device runs on the error paths below too): the core
	 * drops its one while unregistering, before sysfs (whose port files
	 * call query_port) is gone. */
	dev_hold(ndev);
	dev->ndev = ndev;
	ib_set_device_ops(&dev->ib, &mroce_dev_ops);
	ib_set_device_ops(&dev->ib, &mroce_query_ops);
	ib_set_device_ops(&dev->ib, &mroce_verbs_ops);
	ib_set_device_ops(&dev->ib, &mroce_gsi_ops);
	dev->ib.local_dma_lkey = MROCE_LOCAL_DMA_LKEY;
	/* The provider's way to post a completion event to a user CQ's
	 * channel (gsi.c, mroce_req_notify_cq); off by default. */
	dev->ib.uverbs_cmd_mask |= BIT_ULL(IB_USER_VERBS_CMD_REQ_NOTIFY_CQ);
	spin_lock_init(&dev->gsi_lock);
	dev->port_state = mroce_port_state(ndev);
	do
		dev->epoch = get_random_u32();
	while (!dev->epoch);
	dev->ib.node_type = RDMA_NODE_IB_CA;
	dev->ib.phys_port_cnt = 1;
	dev->ib.num_comp_vectors = 1;
	addrconf_addr_eui48((unsigned char *)&dev->ib.node_guid, ndev->dev_addr);
	strscpy(dev->ib.node_desc, "metaroce", sizeof(dev->ib.node_desc));

	err = ib_device_set_netdev(&dev->ib, ndev, 1);
	if (err)
		goto free;
	/* QP1's socket, before registration creates QP1. */
	err = mroce_gsi_net_get(dev_net(ndev), &dev->gnet);
	if (err)
		goto free;
	/* Claim the netdev before registering, so that two concurrent adds
	 * on one netdev cannot both succeed. The lock is not held across
	 * registration, which takes locks the netdev notifier holds. */
	mutex_lock(&mroce_devices_lock);
	other = mroce_find_locked(ndev);
	if (other) {
		mutex_unlock(&mroce_devices_lock);
		pr_info("metaroce: %s already has a metaroce device\n", netdev_name(ndev));
		err = -EEXIST;
		goto free;
	}
	list_add_tail(&dev->node, &mroce_devices);
	mutex_unlock(&mroce_devices_lock);

	err = ib_register_device(&dev->ib, ibdev_name, NULL);
	if (err) {
		mutex_lock(&mroce_devices_lock);
		list_del_init(&dev->node);
		mutex_unlock(&mroce_devices_lock);
		pr_info("metaroce: registering %s on %s failed: %d\n", ibdev_name, netdev_name(ndev), err);
		goto free;
	}
	/* The netdev may have started to go away while we registered: its
	 * NETDEV_UNREGISTER could not yet queue our removal. */
	if (ndev->reg_state != NETREG_REGISTERED)
		ib_unregister_device_queued(&dev->ib);
	pr_info("metaroce: %s on %s\n", ibdev_name, netdev_name(ndev));
	return 0;

free:
	/* dealloc_driver releases the netdev and the GSI sockets. */
	ib_dealloc_device(&dev->ib);
	return err;
}

void mroce_netdev_gone(struct net_device *ndev)
{
	struct mroce_dev *dev;

	mutex_lock(&mroce_devices_lock);
	dev = mroce_find_locked(ndev);
	/* A device whose unregistration already started has no registration
	 * reference left to take: it is on its way out anyway. */
	if (dev && ib_device_try_get(&dev->ib)) {
		ib_unregister_device_queued(&dev->ib);
		ib_device_put(&dev->ib);
	}
	mutex_unlock(&mroce_devices_lock);
}

/* PORT_ACTIVE / PORT_ERR when the netdev's carrier comes or goes, once per
 * change (NETDEV_CHANGE also comes for other reasons). */
void mroce_netdev_port_event(struct net_device *ndev)
{
	struct ib_event event = { .element.port_num = 1 };
	struct mroce_dev *dev;
	enum ib_port_state state = mroce_port_state(ndev);

	mutex_lock(&mroce_devices_lock);
	dev = mroce_find_locked(ndev);
	if (dev && dev->port_state != state && ib_device_try_get(&dev->ib)) {
		/* As rxe: the RDMA core's cache, rdma_cm and user space
		 * (uverbs writes it to every context's async event file) hear
		 * of it. */
		dev->port_state = state;
		event.device = &dev->ib;
		event.event = state == IB_PORT_ACTIVE ? IB_EVENT_PORT_ACTIVE : IB_EVENT_PORT_ERR;
		ib_dispatch_event(&event);
		ib_device_put(&dev->ib);
	}
	mutex_unlock(&mroce_devices_lock);
}

struct mroce_dev *mroce_find_by_gid(struct mroce_gsi_net *g, const union ib_gid *gid)
{
	const struct ib_gid_attr *attr;
	struct mroce_dev *dev, *found = NULL;

	mutex_lock(&mroce_devices_lock);
	list_for_each_entry(dev, &mroce_devices, node) {
		if (dev->gnet != g)
			continue;
		attr = rdma_find_gid_by_port(&dev->ib, gid, IB_GID_TYPE_ROCE_UDP_ENCAP, 1, NULL);
		if (IS_ERR(attr))
			continue;
		rdma_put_gid_attr(attr);
		if (ib_device_try_get(&dev->ib)) {
			found = dev;
			break;
		}
	}
	mutex_unlock(&mroce_devices_lock);
	return found;
}

void mroce_remove_all(void)
{
	struct mroce_dev *dev;
	unsigned int rounds;

	/* Each round unregisters one device synchronously (which waits for a
	 * queued unregistration of it, and runs dealloc_driver, which takes it
	 * off the list). No device can be added any more. */
	for (rounds = 0; rounds < (1u << 20); rounds++) {
		mutex_lock(&mroce_devices_lock);
		dev = list_first_entry_or_null(&mroce_devices, struct mroce_dev, node);
		if (dev)
			get_device(&dev->ib.dev);
		mutex_unlock(&mroce_devices_lock);
		if (!dev)
			return;
		ib_unregister_device(&dev->ib);
		mutex_lock(&mroce_devices_lock);
		/* Registered but already fully unregistered by someone else
		 * without dealloc_driver (cannot happen): never loop on it. */
		list_del_init(&dev->node);
		mutex_unlock(&mroce_devices_lock);
		put_device(&dev->ib.dev);
	}
	pr_err("metaroce: devices left at unload\n");
}
