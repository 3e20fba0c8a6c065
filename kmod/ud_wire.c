// SPDX-License-Identifier: GPL-2.0-only
/*
 * The encoder and decoder of MetaRoCE UD datagrams (docs/spec.md, 6a and
 * "Kernel GSI traffic"), the one place that knows their bytes. Every
 * datagram is hostile: decode reads only within the length it is given and
 * reports the first rule broken.
 */
#include "mroce_logic.h"

/* Offsets from the first byte of the UDP payload. */
enum {
	OFF_VERSION = 0,
	OFF_TYPE = 1,
	OFF_SECURITY = 2,
	OFF_PATH_ID = 3,
	OFF_HOME_PORT = 4,
	OFF_HEARD_PATHS = 6,
	OFF_SRC_EPOCH = 8,
	OFF_DST_EPOCH = 12,
	OFF_PACKET_NUMBER = 16,
	OFF_DST_QPN = MROCE_COMMON_HDR_LEN,
	OFF_SRC_QPN = MROCE_COMMON_HDR_LEN + 4,
	OFF_QKEY = MROCE_COMMON_HDR_LEN + 8,
	OFF_IMM = MROCE_COMMON_HDR_LEN + 12,
	OFF_FLAGS = MROCE_COMMON_HDR_LEN + 16,
	OFF_PAYLOAD = MROCE_COMMON_HDR_LEN + MROCE_UD_HDR_LEN,
};

const char *const mroce_ud_verdict_names[MROCE_UD_VERDICTS] = {
	[MROCE_UD_OK] = "gsi_rx_mads",
	[MROCE_UD_TRUNCATED] = "gsi_drop_truncated",
	[MROCE_UD_BAD_VERSION] = "gsi_drop_bad_version",
	[MROCE_UD_BAD_TYPE] = "gsi_drop_bad_type",
	[MROCE_UD_BAD_SECURITY] = "gsi_drop_bad_security",
	[MROCE_UD_BAD_PATH] = "gsi_drop_bad_path",
	[MROCE_UD_BAD_CRC] = "gsi_drop_bad_crc",
	[MROCE_UD_BAD_FLAGS] = "gsi_drop_bad_flags",
	[MROCE_UD_BAD_QPN] = "gsi_drop_bad_qpn",
	[MROCE_UD_NOT_GSI] = "gsi_drop_not_qp1",
	[MROCE_UD_BAD_QKEY] = "gsi_drop_bad_qkey",
	[MROCE_UD_BAD_LENGTH] = "gsi_drop_bad_length",
};

/* The integrity trailer: CRC32C (initial value and final XOR ~0) of every
 * byte before it. The kernel's crc32c() leaves the final XOR to us. */
static u32 mroce_ud_crc(const u8 *buf, size_t len)
{
	return ~crc32c(~0u, buf, len);
}

int mroce_ud_encode(u8 *out, size_t out_len, const struct mroce_ud_hdr *hdr, const void *payload,
		    size_t payload_len)
{
	size_t len;

	if (hdr->dst_qpn > MROCE_QPN_MAX || hdr->src_qpn > MROCE_QPN_MAX ||
	    (hdr->flags & ~MROCE_UD_FLAGS_KNOWN) || hdr->src_epoch == 0)
		return -EINVAL;
	if (out_len < MROCE_UD_OVERHEAD || payload_len > out_len - MROCE_UD_OVERHEAD)
		return -ENOSPC;
	/* Integrity mode, path 0, no heard paths, dst_epoch and packet number
	 * 0: a UD datagram belongs to no connection (spec 6a). */
	memset(out, 0, OFF_PAYLOAD);
	out[OFF_VERSION] = MROCE_WIRE_VERSION;
	out[OFF_TYPE] = MROCE_PACKET_UD_SEND;
	out[OFF_SECURITY] = MROCE_SECURITY_INTEGRITY;
	put_unaligned_be16(hdr->home_port, out + OFF_HOME_PORT);
	put_unaligned_be32(hdr->src_epoch, out + OFF_SRC_EPOCH);
	put_unaligned_be32(hdr->dst_qpn, out + OFF_DST_QPN);
	put_unaligned_be32(hdr->src_qpn, out + OFF_SRC_QPN);
	put_unaligned_be32(hdr->qkey, out + OFF_QKEY);
	put_unaligned_be32((hdr->flags & MROCE_UD_FLAG_IMM) ? hdr->imm : 0, out + OFF_IMM);
	out[OFF_FLAGS] = hdr->flags;
	if (payload_len)
		memcpy(out + OFF_PAYLOAD, payload, payload_len);
	len = OFF_PAYLOAD + payload_len;
	put_unaligned_be32(mroce_ud_crc(out, len), out + len);
	return (int)(len + MROCE_CRC_LEN);
}

enum mroce_ud_verdict mroce_ud_decode(const u8 *buf, size_t len, struct mroce_ud_hdr *hdr,
				      size_t *payload_off, size_t *payload_len)
{
	size_t body;

	if (len < MROCE_UD_OVERHEAD)
		return MROCE_UD_TRUNCATED;
	if (buf[OFF_VERSION] != MROCE_WIRE_VERSION)
		return MROCE_UD_BAD_VERSION;
	if (buf[OFF_TYPE] != MROCE_PACKET_UD_SEND)
		return MROCE_UD_BAD_TYPE;
	if (buf[OFF_SECURITY] != MROCE_SECURITY_INTEGRITY)
		return MROCE_UD_BAD_SECURITY;
	if (buf[OFF_PATH_ID] != 0)
		return MROCE_UD_BAD_PATH;
	body = len - MROCE_CRC_LEN;
	if (get_unaligned_be32(buf + body) != mroce_ud_crc(buf, body))
		return MROCE_UD_BAD_CRC;
	if (buf[OFF_FLAGS] & ~MROCE_UD_FLAGS_KNOWN)
		return MROCE_UD_BAD_FLAGS;
	hdr->home_port = get_unaligned_be16(buf + OFF_HOME_PORT);
	hdr->src_epoch = get_unaligned_be32(buf + OFF_SRC_EPOCH);
	hdr->dst_qpn = get_unaligned_be32(buf + OFF_DST_QPN);
	hdr->src_qpn = get_unaligned_be32(buf + OFF_SRC_QPN);
	if (hdr->dst_qpn > MROCE_QPN_MAX || hdr->src_qpn > MROCE_QPN_MAX)
		return MROCE_UD_BAD_QPN;
	hdr->qkey = get_unaligned_be32(buf + OFF_QKEY);
	hdr->flags = buf[OFF_FLAGS];
	hdr->imm = (hdr->flags & MROCE_UD_FLAG_IMM) ? get_unaligned_be32(buf + OFF_IMM) : 0;
	*payload_off = OFF_PAYLOAD;
	*payload_len = body - OFF_PAYLOAD;
	return MROCE_UD_OK;
}

enum mroce_ud_verdict mroce_gsi_check(const struct mroce_ud_hdr *hdr, size_t payload_len)
{
	if (hdr->dst_qpn != MROCE_GSI_QPN)
		return MROCE_UD_NOT_GSI;
	if (hdr->qkey != MROCE_GSI_QKEY)
		return MROCE_UD_BAD_QKEY;
	if (payload_len != MROCE_MAD_SIZE)
		return MROCE_UD_BAD_LENGTH;
	return MROCE_UD_OK;
}
