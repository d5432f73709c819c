// SPDX-License-Identifier: MIT OR GPL-2.0
/*
 * CLAW's loss flags, server side: a tc direct-action program on the ingress of the device
 * the UEs' traffic arrives on. For every IPv4 TCP ACK it records, per flow, when it was
 * seen and whether it carried the UE's reserved bits of TCP header byte 12 (0x02 wireless
 * loss, 0x04 BS buffer overflow; set by claw/bpf/ack_mark_egress.bpf.c), then clears those
 * bits, with an incremental checksum update, so the server's TCP never sees them.
 *
 * The CC (claw_cc.bpf.c) reads the record when the kernel declares a loss; tc ingress
 * runs before TCP processes the same ACK, so the flag of the ACK that triggers recovery is
 * already there.
 *
 * Two entry points, because the bytes before the IPv4 header depend on the device and a
 * program should not guess them from the packet: claw_ack_flags_eth (Ethernet: veth) and
 * claw_ack_flags_l3 (no link-layer header: the emulator's TUN). The loader attaches the
 * one that matches the device's type.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#include "claw_maps.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#define TC_ACT_OK 0
#define ETH_P_IP 0x0800
#define ETH_HLEN 14
#define IPPROTO_TCP_NUM 6
#define IP_OFFSET_MASK 0x1fff /* fragment offset: a later fragment has no TCP header */

/* Offsets in the TCP header. */
#define TCP_OFF_PORTS 0
#define TCP_OFF_DOFF_BYTE 12 /* data offset (4 bits), reserved (3), AE */
#define TCP_OFF_CHECK 16
#define TCP_FLAG_ACK 0x10

static __always_inline int handle(struct __sk_buff *skb, __u32 l2_len)
{
	struct iphdr ip;
	__u16 ports[2];
	__u8 word[2];

	if (skb->protocol != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;
	if (bpf_skb_load_bytes(skb, l2_len, &ip, sizeof(ip)) < 0)
		return TC_ACT_OK;
	if (ip.version != 4 || ip.ihl < 5 || ip.protocol != IPPROTO_TCP_NUM)
		return TC_ACT_OK;
	if (ip.frag_off & bpf_htons(IP_OFFSET_MASK))
		return TC_ACT_OK;

	__u32 tcp_off = l2_len + ip.ihl * 4;
	if (bpf_skb_load_bytes(skb, tcp_off + TCP_OFF_PORTS, ports, sizeof(ports)) < 0)
		return TC_ACT_OK;
	if (bpf_skb_load_bytes(skb, tcp_off + TCP_OFF_DOFF_BYTE, word, sizeof(word)) < 0)
		return TC_ACT_OK;
	if (!(word[1] & TCP_FLAG_ACK))
		return TC_ACT_OK;

	/* Coming from the UE: its address and port are the source. */
	struct claw_flow_key key = {
		.ue_addr = ip.saddr,
		.server_addr = ip.daddr,
		.ue_port = ports[0],
		.server_port = ports[1],
	};
	__u8 bits = word[0] & CLAW_ACK_MASK;
	__u64 now_ns = bpf_ktime_get_ns();
	struct claw_ack_flags *rec = bpf_map_lookup_elem(&claw_ack_flags, &key);
	if (!rec) {
		struct claw_ack_flags fresh = {};
		bpf_map_update_elem(&claw_ack_flags, &key, &fresh, BPF_NOEXIST);
		rec = bpf_map_lookup_elem(&claw_ack_flags, &key);
	}
	if (rec) {
		rec->last_ack_ns = now_ns;
		rec->acks += 1;
		if (bits & CLAW_ACK_WIRELESS) {
			rec->wireless_ns = now_ns;
			rec->wireless_acks += 1;
		}
		if (bits & CLAW_ACK_OVERFLOW) {
			rec->overflow_ns = now_ns;
			rec->overflow_acks += 1;
		}
	}
	if (!bits)
		return TC_ACT_OK;

	/* Clear the bits: bytes 12-13 are one 16-bit word of the checksum. The helper updates
	 * the checksum field only when it holds a full sum (not CHECKSUM_PARTIAL). */
	__u8 cleared[2] = { word[0] & (__u8)~CLAW_ACK_MASK, word[1] };
	__u16 from, to;
	__builtin_memcpy(&from, word, sizeof(from));
	__builtin_memcpy(&to, cleared, sizeof(to));
	if (bpf_skb_store_bytes(skb, tcp_off + TCP_OFF_DOFF_BYTE, cleared, 1, 0) < 0)
		return TC_ACT_OK;
	if (bpf_l4_csum_replace(skb, tcp_off + TCP_OFF_CHECK, from, to, sizeof(to)) < 0)
		bpf_skb_store_bytes(skb, tcp_off + TCP_OFF_DOFF_BYTE, word, 1, 0); /* keep it consistent */
	return TC_ACT_OK;
}

SEC("tc")
int claw_ack_flags_eth(struct __sk_buff *skb)
{
	return handle(skb, ETH_HLEN);
}

SEC("tc")
int claw_ack_flags_l3(struct __sk_buff *skb)
{
	return handle(skb, 0);
}
