// SPDX-License-Identifier: GPL-2.0-only
/*
 * metaroce.ko: registers the rdma link type "metaroce" (so `rdma link add
 * NAME type metaroce netdev X` creates a device, and loads this module by
 * its alias) and follows netdevs so that a device goes away with its netdev.
 *
 * The module is the control path of a MetaRoCE device: contexts, PDs, CQs
 * and QPs exist here so that the device is a real uverbs device with
 * host-unique QP numbers; every packet of a user QP is sent and received by
 * the user-space provider over UDP. The one data path here is QP1's, which
 * carries rdma_cm's connection-management MADs (gsi.c, gsi_net.c).
 */
#include <linux/module.h>
#include <linux/netdevice.h>
#include <rdma/rdma_netlink.h>

#include "mroce.h"

static struct rdma_link_ops mroce_link_ops = {
	.type = METAROCE_LINK_TYPE,
	.newlink = mroce_newlink,
};

struct workqueue_struct *mroce_wq;

static int mroce_netdev_event(struct notifier_block *nb, unsigned long event, void *ptr)
{
	struct net_device *ndev = netdev_notifier_info_to_dev(ptr);

	switch (event) {
	case NETDEV_UNREGISTER:
		mroce_netdev_gone(ndev);
		break;
	case NETDEV_UP:
	case NETDEV_DOWN:
	case NETDEV_CHANGE:
		mroce_netdev_port_event(ndev);
		break;
	default:
		break;
	}
	return NOTIFY_OK;
}

static struct notifier_block mroce_netdev_notifier = {
	.notifier_call = mroce_netdev_event,
};

static int __init mroce_init(void)
{
	int err;

	err = mroce_slots_init();
	if (err)
		return err;
	mroce_gsi_stats_init();
	/* QP1's sends and receives (reclaim-safe, as the MAD layer's own). */
	mroce_wq = alloc_workqueue("metaroce", WQ_UNBOUND | WQ_MEM_RECLAIM, 0);
	if (!mroce_wq)
		return -ENOMEM;
	err = mroce_gsi_nets_init();
	if (err)
		goto wq;
	err = register_netdevice_notifier(&mroce_netdev_notifier);
	if (err)
		goto nets;
	rdma_link_register(&mroce_link_ops);
	pr_info("metaroce: loaded (link type \"%s\", ABI %d, GSI port %u)\n", METAROCE_LINK_TYPE,
		METAROCE_ABI_VERSION, mroce_gsi_port);
	return 0;

nets:
	mroce_gsi_nets_exit();
wq:
	destroy_workqueue(mroce_wq);
	return err;
}

static void __exit mroce_exit(void)
{
	/* No new devices, then no netdev events, then remove what is left. */
	rdma_link_unregister(&mroce_link_ops);
	unregister_netdevice_notifier(&mroce_netdev_notifier);
	mroce_remove_all();
	mroce_gsi_nets_exit();
	destroy_workqueue(mroce_wq);
	mroce_slots_check_empty();
	pr_info("metaroce: unloaded\n");
}

module_init(mroce_init);
module_exit(mroce_exit);

MODULE_AUTHOR("MetaRoCE authors");
MODULE_DESCRIPTION("MetaRoCE software RDMA device (control path and QP1; user QPs' data path is in user space)");
MODULE_LICENSE("GPL");
MODULE_ALIAS_RDMA_LINK(METAROCE_LINK_TYPE);
/* Devices are only useful through uverbs, and librdmacm through rdma_ucm
 * (`rdma link add` loads this module by its alias, not those). */
MODULE_SOFTDEP("post: ib_uverbs rdma_ucm");
