// SPDX-License-Identifier: MIT OR GPL-2.0
/*
 * DRWA at the UE (BB12 §5: Dynamic Receive Window Adjustment): a tc direct-action program on
 * the egress of the UE's device that lowers the receive window advertised in the UE's
 * outgoing ACKs to the value DRWA computed for the flow. The kernel has no DRWA; this
 * program only ever lowers the window field the kernel wrote, never raises it.
 *
 * Who computes what:
 *   - this program tracks, per flow (UE address and port, peer address and port), the
 *     window scale the UE announced in its SYN or SYN-ACK (option kind 3), and counts ACKs;
 *   - the user-space controller (replay/drwa.py) estimates cwnd from the bytes received per
 *     RTT and the RTT from the UE kernel's receiver-side timestamp estimate, computes
 *     rwnd = lambda * RTT_min / RTT * cwnd_est, and writes it in bytes into `drwa_rwnd`;
 *   - here rwnd >> wscale replaces the 16-bit window when it is smaller.
 *
 * A flow whose SYN this program did not see (opened before it was attached) is left alone.
 * Maps are LRU hashes: flows that ended are evicted.
 */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/pkt_cls.h>
#include <linux/types.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define TCP_OFF_FLAGS 13
#define TCP_OFF_WINDOW 14
#define TCP_OFF_CHECK 16
#define TCP_FLAG_FIN 0x01
#define TCP_FLAG_SYN 0x02
#define TCP_FLAG_RST 0x04
#define TCP_FLAG_ACK 0x10
#define TCP_OPT_EOL 0
#define TCP_OPT_NOP 1
#define TCP_OPT_WSCALE 3
#define MAX_OPT_LEN 40
#define MAX_L2_LEN 14
#define MAX_FLOWS 4096

/* Layouts shared with replay/drwa.py (struct module, native byte order; addresses and ports
 * as on the wire). */
struct drwa_key {
	__u32 ue_addr;
	__u32 peer_addr;
	__u16 ue_port;
	__u16 peer_port;
};

struct drwa_flow {         /* written by this program */
	__u64 acks_seen;       /* ACKs of the flow after its SYN */
	__u64 acks_lowered;    /* of which the window was lowered */
	__u32 last_kernel_win; /* the kernel's last advertised window, bytes (field << wscale) */
	__u32 last_sent_win;   /* what went out, bytes */
	__u8 wscale;           /* the UE's receive window shift (its SYN's option; 0 without) */
	__u8 pad[7];
};

struct drwa_rwnd {     /* written by the controller */
	__u32 rwnd_bytes;  /* DRWA's window; 0: no value yet (leave the flow alone) */
	__u32 reserved;
};

struct drwa_config {
	__u32 l2_len;      /* bytes before the IPv4 header: 0 TUN, 14 Ethernet */
	__u32 enabled;     /* 0: count only, never rewrite */
};

struct drwa_stats {
	__u64 acks_seen;      /* outgoing IPv4 TCP ACKs (not SYN/RST) */
	__u64 acks_lowered;
	__u64 syns_seen;      /* SYNs / SYN-ACKs whose window scale was recorded */
	__u64 no_flow;        /* ACKs of flows whose SYN was not seen */
	__u64 rewrite_errors; /* store or checksum helper failures (segment left as it was) */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_FLOWS);
	__type(key, struct drwa_key);
	__type(value, struct drwa_flow);
} drwa_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_FLOWS);
	__type(key, struct drwa_key);
	__type(value, struct drwa_rwnd);
} drwa_rwnd SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct drwa_config);
} drwa_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct drwa_stats);
} drwa_stats SEC(".maps");

/* The window scale option among a SYN's `len` option bytes (copied to `opts`); 0 without
 * one. The walk is unrolled over every byte position so that every read of `opts` is at a
 * constant offset (the verifier refuses variable stack offsets); `next` is where the next
 * option starts. */
static __always_inline __u8 syn_wscale(const __u8 *opts, __u32 len)
{
	__u32 next = 0;
#pragma unroll
	for (int p = 0; p < MAX_OPT_LEN - 2; p++) {
		if (p != next || p >= len)
			continue;
		__u8 kind = opts[p];
		if (kind == TCP_OPT_EOL)
			return 0;
		if (kind == TCP_OPT_NOP) {
			next = p + 1;
			continue;
		}
		__u8 olen = opts[p + 1];
		if (olen < 2)
			return 0;
		if (kind == TCP_OPT_WSCALE && olen == 3)
			return opts[p + 2] > 14 ? 14 : opts[p + 2]; /* RFC 7323: at most 14 */
		next = p + olen;
	}
	return 0;
}

SEC("tc")
int drwa_egress(struct __sk_buff *skb)
{
	__u32 zero = 0;
	struct drwa_config *cfg = bpf_map_lookup_elem(&drwa_cfg, &zero);
	struct drwa_stats *stats = bpf_map_lookup_elem(&drwa_stats, &zero);

	/* Never drop or redirect. */
	if (!cfg || !stats)
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
	if (ip.frag_off & bpf_htons(0x1fff))
		return TC_ACT_OK;

	__u32 tcp_off = l2 + ip.ihl * 4;
	__u8 th[20];
	if (bpf_skb_load_bytes(skb, tcp_off, th, sizeof(th)) < 0)
		return TC_ACT_OK;
	__u8 flags = th[TCP_OFF_FLAGS];

	struct drwa_key key = {};
	key.ue_addr = ip.saddr;
	key.peer_addr = ip.daddr;
	__builtin_memcpy(&key.ue_port, &th[0], 2);
	__builtin_memcpy(&key.peer_port, &th[2], 2);

	if (flags & TCP_FLAG_SYN) {
		/* The UE's own SYN (or SYN-ACK): its window scale, a new flow. */
		__u32 opt_len = ((th[12] >> 4) * 4);
		opt_len = opt_len > 20 ? opt_len - 20 : 0;
		if (opt_len > MAX_OPT_LEN)
			opt_len = MAX_OPT_LEN;
		__u8 opts[MAX_OPT_LEN] = {};
		if (opt_len > 0 && bpf_skb_load_bytes(skb, tcp_off + 20, opts, opt_len) < 0)
			opt_len = 0;
		struct drwa_flow flow = {};
		flow.wscale = syn_wscale(opts, opt_len);
		bpf_map_update_elem(&drwa_flows, &key, &flow, BPF_ANY);
		bpf_map_delete_elem(&drwa_rwnd, &key); /* a reused 4-tuple starts without a value */
		__sync_fetch_and_add(&stats->syns_seen, 1);
		return TC_ACT_OK;
	}
	if (!(flags & TCP_FLAG_ACK) || (flags & TCP_FLAG_RST))
		return TC_ACT_OK;
	__sync_fetch_and_add(&stats->acks_seen, 1);

	struct drwa_flow *flow = bpf_map_lookup_elem(&drwa_flows, &key);
	if (!flow) {
		__sync_fetch_and_add(&stats->no_flow, 1);
		return TC_ACT_OK;
	}
	__sync_fetch_and_add(&flow->acks_seen, 1);
	__u16 field_be;
	__builtin_memcpy(&field_be, &th[TCP_OFF_WINDOW], 2);
	__u32 field = bpf_ntohs(field_be);
	__u8 ws = flow->wscale & 15;
	__u32 kernel_win = field << ws;
	flow->last_kernel_win = kernel_win;
	flow->last_sent_win = kernel_win;

	struct drwa_rwnd *rwnd = bpf_map_lookup_elem(&drwa_rwnd, &key);
	if (!rwnd || !rwnd->rwnd_bytes || !cfg->enabled)
		return TC_ACT_OK;
	__u32 want = rwnd->rwnd_bytes >> ws;
	if (want < 1)
		want = 1;
	if (want >= field)
		return TC_ACT_OK;

	__u16 new_be = bpf_htons((__u16)want);
	if (bpf_skb_store_bytes(skb, tcp_off + TCP_OFF_WINDOW, &new_be, sizeof(new_be), 0) < 0) {
		__sync_fetch_and_add(&stats->rewrite_errors, 1);
		return TC_ACT_OK;
	}
	/* Incremental checksum update (RFC 1624); a segment still CHECKSUM_PARTIAL is summed
	 * later by the stack over the field written here. */
	if (bpf_l4_csum_replace(skb, tcp_off + TCP_OFF_CHECK, field_be, new_be, sizeof(new_be)) < 0) {
		bpf_skb_store_bytes(skb, tcp_off + TCP_OFF_WINDOW, &field_be, sizeof(field_be), 0);
		__sync_fetch_and_add(&stats->rewrite_errors, 1);
		return TC_ACT_OK;
	}
	flow->last_sent_win = want << ws;
	__sync_fetch_and_add(&flow->acks_lowered, 1);
	__sync_fetch_and_add(&stats->acks_lowered, 1);
	return TC_ACT_OK;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
