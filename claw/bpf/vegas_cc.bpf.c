// SPDX-License-Identifier: MIT OR GPL-2.0
/*
 * TCP Vegas as a BPF struct_ops congestion control, for kernels built without tcp_vegas
 * (this platform's has reno, cubic and bbr only). The baseline the fidelity rows compare
 * with (docs/fidelity-table.md BB-2, CLAW-5/7/8: delay-based, low RTT, less throughput).
 *
 * The algorithm is the one of Linux's net/ipv4/tcp_vegas.c (Brakmo & Peterson, JSAC 1995, as
 * Linux adapts it), with the kernel module's default parameters alpha = 2, beta = 4,
 * gamma = 1 packets:
 *
 *   - RTT sampling (pkts_acked): every ACK with an RTT sample contributes vrtt = rtt + 1 us
 *     (never 0); baseRTT is the minimum of all of them (the propagation delay estimate),
 *     minRTT the minimum within the current RTT (delayed ACKs filtered out), cntRTT counts
 *     them.
 *   - Once per RTT (the first ACK beyond the snd_nxt remembered at the previous decision),
 *     in cong_avoid, while Vegas is on:
 *       with cntRTT <= 2 (probably only delayed ACKs): Reno's cong_avoid;
 *       else diff = cwnd * (minRTT - baseRTT) / baseRTT, the packets queued in the network,
 *         and target = cwnd * baseRTT / minRTT, the window of the actual rate:
 *           slow start and diff > gamma  -> cwnd = min(cwnd, target + 1), leave slow start
 *                                           (ssthresh = min(ssthresh, cwnd));
 *           slow start                   -> the kernel's slow start;
 *           congestion avoidance: diff > beta -> cwnd - 1 (ssthresh = min(ssthresh, cwnd)),
 *                                 diff < alpha -> cwnd + 1, else unchanged;
 *         then cwnd within [2, snd_cwnd_clamp] and ssthresh = tcp_current_ssthresh();
 *       and minRTT/cntRTT start over for the next RTT.
 *     Between decisions: the kernel's slow start while cwnd < ssthresh, nothing otherwise.
 *   - Vegas decides in the Open state only (set_state; Reno otherwise), and each return to
 *     Open starts a fresh measurement (minRTT, cntRTT, the decision point), so no decision
 *     comes from a window that spans a recovery. When the flow restarts after idle or
 *     starts sending with nothing in flight (cwnd_event CWND_RESTART / TX_START) everything
 *     starts over, baseRTT included, as the kernel's tcp_vegas_init does.
 *   - Losses: Reno's (ssthresh = cwnd / 2, undo to the prior window), and the kernel's own
 *     recovery (PRR) since, like tcp_vegas, this implements cong_avoid, not cong_control.
 *
 * Differences from tcp_vegas.c, none of which changes a decision: diff and target are
 * computed in 64 bits (the module's 32-bit product cwnd * (rtt - baseRTT) could wrap for a
 * window of thousands of packets behind a seconds-long queue); get_info (the INET_DIAG
 * vegas record) is not offered, BPF congestion controls cannot implement it.
 *
 * The name compiled in is "vegas"; the loader registers each run's copy as
 * "vegas_<run id>[_<instance>]" (claw/server/loader.py), congestion-control names being
 * machine-wide. No maps: nothing to pin but the struct_ops link.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Kernel constants that are macros, hence absent from vmlinux.h. */
#define TCP_CONG_NON_RESTRICTED 0x1 /* include/net/tcp.h: may be a namespace's default */

/* tcp_vegas.c's module parameters, at their defaults (packets). */
#define VEGAS_ALPHA 2U /* fewer packets queued than this: grow */
#define VEGAS_BETA 4U  /* more than this: shrink */
#define VEGAS_GAMMA 1U /* more than this in slow start: leave it */
/* A decision needs more RTT samples than this within the RTT (two or fewer are most
 * likely delayed ACKs only). */
#define VEGAS_MIN_SAMPLES 2U
#define RTT_NONE 0x7fffffffU
#define MIN_CWND 2U

/* The kernel's Reno pieces, exported to BPF congestion controls as kfuncs. */
extern __u32 tcp_reno_ssthresh(struct sock *sk) __ksym;
extern __u32 tcp_reno_undo_cwnd(struct sock *sk) __ksym;
extern void tcp_reno_cong_avoid(struct sock *sk, __u32 ack, __u32 acked) __ksym;
extern __u32 tcp_slow_start(struct tcp_sock *tp, __u32 acked) __ksym;

/* Our state, in the socket's CA private area. */
struct vegas_ca {
	__u32 base_rtt_us;  /* min of every RTT sample (+1 us): the propagation delay */
	__u32 min_rtt_us;   /* min of this RTT's samples */
	__u32 decide_after; /* snd_nxt at the last decision: the next comes once it is acked */
	__u16 samples;      /* RTT samples within this RTT */
	__u8 enabled;       /* Vegas decides (Open state); else plain Reno */
};

_Static_assert(sizeof(struct vegas_ca) <= sizeof(((struct inet_connection_sock *)0)->icsk_ca_priv),
	       "Vegas' state must fit the CA private area");

static __always_inline struct tcp_sock *tcp_sk(const struct sock *sk)
{
	return (struct tcp_sock *)sk;
}

static __always_inline struct inet_connection_sock *inet_csk(const struct sock *sk)
{
	return (struct inet_connection_sock *)sk;
}

static __always_inline struct vegas_ca *vegas_ca(const struct sock *sk)
{
	return (struct vegas_ca *)inet_csk(sk)->icsk_ca_priv;
}

/* Sequence number a comes after b (modulo 2^32). */
static __always_inline int seq_after(__u32 a, __u32 b)
{
	return (__s32)(a - b) > 0;
}

static __always_inline int in_slow_start(const struct tcp_sock *tp)
{
	return tp->snd_cwnd < tp->snd_ssthresh;
}

/* Start a fresh measurement: the next decision comes one window from now. */
static __always_inline void vegas_restart(struct sock *sk)
{
	struct vegas_ca *ca = vegas_ca(sk);

	ca->enabled = 1;
	ca->decide_after = tcp_sk(sk)->snd_nxt;
	ca->samples = 0;
	ca->min_rtt_us = RTT_NONE;
}

/* The kernel's tcp_current_ssthresh: during a window reduction (CWR, Recovery) the
 * threshold itself; otherwise at least 3/4 of the window. */
static __always_inline __u32 current_ssthresh(struct sock *sk)
{
	const struct tcp_sock *tp = tcp_sk(sk);
	__u8 state = inet_csk(sk)->icsk_ca_state;
	__u32 three_quarters = (tp->snd_cwnd >> 1) + (tp->snd_cwnd >> 2);

	if (state == TCP_CA_CWR || state == TCP_CA_Recovery)
		return tp->snd_ssthresh;
	return tp->snd_ssthresh > three_quarters ? tp->snd_ssthresh : three_quarters;
}

SEC("struct_ops/vegas_init")
void BPF_PROG(vegas_init, struct sock *sk)
{
	vegas_ca(sk)->base_rtt_us = RTT_NONE;
	vegas_restart(sk);
}

SEC("struct_ops/vegas_pkts_acked")
void BPF_PROG(vegas_pkts_acked, struct sock *sk, const struct ack_sample *sample)
{
	struct vegas_ca *ca = vegas_ca(sk);
	__s32 rtt_us = sample->rtt_us;
	__u32 vrtt;

	if (rtt_us < 0)
		return; /* no RTT sample on this ACK */
	vrtt = (__u32)rtt_us + 1;
	if (vrtt < ca->base_rtt_us)
		ca->base_rtt_us = vrtt;
	if (vrtt < ca->min_rtt_us)
		ca->min_rtt_us = vrtt;
	if (ca->samples < 0xffff)
		ca->samples++;
}

SEC("struct_ops/vegas_set_state")
void BPF_PROG(vegas_set_state, struct sock *sk, __u8 new_state)
{
	if (new_state == TCP_CA_Open)
		vegas_restart(sk);
	else
		vegas_ca(sk)->enabled = 0;
}

SEC("struct_ops/vegas_cwnd_event")
void BPF_PROG(vegas_cwnd_event, struct sock *sk, enum tcp_ca_event event)
{
	/* After idle, or when sending starts: no decision until a flight of fresh samples. */
	if (event == CA_EVENT_CWND_RESTART || event == CA_EVENT_TX_START) {
		vegas_ca(sk)->base_rtt_us = RTT_NONE;
		vegas_restart(sk);
	}
}

SEC("struct_ops/vegas_cong_avoid")
void BPF_PROG(vegas_cong_avoid, struct sock *sk, __u32 ack, __u32 acked)
{
	struct tcp_sock *tp = tcp_sk(sk);
	struct vegas_ca *ca = vegas_ca(sk);

	if (!ca->enabled) {
		tcp_reno_cong_avoid(sk, ack, acked);
		return;
	}
	if (!seq_after(ack, ca->decide_after)) {
		/* Within the RTT: only slow start moves the window. */
		if (in_slow_start(tp))
			tcp_slow_start(tp, acked);
		return;
	}

	/* An RTT has passed: the once-per-RTT decision. */
	ca->decide_after = tp->snd_nxt;
	if (ca->samples <= VEGAS_MIN_SAMPLES) {
		tcp_reno_cong_avoid(sk, ack, acked);
	} else {
		__u32 rtt = ca->min_rtt_us;
		__u32 base = ca->base_rtt_us;
		__u32 cwnd = tp->snd_cwnd;
		__u64 target, diff;

		if (!base)
			base = 1; /* cannot happen (samples are >= 1 us); keeps the verifier calm */
		if (rtt < base)
			rtt = base;
		/* The window the actual rate needs at the propagation delay, and what is queued. */
		target = (__u64)cwnd * base / rtt;
		diff = (__u64)cwnd * (rtt - base) / base;

		if (in_slow_start(tp)) {
			if (diff > VEGAS_GAMMA) {
				/* Too fast: down to the actual rate (+1 for the truncation), and
				 * congestion avoidance from here. */
				if (target + 1 < cwnd)
					tp->snd_cwnd = (__u32)target + 1;
				if (tp->snd_cwnd < tp->snd_ssthresh)
					tp->snd_ssthresh = tp->snd_cwnd;
			} else {
				tcp_slow_start(tp, acked);
			}
		} else if (diff > VEGAS_BETA) {
			tp->snd_cwnd = cwnd - 1;
			if (tp->snd_cwnd < tp->snd_ssthresh)
				tp->snd_ssthresh = tp->snd_cwnd;
		} else if (diff < VEGAS_ALPHA) {
			tp->snd_cwnd = cwnd + 1;
		}
		/* else: just as many packets queued as wanted */

		if (tp->snd_cwnd < MIN_CWND)
			tp->snd_cwnd = MIN_CWND;
		else if (tp->snd_cwnd > tp->snd_cwnd_clamp)
			tp->snd_cwnd = tp->snd_cwnd_clamp;
		tp->snd_ssthresh = current_ssthresh(sk);
	}
	ca->samples = 0;
	ca->min_rtt_us = RTT_NONE;
}

SEC("struct_ops/vegas_ssthresh")
__u32 BPF_PROG(vegas_ssthresh, struct sock *sk)
{
	return tcp_reno_ssthresh(sk);
}

SEC("struct_ops/vegas_undo_cwnd")
__u32 BPF_PROG(vegas_undo_cwnd, struct sock *sk)
{
	return tcp_reno_undo_cwnd(sk);
}

SEC(".struct_ops")
struct tcp_congestion_ops vegas = {
	.init = (void *)vegas_init,
	.ssthresh = (void *)vegas_ssthresh,
	.undo_cwnd = (void *)vegas_undo_cwnd,
	.cong_avoid = (void *)vegas_cong_avoid,
	.pkts_acked = (void *)vegas_pkts_acked,
	.set_state = (void *)vegas_set_state,
	.cwnd_event = (void *)vegas_cwnd_event,
	.flags = TCP_CONG_NON_RESTRICTED,
	.name = "vegas",
};
