/* SPDX-License-Identifier: MIT OR GPL-2.0 */
/*
 * The maps the CLAW server's BPF programs share with each other and with user space.
 *
 *   claw_peers     HASH      UE IPv4 address  -> struct claw_peer        written by the agent
 *   claw_flows     LRU_HASH  struct claw_flow_key -> struct claw_flow_stats  written by the CC
 *   claw_ack_flags LRU_HASH  struct claw_flow_key -> struct claw_ack_flags   written by tc ingress
 *
 * Python mirrors these layouts in claw/server/maps.py; tests/test_claw_server_maps.py checks
 * the two against the BTF of the built objects, so a change here that is not made there
 * fails a test rather than corrupting a map.
 *
 * All times are CLOCK_MONOTONIC nanoseconds: bpf_ktime_get_ns() in BPF, time.monotonic_ns()
 * in Python. Addresses and ports are stored in network byte order, exactly as in the
 * packet and in struct sock, so nothing converts them on the per-ACK path.
 *
 * Only fixed-width kernel types (__u32, __u64): the BPF programs include this after
 * vmlinux.h (or the uapi headers); user space never compiles it.
 */
#ifndef CLAW_MAPS_H
#define CLAW_MAPS_H

#define CLAW_PEERS_MAX 1024
#define CLAW_FLOWS_MAX 4096

/* TCP header byte 12 reserved bits set by the UE's egress program (claw/bpf/ack_mark_egress.bpf.c). */
#define CLAW_ACK_WIRELESS 0x02 /* an RLC loss (poor channel) within the last RTT */
#define CLAW_ACK_OVERFLOW 0x04 /* a BS buffer overflow within the last RTT */
#define CLAW_ACK_MASK (CLAW_ACK_WIRELESS | CLAW_ACK_OVERFLOW)

/* What the client asks for (claw_peer.mode), from the feedback flags. 0 = no usable report. */
enum claw_mode {
	CLAW_MODE_NONE = 0,
	CLAW_MODE_CELLULAR = 1,  /* cellular bottleneck, not saturated: cwnd = W_claw */
	CLAW_MODE_SATURATED = 2, /* cellular, saturated: cwnd = max(W_cubic', W_claw) */
	CLAW_MODE_WIRELINE = 3,  /* wireline bottleneck: cwnd = W_cubic */
};

/* What the CC actually applied on the last ACK (claw_flow_stats.applied). */
enum claw_applied {
	CLAW_APPLIED_NO_FEEDBACK = 0, /* no report yet for this UE: the normal initial window, then Cubic */
	CLAW_APPLIED_CELLULAR = 1,
	CLAW_APPLIED_SATURATED = 2,
	CLAW_APPLIED_WIRELINE = 3,
	CLAW_APPLIED_STALE = 4,       /* the last report is older than stale_after_ns: Cubic */
	CLAW_APPLIED_RTO = 5,         /* after a retransmission timeout, until loss recovery ends: Cubic */
};

/* Why the last window reduction (or non-reduction) happened (claw_flow_stats.last_loss_cause). */
enum claw_loss_cause {
	CLAW_LOSS_NONE = 0,
	CLAW_LOSS_WIRELESS = 1,  /* flagged 0x02 only: no reduction */
	CLAW_LOSS_OVERFLOW = 2,  /* flagged 0x04: beta = 0.7 */
	CLAW_LOSS_UNFLAGGED = 3, /* no flag: congestion elsewhere, beta = 0.7 */
};

/* claw_flow_stats.flags */
#define CLAW_FLOW_CWND_LIMITED 0x01 /* tp->is_cwnd_limited on the last ACK */
#define CLAW_FLOW_CAP_ACTIVE 0x02   /* W_claw capped at the reduced cwnd (one RTT after a loss) */
#define CLAW_FLOW_SHADOW_SS 0x04    /* the shadow Cubic is in slow start */
#define CLAW_FLOW_CQIC 0x08         /* the flow runs the cqic variant */
#define CLAW_FLOW_RELEASED 0x10     /* the socket closed (the entry stays until evicted) */
#define CLAW_FLOW_NETWORK_LIMITED 0x20 /* held back by the network on the last ACK: cwnd-limited,
                                        * or a segment unsent with the receive window open
                                        * (claw_cc.bpf.c, network_limited) */

/* Key of claw_peers: the UE's IPv4 address, network byte order (a __u32). */

struct claw_peer {
	__u64 updated_ns;     /* when the agent accepted the report */
	__u64 stale_after_ns; /* the report counts as absent once older than this (3 periods) */
	__u32 w_claw_bytes;   /* CLAW's window for flows towards this UE */
	__u32 mode;           /* enum claw_mode */
	__u32 seq;            /* the report's sequence number (for logs) */
	__u32 window_ms;      /* the window T the client used */
};

struct claw_flow_key {
	__u32 ue_addr;     /* network byte order */
	__u32 server_addr; /* network byte order */
	__u16 ue_port;     /* network byte order */
	__u16 server_port; /* network byte order */
};

struct claw_flow_stats {
	__u64 updated_ns;        /* the last ACK the CC processed */
	__u64 cwnd_limited_ns;   /* the last ACK on which the flow was cwnd-limited; 0 never */
	__u64 acks;              /* ACKs processed by cong_control */
	__u64 loss_wireless;     /* loss events flagged wireless (window kept) */
	__u64 loss_overflow;     /* loss events flagged BS overflow (reduced) */
	__u64 loss_unflagged;    /* loss events without a flag (reduced) */
	__u64 loss_rto;          /* retransmission timeouts */
	__u32 srtt_us;
	__u32 cwnd_pkts;         /* the window applied on the last ACK */
	__u32 w_cubic_pkts;      /* the shadow Cubic window */
	__u32 w_claw_pkts;       /* ceil(W_claw / MSS) after the loss cap; 0 when no fresh report */
	__u32 ssthresh_pkts;     /* tp->snd_ssthresh */
	__u32 mss_bytes;
	__u32 applied;           /* enum claw_applied */
	__u32 flags;             /* CLAW_FLOW_* */
	__u32 last_loss_cause;   /* enum claw_loss_cause */
	__u32 peer_seq;          /* claw_peer.seq seen on the last ACK (applied unless RTO) */
	__u32 loss_cwnd_before_pkts;    /* the last loss event: the window applied when it came, */
	__u32 loss_cwnd_after_pkts;     /* and what ssthresh made of it (W_claw's cap) */
	__u32 loss_w_cubic_before_pkts; /* the shadow Cubic's window before and after */
	__u32 loss_w_cubic_after_pkts;
	__u32 boost_from_pkts;   /* the last switch cellular -> saturated: W_cubic before, */
	__u32 boost_to_pkts;     /* and W_cubic' it was raised to */
	__u64 boosts;            /* switches cellular -> saturated */
	__u64 pacing_rate_Bps;   /* sk_pacing_rate set on the last ACK, bytes/s */
	__u64 report_seen_ns;    /* the first ACK that saw report peer_seq (reaction time) */
	__u64 report_seen_acks;  /* the value of acks on that ACK */
	__u64 claw_limited_since_ns; /* start of the current run of ACKs on which the flow was
	                              * network-limited at CLAW's window (see claw_cc.bpf.c,
	                              * network_limited, runs_claws_window); 0 when the last
	                              * ACK was not */
};

struct claw_ack_flags {
	__u64 last_ack_ns;      /* the last ACK seen at ingress */
	__u64 wireless_ns;      /* the last ACK that carried 0x02; 0 never */
	__u64 overflow_ns;      /* the last ACK that carried 0x04; 0 never */
	__u64 acks;             /* ACKs seen */
	__u64 wireless_acks;    /* of which carried 0x02 */
	__u64 overflow_acks;    /* of which carried 0x04 */
};

/*
 * The one map both programs declare: the ingress program writes it, the CC reads it, and
 * the loader pins one copy that the second object reuses (both must declare it alike, so it
 * is declared here once; bpf_helpers.h must come first).
 */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, CLAW_FLOWS_MAX);
	__type(key, struct claw_flow_key);
	__type(value, struct claw_ack_flags);
} claw_ack_flags SEC(".maps");

#endif /* CLAW_MAPS_H */
