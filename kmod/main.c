// SPDX-License-Identifier: GPL-2.0-only
/*
 * metaroce.ko: registers the rdma link type "metaroce" (so `rdma link add
 * NAME type metaroce netdev X` creates a device, and loads this module by
 * its alias) and follows netdevs so that a device goes away with its netdev.
 *
 * The module is the control path of a MetaRoCE device only: contexts, PDs,
 * CQs and QPs exist here so that the device is a real uverbs device with
 * host-unique QP numbers; every packet is sent and received by the
 * user-space provider over UDP.
 */
#include <linux/module.h>
#include <linux/netdevice.h>
#include <rdma/rdma_netlink.h>

#include "mroce.h"

static struct rdma_link_ops mroce_link_ops = {
	.type = METAROCE_LINK_TYPE,
	.newlink = mroce_newlink,
};

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
	err = register_netdevice_notifier(&mroce_netdev_notifier);
	if (err)
		return err;
	rdma_link_register(&mroce_link_ops);
	pr_info("metaroce: loaded (link type \"%s\", ABI %d)\n", METAROCE_LINK_TYPE,
		METAROCE_ABI_VERSION);
	return 0;
}

static void __exit mroce_exit(void)
{
	/* No new devices, then no netdev events, then remove what is left. */
	rdma_link_unregister(&mroce_link_ops);
	unregister_netdevice_notifier(&mroce_netdev_notifier);
	mroce_remove_all();
	mroce_slots_check_empty();
	pr_info("metaroce: unloaded\n");
}

module_init(mroce_init);
module_exit(mroce_exit);

MODULE_AUTHOR("MetaRoCE authors");
MODULE_DESCRIPTION("MetaRoCE software RDMA device (control path; the data path is in user space)");
MODULE_LICENSE("GPL");
MODULE_ALIAS_RDMA_LINK(METAROCE_LINK_TYPE);
/* Devices are only useful through uverbs (and `rdma link add` loads this
 * module by its alias, not ib_uverbs). */
MODULE_SOFTDEP("post: ib_uverbs");
