// SPDX-License-Identifier: MIT OR GPL-2.0
/*
 * CLAW's loss flags, client side: a tc direct-action program on the egress of the UE's
 * device (the emulator's TUN in the UE namespace) that sets a reserved bit of TCP header
 * byte 12 on the UE's outgoing ACKs sent within one RTT after a matching diag event:
 *
 *   0x02  wireless loss  (the RLC gave up on a packet: the server must not back off)
 *   0x04  BS buffer overflow (a congestion drop at the base station: back off)
 *
 * Bit 0x01 of the byte (AE/NS) and the data offset are left alone. The server's tc ingress
 * program reads the bits on the duplicate ACKs that report the loss.
 *
 * The CLAW client daemon (claw/client/marking.py) writes the CLOCK_MONOTONIC time of the
 * latest event of each kind and the RTT into `ack_mark_cfg`; this program compares them
 * with bpf_ktime_get_ns(), the same clock. Counters in `ack_mark_stats` let tests and the
 * daemon see what was marked.
 *
 * Build (no kernel headers or vmlinux.h needed; Debian's multiarch path provides asm/):
 *   clang -O2 -g -target bpf -D__TARGET_ARCH_x86 -I/usr/include/x86_64-linux-gnu \
 *         -c claw/bpf/ack_mark_egress.bpf.c -o <build dir>/ack_mark_egress.bpf.o
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/types.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define MARK_WIRELESS 0x02
#define MARK_OVERFLOW 0x04

/* Offsets inside the TCP header. */
#define TCP_OFF_DOFF_BYTE 12 /* data offset (4 bits), reserved bits, AE */
#define TCP_OFF_CHECK 16

#define TCP_FLAG_SYN 0x02
#define TCP_FLAG_RST 0x04
#define TCP_FLAG_ACK 0x10

/* The link-layer header before IPv4 is at most Ethernet's: a TUN has none. */
#define MAX_L2_LEN 14

/* Layout shared with claw/client/marking.py (struct module, native byte order). */
struct ack_mark_config {
	__u64 wireless_event_ns; /* latest RLC loss, CLOCK_MONOTONIC ns; 0: none yet */
	__u64 overflow_event_ns; /* latest BS buffer overflow; 0: none yet */
	__u64 window_ns;         /* mark ACKs sent up to this long after an event (one RTT) */
	__u32 l2_len;            /* bytes before the IPv4 header on this device: 0 TUN, 14 Ethernet */
	__u32 reserved;
};

struct ack_mark_stats {
	__u64 acks_seen;        /* outgoing IPv4 TCP segments with ACK (not SYN/RST) */
	__u64 marked_wireless;  /* of which given 0x02 */
	__u64 marked_overflow;  /* of which given 0x04 */
	__u64 rewrite_errors;   /* checksum or store helper failures (segment left unmarked) */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ack_mark_config);
} ack_mark_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct ack_mark_stats);
} ack_mark_stats SEC(".maps");

static __always_inline int recent(__u64 event_ns, __u64 now_ns, __u64 window_ns)
{
	/* 0 means "never"; an event stamped a little ahead of now (user space subtracts the
	 * feed's lag) still counts. */
	if (!event_ns)
		return 0;
	return now_ns <= event_ns || now_ns - event_ns <= window_ns;
}

SEC("tc")
int ack_mark_egress(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct ack_mark_config *cfg = bpf_map_lookup_elem(&ack_mark_cfg, &zero);
	struct ack_mark_stats *stats = bpf_map_lookup_elem(&ack_mark_stats, &zero);

	/* Never drop or redirect: this program only ever annotates. */
	if (!cfg || !stats || !cfg->window_ns)
		return TC_ACT_OK;
	if (skb->protocol != bpf_htons(ETH_P_IP))
		return TC_ACT_OK;

	__u32 l2 = cfg->l2_len;
	if (l2 > MAX_L2_LEN)
		return TC_ACT_OK;

	struct iphdr ip;
	if (bpf_skb_load_bytes(skb, l2, &ip, sizeof(ip)) < 0)
		return TC_ACT_OK;
	if (ip.version != 4 || ip.protocol != IPPROTO_TCP || ip.ihl < 5)
		return TC_ACT_OK;
	/* A later fragment has no TCP header to mark. */
	if (ip.frag_off & bpf_htons(0x1fff))
		return TC_ACT_OK;

	__u32 tcp_off = l2 + ip.ihl * 4;
	/* Bytes 12 and 13 of the TCP header: they form one 16-bit word of the checksum. */
	__u8 word[2];
	if (bpf_skb_load_bytes(skb, tcp_off + TCP_OFF_DOFF_BYTE, word, sizeof(word)) < 0)
		return TC_ACT_OK;
	__u8 flags = word[1];
	if (!(flags & TCP_FLAG_ACK) || (flags & (TCP_FLAG_SYN | TCP_FLAG_RST)))
		return TC_ACT_OK;
	__sync_fetch_and_add(&stats->acks_seen, 1);

	__u64 now = bpf_ktime_get_ns();
	__u8 mark = 0;
	if (recent(cfg->wireless_event_ns, now, cfg->window_ns))
		mark |= MARK_WIRELESS;
	if (recent(cfg->overflow_event_ns, now, cfg->window_ns))
		mark |= MARK_OVERFLOW;
	if (!mark)
		return TC_ACT_OK;

	__u8 updated[2] = { word[0] | mark, word[1] };
	if (updated[0] != word[0]) {
		__u16 from, to;
		__builtin_memcpy(&from, word, sizeof(from));
		__builtin_memcpy(&to, updated, sizeof(to));
		/* Incremental update of the TCP checksum (RFC 1624). For a locally generated
		 * segment still CHECKSUM_PARTIAL the helper leaves the field alone: the stack
		 * computes the final sum later, over the byte written here. */
		if (bpf_skb_store_bytes(skb, tcp_off + TCP_OFF_DOFF_BYTE, updated, 1, 0) < 0) {
			__sync_fetch_and_add(&stats->rewrite_errors, 1);
			return TC_ACT_OK;
		}
		if (bpf_l4_csum_replace(skb, tcp_off + TCP_OFF_CHECK, from, to, sizeof(to)) < 0) {
			/* Put the byte back rather than send a segment whose checksum is wrong. */
			bpf_skb_store_bytes(skb, tcp_off + TCP_OFF_DOFF_BYTE, word, 1, 0);
			__sync_fetch_and_add(&stats->rewrite_errors, 1);
			return TC_ACT_OK;
		}
	}
	if (mark & MARK_WIRELESS)
		__sync_fetch_and_add(&stats->marked_wireless, 1);
	if (mark & MARK_OVERFLOW)
		__sync_fetch_and_add(&stats->marked_overflow, 1);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
