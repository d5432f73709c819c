// SPDX-License-Identifier: MIT OR GPL-2.0
/*
 * CLAW's server congestion control (Algorithm 1 of the paper, as shared/docs/claw-spec.md
 * settles it), a BPF struct_ops tcp_congestion_ops.
 *
 * One source, two congestion controls: built plainly it is "claw"; built with
 * -DCLAW_VARIANT_CQIC "cqic", which ignores the saturated and wireline modes (CQIC has no
 * hybrid mode and no bottleneck detector; its client computes N_f = N_s). The name compiled
 * in is the variant's; the loader registers each run's copy as "<variant>_<run id>"
 * (claw/server/loader.py, cc_name), since congestion-control names are machine-wide.
 * Both share the maps of claw_maps.h through pins in the run's bpffs, so one agent serves
 * either.
 *
 * At init, with a fresh report for the UE in force: the first flight is W_claw (cellular or
 * saturated mode), paced over the handshake's RTT.
 *
 * Per ACK (cong_control):
 *   1. the shadow Cubic: the kernel's cubic (kfuncs) runs on a window of its own, W_cubic,
 *      kept in our part of the CA private area; we swap it into tp->snd_cwnd /
 *      snd_cwnd_cnt / snd_ssthresh around each kfunc call, so cubic computes exactly what
 *      it would for a socket whose window were W_cubic;
 *   2. the window: from the UE's entry in claw_peers (written by the agent) —
 *        cellular   cwnd = ceil(W_claw / MSS)
 *        saturated  cwnd = max(W_cubic, W_claw), where on the switch from cellular
 *                   mode W_cubic becomes W_cubic' once: 4 W_cubic in slow start, else
 *                   Cubic's curve two RTTs ahead (claw/DESIGN.md: why once)
 *        wireline   cwnd = W_cubic
 *      and W_cubic when there is no report yet (the normal initial window, then Cubic),
 *      when the report is older than 3 feedback periods, and while recovering from an RTO;
 *   3. the pacing rate (the kernel's own rule: 200 % of cwnd/srtt in slow start, 120 %
 *      after), with internal pacing on, so a jump of cwnd to W_claw is spread over an RTT
 *      instead of leaving as one burst into the base station's queue;
 *   4. the per-flow statistics the agent echoes and replay samples.
 *
 * Losses (ssthresh, called when the kernel enters recovery): the flags the UE put on the
 * ACKs that report the loss, recorded by the tc ingress program (ack_flags_ingress.bpf.c)
 * in claw_ack_flags: wireless only → no reduction; overflow, or no flag → beta = 0.7 on
 * cwnd and on W_cubic (Cubic's own recalc_ssthresh), and W_claw capped at the reduced
 * cwnd for one RTT. An RTO gets the kernel's normal treatment: cwnd to in-flight + 1,
 * Cubic's reduction, slow start, until the loss state ends.
 *
 * Because cong_control is implemented, the kernel neither runs PRR nor resets cwnd to
 * ssthresh at the end of recovery (tcp_end_cwnd_reduction returns early): the window is
 * whatever this program writes.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_endian.h>

#include "claw_maps.h"

char LICENSE[] SEC("license") = "Dual MIT/GPL";

#ifdef CLAW_VARIANT_CQIC
#define CC_NAME "cqic"
#define CC_OPS cqic
#define CC_VARIANT_FLAG CLAW_FLOW_CQIC
#define CC_HONOURS_MODES 0
#else
#define CC_NAME "claw"
#define CC_OPS claw
#define CC_VARIANT_FLAG 0
#define CC_HONOURS_MODES 1
#endif

/* Kernel constants that are macros, hence absent from vmlinux.h. */
#define TCP_CONG_NON_RESTRICTED 0x1 /* include/net/tcp.h: may be a namespace's default */
#define FLAG_DATA_ACKED 0x04        /* net/ipv4/tcp_input.c: this ACK acknowledged new data */
#define TCP_INFINITE_SSTHRESH 0x7fffffff

#define NSEC_PER_USEC 1000ULL
#define USEC_PER_SEC 1000000ULL

/* Multiplicative decrease: Cubic's own beta (717/1024 = 0.700), as the spec's 0.7. */
#define BETA_SCALED 717U
#define BETA_SCALE 1024U
/* The smallest window CLAW sets from W_claw: a W_claw of 0 (no free resources at all)
 * must still let ACKs come back to drive the analyzer and the hybrid mode. */
#define MIN_CWND_PKTS 2U
/* A loss is attributed to a flag carried by an ACK at most one srtt old, and never less
 * than this (a fresh flow with no RTT sample yet). */
#define MIN_FLAG_LOOKBACK_NS (1000ULL * 1000ULL)
/* Cubic's cube_rtt_scale = bic_scale (41, a module parameter we cannot read) * 10. */
#define CUBE_RTT_SCALE 410ULL
#define BICTCP_HZ_SHIFT 10
/* Cubic's fastest growth after slow start is one packet per two ACKs (ca->cnt >= 2):
 * x1.5 per RTT, so two RTTs ahead is at most x2.25. */
#define PROJECTION_MAX_NUM 9U
#define PROJECTION_MAX_DEN 4U
/* Pacing ratios of the kernel's tcp_update_pacing_rate (sysctls tcp_pacing_*_ratio). */
#define PACING_SS_PERCENT 200ULL
#define PACING_CA_PERCENT 120ULL

extern unsigned int CONFIG_HZ __kconfig;

/* The kernel's Cubic, exported to BPF congestion controls as kfuncs. */
extern void cubictcp_init(struct sock *sk) __ksym;
extern __u32 cubictcp_recalc_ssthresh(struct sock *sk) __ksym;
extern void cubictcp_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern void cubictcp_state(struct sock *sk, __u8 new_state) __ksym;
extern void cubictcp_cwnd_event(struct sock *sk, enum tcp_ca_event event) __ksym;
extern void cubictcp_acked(struct sock *sk, const struct ack_sample *sample) __ksym;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, CLAW_PEERS_MAX);
	__type(key, __u32);
	__type(value, struct claw_peer);
} claw_peers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, CLAW_FLOWS_MAX);
	__type(key, struct claw_flow_key);
	__type(value, struct claw_flow_stats);
} claw_flows SEC(".maps");

/* Our state, after Cubic's in the socket's CA private area. */
struct claw_own {
	__u64 cap_until_ns;        /* W_claw is capped at cap_pkts until then (one RTT after a loss) */
	__u32 shadow_cwnd;         /* W_cubic, packets */
	__u32 shadow_ssthresh;     /* the shadow Cubic's ssthresh, packets */
	__u32 shadow_cwnd_cnt;     /* the shadow's additive-increase counter (tp->snd_cwnd_cnt) */
	__u32 shadow_prior_cwnd;   /* W_cubic before the last loss event, for undo */
	__u32 shadow_prior_ssthresh;
	__u32 cap_pkts;
	__u8 in_rto;               /* between an RTO and the end of its loss state */
	__u8 reduced;              /* the last loss event reduced the shadow */
	__u8 applied;              /* enum claw_applied of the last ACK */
	__u8 last_cause;           /* enum claw_loss_cause of the last loss event */
};

struct claw_ca {
	/* Must come first: the cubictcp_* kfuncs use inet_csk_ca(sk) as their struct bictcp. */
	struct bictcp cubic;
	struct claw_own own;
};

_Static_assert(sizeof(struct claw_ca) <= sizeof(((struct inet_connection_sock *)0)->icsk_ca_priv),
	       "Cubic's state and ours must fit the CA private area");

static __always_inline struct tcp_sock *tcp_sk(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct inet_connection_sock *inet_csk(const struct sock *sk)
{
	return (struct inet_connection_sock *)sk;
}

static __always_inline struct claw_ca *claw_ca(const struct sock *sk)
{
	return (struct claw_ca *)inet_csk(sk)->icsk_ca_priv;
}

static __always_inline __u32 max_u32(__u32 a, __u32 b)
{
	return a > b ? a : b;
}

static __always_inline __u32 min_u32(__u32 a, __u32 b)
{
	return a < b ? a : b;
}

static __always_inline void flow_key(const struct sock *sk, struct claw_flow_key *key)
{
	/* The server is the local end; the UE the remote one. skc_num is in host order. */
	key->ue_addr = sk->__sk_common.skc_daddr;
	key->server_addr = sk->__sk_common.skc_rcv_saddr;
	key->ue_port = sk->__sk_common.skc_dport;
	key->server_port = bpf_htons(sk->__sk_common.skc_num);
}

static __always_inline struct claw_flow_stats *flow_stats(const struct claw_flow_key *key)
{
	struct claw_flow_stats *st = bpf_map_lookup_elem(&claw_flows, key);

	if (st)
		return st;
	/* New flow, or its entry was evicted: start it again from zero. */
	struct claw_flow_stats zero = {};
	bpf_map_update_elem(&claw_flows, key, &zero, BPF_NOEXIST);
	return bpf_map_lookup_elem(&claw_flows, key);
}

/* True when `at_ns` (0 = never) lies within `window_ns` before `now_ns`. A stamp a little
 * after now (written on another CPU between our clock read and the load) counts. */
static __always_inline int within(__u64 at_ns, __u64 now_ns, __u64 window_ns)
{
	if (!at_ns)
		return 0;
	return at_ns >= now_ns || now_ns - at_ns <= window_ns;
}

/* Saved real window while the shadow's is swapped in. */
struct real_window {
	__u32 cwnd;
	__u32 cwnd_cnt;
	__u32 ssthresh;
};

static __always_inline void shadow_enter(struct sock *sk, struct claw_ca *ca, struct real_window *saved)
{
	struct tcp_sock *tp = tcp_sk(sk);

	saved->cwnd = tp->snd_cwnd;
	saved->cwnd_cnt = tp->snd_cwnd_cnt;
	saved->ssthresh = tp->snd_ssthresh;
	tp->snd_cwnd = ca->own.shadow_cwnd;
	tp->snd_cwnd_cnt = ca->own.shadow_cwnd_cnt;
	tp->snd_ssthresh = ca->own.shadow_ssthresh;
}

static __always_inline void shadow_leave(struct sock *sk, struct claw_ca *ca, const struct real_window *saved)
{
	struct tcp_sock *tp = tcp_sk(sk);

	ca->own.shadow_cwnd = max_u32(tp->snd_cwnd, 1);
	ca->own.shadow_cwnd_cnt = tp->snd_cwnd_cnt;
	ca->own.shadow_ssthresh = tp->snd_ssthresh;
	tp->snd_cwnd = saved->cwnd;
	tp->snd_cwnd_cnt = saved->cwnd_cnt;
	tp->snd_ssthresh = saved->ssthresh;
}

static __always_inline int shadow_in_slow_start(const struct claw_ca *ca)
{
	return ca->own.shadow_cwnd < ca->own.shadow_ssthresh;
}

/*
 * May the shadow grow on this ACK? The kernel grows a window only while the flow uses it
 * (tcp_is_cwnd_limited: in slow start while cwnd < 2 * max_packets_out, else only when
 * cwnd-limited). The kfunc applies that rule to the real window, which here is often
 * W_claw: a shadow far below a filled W_claw would then grow without bound and, at the
 * switch to saturated or wireline mode, become a burst. So we also apply the rule to the
 * shadow itself: it grows only while the flight has reached it (or half of it in slow start).
 */
static __always_inline int shadow_may_grow(const struct tcp_sock *tp, const struct claw_ca *ca)
{
	__u32 flight_max = tp->max_packets_out;

	if (shadow_in_slow_start(ca))
		return ca->own.shadow_cwnd < 2 * flight_max;
	return flight_max >= ca->own.shadow_cwnd;
}

/*
 * W_cubic': what the shadow would reach two RTTs from now, compensating the two windows
 * the client needs to declare saturation (spec: x4 in slow start, else Cubic's curve
 * W(t) = C (t - K)^3 + W_max evaluated at t + 2 RTT, in Cubic's own fixed point: time in
 * 2^-10 s, cube_rtt_scale / 2^40).
 */
static __always_inline __u32 shadow_projected(const struct claw_ca *ca, __u32 srtt_us)
{
	__u32 w = ca->own.shadow_cwnd;
	const struct bictcp *cubic = &ca->cubic;

	if (shadow_in_slow_start(ca))
		return w * 4;
	if (!cubic->epoch_start || !CONFIG_HZ)
		return w; /* no congestion-avoidance epoch yet: nothing to project */

	__s32 elapsed_jiffies = (__s32)((__u32)bpf_jiffies64() - cubic->epoch_start);
	if (elapsed_jiffies < 0)
		elapsed_jiffies = 0;
	__u64 t_us = (__u64)elapsed_jiffies * USEC_PER_SEC / CONFIG_HZ + cubic->delay_min + 2ULL * srtt_us;
	__u64 t = (t_us << BICTCP_HZ_SHIFT) / USEC_PER_SEC;
	__u64 k = cubic->bic_K;
	__u64 offs = t < k ? k - t : t - k;
	if (offs > (1ULL << 18)) /* 256 s: keeps offs^3 * 410 within 64 bits */
		offs = 1ULL << 18;
	__u64 delta = (CUBE_RTT_SCALE * offs * offs * offs) >> (10 + 3 * BICTCP_HZ_SHIFT);
	__u64 origin = cubic->bic_origin_point;
	__u64 target;
	if (t < k)
		target = origin > delta ? origin - delta : 0;
	else
		target = origin + delta;

	__u64 upper = (__u64)w * PROJECTION_MAX_NUM / PROJECTION_MAX_DEN;
	if (target > upper)
		target = upper;
	if (target < w)
		target = w;
	return (__u32)target;
}

/*
 * Was the flow held back by the network on this ACK, rather than by the application or
 * the receiver? The bottleneck detector's evidence (claw/DESIGN.md, "Departure: the
 * evidence is 'held back by the network', not 'cwnd-limited'"). Either
 *   - cwnd-limited (tp->is_cwnd_limited: the kernel remembers it for the current window,
 *     see tcp_cwnd_validate), or
 *   - a full segment written but not sent while the receiver's window would take it: the
 *     send was deferred by the sending host's own queue (TCP small queues) or by pacing.
 *     Behind a bottleneck at the host's own link (a shaped NIC, a rate-limited VM port,
 *     or a shaper anywhere on the same host while the packet is still charged to the
 *     socket) TSQ keeps only a couple of packets in the queue, so the flow runs at the
 *     bottleneck's rate, never cwnd-limited and never losing. The kernel counts this
 *     case as network-limited too: tcp_rate_check_app_limited marks a flow app-limited
 *     only with less than a segment unsent *and* nothing in the host's queues.
 * An application that writes less than it may send, or a closed receive window, is
 * neither: the flow then uses fewer RBs than N_f on any path.
 */
static __always_inline int network_limited(const struct tcp_sock *tp, __u32 mss)
{
	if (tp->is_cwnd_limited)
		return 1;
	if (tp->write_seq - tp->snd_nxt < mss)
		return 0;
	/* The receiver's window end, snd_una + snd_wnd, leaves room for another segment. */
	return (__s32)(tp->snd_una + tp->snd_wnd - (tp->snd_nxt + mss)) >= 0;
}

static __always_inline __u32 srtt_us_of(const struct tcp_sock *tp)
{
	return tp->srtt_us >> 3; /* tp->srtt_us is 8 x the smoothed RTT in us */
}

/* ceil(W_claw / MSS), at least MIN_CWND_PKTS (before any loss cap). */
static __always_inline __u32 w_claw_packets(const struct claw_peer *peer, __u32 mss)
{
	return max_u32((__u32)(((__u64)peer->w_claw_bytes + mss - 1) / mss), MIN_CWND_PKTS);
}

/* The kernel's pacing rule (tcp_update_pacing_rate) on a window of `pkts`: `percent` of
 * pkts * MSS / srtt, bytes/s; unlimited while there is no RTT sample. Sets and returns it. */
static __always_inline __u64 set_pacing_rate(struct sock *sk, __u32 mss, __u32 pkts, __u32 srtt_us, __u64 percent)
{
	__u64 rate_Bps = ~0ULL;

	if (srtt_us)
		rate_Bps = (__u64)mss * pkts * USEC_PER_SEC / srtt_us * percent / 100;
	if (rate_Bps > sk->sk_max_pacing_rate)
		rate_Bps = sk->sk_max_pacing_rate;
	sk->sk_pacing_rate = rate_Bps;
	return rate_Bps;
}

/* Which flag the ACKs that reported this loss carried (overflow wins over wireless: when
 * both happened, the queue overflowed and backing off is right). */
static __always_inline __u32 classify_loss(const struct sock *sk, __u64 now_ns)
{
	struct claw_flow_key key = {};
	struct claw_ack_flags *flags;
	__u64 lookback_ns = (__u64)srtt_us_of(tcp_sk(sk)) * NSEC_PER_USEC;

	if (lookback_ns < MIN_FLAG_LOOKBACK_NS)
		lookback_ns = MIN_FLAG_LOOKBACK_NS;
	flow_key(sk, &key);
	flags = bpf_map_lookup_elem(&claw_ack_flags, &key);
	if (!flags)
		return CLAW_LOSS_UNFLAGGED;
	if (within(flags->overflow_ns, now_ns, lookback_ns))
		return CLAW_LOSS_OVERFLOW;
	if (within(flags->wireless_ns, now_ns, lookback_ns))
		return CLAW_LOSS_WIRELESS;
	return CLAW_LOSS_UNFLAGGED;
}

/* Cubic's multiplicative decrease of the shadow, through the kernel's own function. */
static __always_inline void shadow_reduce(struct sock *sk, struct claw_ca *ca)
{
	struct real_window saved;
	__u32 ssthresh;

	shadow_enter(sk, ca, &saved);
	ssthresh = cubictcp_recalc_ssthresh(sk);
	shadow_leave(sk, ca, &saved);
	ca->own.shadow_ssthresh = ssthresh;
	/* The shadow has no PRR: it drops to its new threshold at once. */
	ca->own.shadow_cwnd = max_u32(ssthresh, 1);
	ca->own.shadow_cwnd_cnt = 0;
	ca->own.reduced = 1;
}

SEC("struct_ops/claw_init")
void BPF_PROG(claw_init, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct claw_ca *ca = claw_ca(sk);
	struct claw_flow_key key = {};

	cubictcp_init(sk);
	ca->own.cap_until_ns = 0;
	ca->own.cap_pkts = 0;
	ca->own.shadow_cwnd = tp->snd_cwnd; /* the normal initial window */
	ca->own.shadow_ssthresh = tp->snd_ssthresh;
	ca->own.shadow_cwnd_cnt = 0;
	ca->own.shadow_prior_cwnd = tp->snd_cwnd;
	ca->own.shadow_prior_ssthresh = tp->snd_ssthresh;
	ca->own.in_rto = 0;
	ca->own.reduced = 0;
	ca->own.applied = CLAW_APPLIED_NO_FEEDBACK;
	ca->own.last_cause = CLAW_LOSS_NONE;

	/* Pace inside TCP (no fq qdisc on this platform), as BBR does. */
	if (sk->sk_pacing_status == SK_PACING_NONE)
		sk->sk_pacing_status = SK_PACING_NEEDED;

	flow_key(sk, &key);
	/* A new connection on a reused 4-tuple starts from zero. */
	struct claw_flow_stats zero = {};
	__u64 now_ns = bpf_ktime_get_ns();
	__u32 mss = tp->mss_cache ? tp->mss_cache : 1;
	__u32 srtt_us = srtt_us_of(tp);
	zero.flags = CC_VARIANT_FLAG;
	zero.w_cubic_pkts = tp->snd_cwnd;
	zero.mss_bytes = mss;
	/* The handshake's RTT (passive open: measured before the CC is initialised), so the
	 * agent's first echo gives the client its window T before the first data ACK. */
	zero.srtt_us = srtt_us;
	zero.updated_ns = now_ns;

	/* A fresh report for this UE is in force already (its client reports while the UE is
	 * connected): the first flight is CLAW's window, not the initial window (claw/DESIGN.md,
	 * "W_claw from the first flight"). Wireline mode keeps the initial window: Cubic's. */
	__u32 ue_addr = key.ue_addr;
	struct claw_peer *peer = bpf_map_lookup_elem(&claw_peers, &ue_addr);
	if (peer && peer->mode != CLAW_MODE_NONE && within(peer->updated_ns, now_ns, peer->stale_after_ns)) {
		__u32 mode = CC_HONOURS_MODES ? peer->mode : CLAW_MODE_CELLULAR;
		__u32 w_claw_pkts = w_claw_packets(peer, mss);
		__u32 target = 0;

		if (mode == CLAW_MODE_CELLULAR) {
			target = w_claw_pkts;
			ca->own.applied = CLAW_APPLIED_CELLULAR;
		} else if (mode == CLAW_MODE_SATURATED) {
			target = max_u32(tp->snd_cwnd, w_claw_pkts);
			ca->own.applied = CLAW_APPLIED_SATURATED;
		}
		if (target) {
			if (tp->snd_cwnd_clamp)
				target = min_u32(target, tp->snd_cwnd_clamp);
			tp->snd_cwnd = target;
			zero.applied = ca->own.applied;
			zero.w_claw_pkts = w_claw_pkts;
			zero.peer_seq = peer->seq;
			zero.report_seen_ns = now_ns;
			/* The flow offers CLAW's window from its start; its first ACK keeps this run
			 * only if the first flight was held back by the network (runs_claws_window). */
			zero.claw_limited_since_ns = now_ns;
			/* Spread over the first RTT, as every later jump to W_claw. */
			zero.pacing_rate_Bps = set_pacing_rate(sk, mss, target, srtt_us, PACING_CA_PERCENT);
		}
	}
	zero.cwnd_pkts = tp->snd_cwnd;
	bpf_map_update_elem(&claw_flows, &key, &zero, BPF_ANY);
}

SEC("struct_ops/claw_release")
void BPF_PROG(claw_release, struct sock *sk)
{
	struct claw_flow_key key = {};
	struct claw_flow_stats *st;

	flow_key(sk, &key);
	st = bpf_map_lookup_elem(&claw_flows, &key);
	if (st)
		st->flags |= CLAW_FLOW_RELEASED;
}

SEC("struct_ops/claw_ssthresh")
__u32 BPF_PROG(claw_ssthresh, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct claw_ca *ca = claw_ca(sk);
	__u64 now_ns = bpf_ktime_get_ns();
	__u32 cause = classify_loss(sk, now_ns);
	__u32 cwnd = tp->snd_cwnd;
	__u32 w_cubic_before = ca->own.shadow_cwnd;
	__u32 after;

	ca->own.shadow_prior_cwnd = ca->own.shadow_cwnd;
	ca->own.shadow_prior_ssthresh = ca->own.shadow_ssthresh;
	ca->own.last_cause = cause;

	if (cause == CLAW_LOSS_WIRELESS) {
		/* The radio lost it, not a queue: keep both windows. */
		ca->own.reduced = 0;
		after = max_u32(cwnd, MIN_CWND_PKTS);
	} else {
		shadow_reduce(sk, ca);
		after = max_u32((__u32)((__u64)cwnd * BETA_SCALED / BETA_SCALE), MIN_CWND_PKTS);
		__u64 rtt_ns = (__u64)srtt_us_of(tp) * NSEC_PER_USEC;
		ca->own.cap_pkts = after;
		ca->own.cap_until_ns = now_ns + (rtt_ns ? rtt_ns : MIN_FLAG_LOOKBACK_NS);
	}

	struct claw_flow_key key = {};
	struct claw_flow_stats *st;
	flow_key(sk, &key);
	st = flow_stats(&key);
	if (st) {
		st->last_loss_cause = cause;
		st->loss_cwnd_before_pkts = cwnd;
		st->loss_cwnd_after_pkts = after;
		st->loss_w_cubic_before_pkts = w_cubic_before;
		st->loss_w_cubic_after_pkts = ca->own.shadow_cwnd;
		if (cause == CLAW_LOSS_WIRELESS)
			__sync_fetch_and_add(&st->loss_wireless, 1);
		else if (cause == CLAW_LOSS_OVERFLOW)
			__sync_fetch_and_add(&st->loss_overflow, 1);
		else
			__sync_fetch_and_add(&st->loss_unflagged, 1);
	}
	return after;
}

SEC("struct_ops/claw_undo_cwnd")
__u32 BPF_PROG(claw_undo_cwnd, struct sock *sk)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct claw_ca *ca = claw_ca(sk);

	/* The loss was spurious (DSACK, timestamps): give back what it took. */
	ca->own.shadow_cwnd = max_u32(ca->own.shadow_cwnd, ca->own.shadow_prior_cwnd);
	ca->own.shadow_ssthresh = max_u32(ca->own.shadow_ssthresh, ca->own.shadow_prior_ssthresh);
	ca->own.cap_pkts = 0;
	ca->own.cap_until_ns = 0;
	return max_u32(tp->snd_cwnd, tp->prior_cwnd);
}

SEC("struct_ops/claw_set_state")
void BPF_PROG(claw_set_state, struct sock *sk, __u8 new_state)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct claw_ca *ca = claw_ca(sk);

	cubictcp_state(sk, new_state);
	if (new_state == TCP_CA_Loss) {
		/* tcp_enter_loss has just set cwnd to in-flight + 1: the shadow starts over from
		 * there (slow start up to its reduced ssthresh), and drives the window until the
		 * loss state ends. */
		ca->own.shadow_cwnd = max_u32(tp->snd_cwnd, 1);
		ca->own.shadow_cwnd_cnt = 0;
		ca->own.cap_pkts = 0;
		ca->own.cap_until_ns = 0;
		ca->own.in_rto = 1;
	} else {
		ca->own.in_rto = 0;
	}
}

SEC("struct_ops/claw_cwnd_event")
void BPF_PROG(claw_cwnd_event, struct sock *sk, enum tcp_ca_event event)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct claw_ca *ca = claw_ca(sk);

	cubictcp_cwnd_event(sk, event);
	if (event != CA_EVENT_LOSS)
		return;
	/* A retransmission timeout (tcp_enter_loss, right after ssthresh): the kernel's normal
	 * behaviour, whatever the flags said, so Cubic's reduction if ssthresh skipped it. */
	if (!ca->own.reduced)
		shadow_reduce(sk, ca);
	tp->snd_ssthresh = ca->own.shadow_ssthresh;

	struct claw_flow_key key = {};
	struct claw_flow_stats *st;
	flow_key(sk, &key);
	st = flow_stats(&key);
	if (st) {
		st->loss_w_cubic_after_pkts = ca->own.shadow_cwnd;
		__sync_fetch_and_add(&st->loss_rto, 1);
	}
}

SEC("struct_ops/claw_pkts_acked")
void BPF_PROG(claw_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	struct claw_ca *ca = claw_ca(sk);
	struct real_window saved;

	/* Cubic's delay_min and HyStart, on the shadow (HyStart may end its slow start). */
	shadow_enter(sk, ca, &saved);
	cubictcp_acked(sk, sample);
	shadow_leave(sk, ca, &saved);
}

SEC("struct_ops/claw_cong_control")
void BPF_PROG(claw_cong_control, struct sock *sk, __u32 ack, int flag, const struct rate_sample *rs)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct claw_ca *ca = claw_ca(sk);
	__u64 now_ns = bpf_ktime_get_ns();
	__u8 ca_state = inet_csk(sk)->icsk_ca_state;
	__u32 acked = rs->acked_sacked;
	__u32 srtt_us = srtt_us_of(tp);
	__u32 mss = tp->mss_cache ? tp->mss_cache : 1;
	struct real_window saved;

	/* 1. The shadow Cubic, on every ACK in every mode; as the kernel would, it does not
	 * grow during a window reduction (CWR, fast recovery). */
	if (acked && (flag & FLAG_DATA_ACKED) && ca_state != TCP_CA_CWR && ca_state != TCP_CA_Recovery &&
	    shadow_may_grow(tp, ca)) {
		shadow_enter(sk, ca, &saved);
		cubictcp_cong_avoid(sk, ack, acked);
		shadow_leave(sk, ca, &saved);
	}

	/* 2. The window. */
	struct claw_flow_key key = {};
	flow_key(sk, &key);
	__u32 ue_addr = key.ue_addr;
	struct claw_peer *peer = bpf_map_lookup_elem(&claw_peers, &ue_addr);
	__u32 w_cubic = ca->own.shadow_cwnd;
	__u32 w_claw_pkts = 0;
	__u32 peer_seq = 0;
	__u32 st_boost_from = 0, st_boost_to = 0;
	__u32 target;
	__u8 applied;

	if (ca->own.cap_pkts && now_ns >= ca->own.cap_until_ns) {
		ca->own.cap_pkts = 0;
		ca->own.cap_until_ns = 0;
	}

	if (peer)
		peer_seq = peer->seq;
	if (ca->own.in_rto) {
		applied = CLAW_APPLIED_RTO;
		target = w_cubic;
	} else if (!peer || peer->mode == CLAW_MODE_NONE) {
		applied = CLAW_APPLIED_NO_FEEDBACK;
		target = w_cubic;
	} else if (!within(peer->updated_ns, now_ns, peer->stale_after_ns)) {
		applied = CLAW_APPLIED_STALE;
		target = w_cubic;
	} else {
		__u32 mode = CC_HONOURS_MODES ? peer->mode : CLAW_MODE_CELLULAR;

		w_claw_pkts = w_claw_packets(peer, mss);
		if (ca->own.cap_pkts)
			w_claw_pkts = min_u32(w_claw_pkts, ca->own.cap_pkts);
		if (mode == CLAW_MODE_WIRELINE) {
			applied = CLAW_APPLIED_WIRELINE;
			target = w_cubic;
		} else if (mode == CLAW_MODE_SATURATED) {
			applied = CLAW_APPLIED_SATURATED;
			if (ca->own.applied == CLAW_APPLIED_CELLULAR) {
				/* The switch from W_claw: the shadow could not grow while the flow sent
				 * only W_claw, for the two windows the client took to declare saturation;
				 * give it those two windows once (W_cubic'), then let it run. Applying
				 * W_cubic' on every ACK instead would feed the shadow the ACKs of a window
				 * 4x its own (x5 per RTT in slow start). See claw/DESIGN.md. */
				__u32 boosted = shadow_projected(ca, srtt_us);
				if (tp->snd_cwnd_clamp)
					boosted = min_u32(boosted, tp->snd_cwnd_clamp);
				st_boost_from = w_cubic;
				st_boost_to = boosted;
				ca->own.shadow_cwnd = boosted;
				w_cubic = boosted;
			}
			target = max_u32(w_cubic, w_claw_pkts);
		} else {
			applied = CLAW_APPLIED_CELLULAR;
			target = w_claw_pkts;
		}
	}
	target = max_u32(target, 1);
	if (tp->snd_cwnd_clamp)
		target = min_u32(target, tp->snd_cwnd_clamp);
	tp->snd_cwnd = target;
	ca->own.applied = applied;

	/* 3. Pacing: the kernel's rule on the window just set. */
	int fast = shadow_in_slow_start(ca) && applied != CLAW_APPLIED_CELLULAR;
	__u64 rate_Bps = set_pacing_rate(sk, mss, max_u32(target, tp->packets_out), srtt_us,
					 fast ? PACING_SS_PERCENT : PACING_CA_PERCENT);

	/* 4. Statistics for the agent's echo and replay's samplers. */
	struct claw_flow_stats *st = flow_stats(&key);
	if (!st)
		return;
	__u32 flags = CC_VARIANT_FLAG;
	int held_by_network = network_limited(tp, mss);
	if (tp->is_cwnd_limited) {
		flags |= CLAW_FLOW_CWND_LIMITED;
		st->cwnd_limited_ns = now_ns;
	}
	if (held_by_network)
		flags |= CLAW_FLOW_NETWORK_LIMITED;
	/* The bottleneck detector's evidence: a window whose flow was held back by the network
	 * (not the application, not the receiver) at CLAW's window from start to end shows
	 * whether the cell carried W_claw. The initial window, a stale report, an RTO, the cap
	 * after a loss the UE flagged as a base-station overflow or, in wireline mode, a
	 * W_cubic below W_claw end the run: a flow held below W_claw uses fewer RBs than N_f
	 * whatever the bottleneck. An unflagged loss does not: it is congestion elsewhere,
	 * which is what the detector looks for (claw/DESIGN.md). */
	int runs_claws_window = (applied == CLAW_APPLIED_CELLULAR || applied == CLAW_APPLIED_SATURATED ||
				 (applied == CLAW_APPLIED_WIRELINE && w_cubic >= w_claw_pkts)) &&
				!(ca->own.cap_pkts && ca->own.last_cause == CLAW_LOSS_OVERFLOW);
	if (held_by_network && runs_claws_window) {
		if (!st->claw_limited_since_ns)
			st->claw_limited_since_ns = now_ns;
	} else {
		st->claw_limited_since_ns = 0;
	}
	if (ca->own.cap_pkts)
		flags |= CLAW_FLOW_CAP_ACTIVE;
	if (shadow_in_slow_start(ca))
		flags |= CLAW_FLOW_SHADOW_SS;
	st->updated_ns = now_ns;
	st->acks += 1;
	if (peer && peer_seq != st->peer_seq) {
		st->report_seen_ns = now_ns;
		st->report_seen_acks = st->acks;
	}
	st->srtt_us = srtt_us;
	st->cwnd_pkts = target;
	st->w_cubic_pkts = w_cubic;
	st->w_claw_pkts = w_claw_pkts;
	st->ssthresh_pkts = tp->snd_ssthresh;
	st->mss_bytes = mss;
	st->applied = applied;
	st->flags = flags;
	st->peer_seq = peer_seq;
	st->pacing_rate_Bps = rate_Bps;
	if (st_boost_to) {
		st->boost_from_pkts = st_boost_from;
		st->boost_to_pkts = st_boost_to;
		st->boosts += 1;
	}
}

SEC(".struct_ops")
struct tcp_congestion_ops CC_OPS = {
	.init = (void *)claw_init,
	.release = (void *)claw_release,
	.ssthresh = (void *)claw_ssthresh,
	.undo_cwnd = (void *)claw_undo_cwnd,
	.set_state = (void *)claw_set_state,
	.cwnd_event = (void *)claw_cwnd_event,
	.pkts_acked = (void *)claw_pkts_acked,
	.cong_control = (void *)claw_cong_control,
	.flags = TCP_CONG_NON_RESTRICTED,
	.name = CC_NAME,
};
