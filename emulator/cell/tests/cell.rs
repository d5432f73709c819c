//! Behaviour of the whole cell, from the outside.

mod common;

use cell::conditions::{Conditions, MAHIMAHI_OPPORTUNITY_BYTES};
use cell::{
    Cell, CellConfig, ConstantRate, DropCause, Enqueued, MahimahiConditions, PolicyChoice, RrcState, SubframeOutput,
    UeConfig, UeId, UeSetup, UplinkAllowance,
};
use common::*;

fn config(scheduler: &str) -> CellConfig {
    lossless(CellConfig { scheduler: PolicyChoice::named(scheduler), ..CellConfig::default() })
}

fn one_ue(config: CellConfig, conditions: impl Conditions + Send + 'static) -> Cell<Handle> {
    Cell::new(config, vec![UeSetup::new(UeConfig::default(), conditions)], 1).expect("valid cell")
}

#[test]
fn open_loop_background_first_delivers_exactly_the_tbs() {
    // Background-first over a constant trace: the UE always gets 50 − 20 = 30 RBs.
    let mut cell = one_ue(config("background-first"), conditions(constant_columns(1000, 20, 20)));
    let tbs_bytes = u64::from(lte::tbs::tbs_bits(20, 30, 1).unwrap() / 8);
    // 1000-byte packets do not divide the TBS, so packets straddle transport blocks.
    assert_ne!(tbs_bytes % 1000, 0);
    let mut saturator = Saturator::new(1, 1000, 200_000);
    let (mut carried_total, mut delivered_total, mut window_carried, mut window_tbs) = (0u64, 0u64, 0u64, 0u64);
    let mut t = 0;
    run(&mut cell, &mut saturator, 0, 1000, |out| {
        let ue = &out.truth.ues[0];
        assert_eq!(ue.alloc_rbs, 30);
        window_carried += ue.carried_bytes;
        window_tbs += u64::from(ue.tbs_bits / 8);
        carried_total += ue.carried_bytes;
        delivered_total += ue.delivered_bytes;
        assert_eq!(u64::from(ue.delivered_packets) * 1000, ue.delivered_bytes);
        assert_eq!(out.delivered.len() as u32, ue.delivered_packets);
        // Every whole packet carried so far is delivered; the partial one waits.
        assert_eq!(delivered_total, carried_total / 1000 * 1000);
        t += 1;
        if t % 100 == 0 {
            assert_eq!(window_carried, 100 * tbs_bytes);
            assert_eq!(window_carried, window_tbs);
            window_carried = 0;
            window_tbs = 0;
        }
    });
}

#[test]
fn background_first_saturated_gets_what_the_others_leave() {
    let mut columns = constant_columns(500, 15, 0);
    columns.other_rbs = (0..500).map(|t| ((t * 7) % 51) as u8).collect();
    let expected: Vec<u8> = columns.other_rbs.iter().map(|b| 50 - b).collect();
    let mut cell = one_ue(config("background-first"), conditions(columns));
    let mut saturator = Saturator::new(1, 1500, 500_000);
    let mut t = 0;
    run(&mut cell, &mut saturator, 0, 500, |out| {
        assert_eq!(out.truth.ues[0].alloc_rbs, expected[t], "t = {t}");
        assert_eq!(out.truth.other_alloc_rbs, 50 - expected[t]);
        assert_eq!(out.diag[0].pdsch.num_rbs, expected[t]);
        t += 1;
    });
}

#[test]
fn proportional_fair_saturated_against_one_other_user_gets_half() {
    let mut cell = one_ue(config("proportional-fair"), conditions(constant_columns(100, 20, 50)));
    let mut saturator = Saturator::new(1, 1500, 500_000);
    run(&mut cell, &mut saturator, 0, 100, |out| {
        assert_eq!(out.truth.ues[0].alloc_rbs, 25);
        assert_eq!(out.truth.other_alloc_rbs, 25);
        assert_eq!(out.truth.other_users, 1);
        assert_eq!(out.truth.total_alloc_rbs, 50);
    });
}

#[test]
fn proportional_fair_counts_the_traces_other_users() {
    let mut columns = constant_columns(100, 20, 50);
    columns.other_users = Some(vec![4; 100]);
    let mut cell = one_ue(config("proportional-fair"), conditions(columns));
    let mut saturator = Saturator::new(1, 1500, 500_000);
    run(&mut cell, &mut saturator, 0, 100, |out| assert_eq!(out.truth.ues[0].alloc_rbs, 10));
}

#[test]
fn round_robin_is_fair_among_equal_backlogged_ues() {
    let n = 45;
    let ues = (0..n).map(|_| UeSetup::new(UeConfig::default(), conditions(constant_columns(100, 20, 0)))).collect();
    let mut cell = Cell::new(config("round-robin"), ues, 1).unwrap();
    let mut saturator = Saturator::new(n, 1500, 100_000);
    let mut bytes = vec![0f64; n];
    run(&mut cell, &mut saturator, 0, 4500, |out| {
        for ue in &out.truth.ues {
            bytes[ue.ue.index()] += ue.carried_bytes as f64;
        }
    });
    let fairness = jain(&bytes);
    assert!(fairness >= 0.99, "Jain {fairness}");
    assert!(bytes.iter().all(|&b| b > 0.0));
}

#[test]
fn demand_is_the_fewest_rbs_carrying_the_queue() {
    let mut cell = one_ue(config("proportional-fair"), conditions(constant_columns(100, 12, 0)));
    let mut out = SubframeOutput::new();
    for (t, bytes) in [700u32, 1, 1200, 123].into_iter().enumerate() {
        assert_eq!(cell.enqueue(UeId(0), bytes, (0, t as u64)), Enqueued::Queued);
        cell.run_subframe(t as u64, &mut out);
        let ue = out.truth.ues[0];
        let bits = bytes * 8;
        assert!(lte::tbs::tbs_bits(12, ue.demand_rbs, 1).unwrap() >= bits);
        assert!((1..ue.demand_rbs).all(|n| lte::tbs::tbs_bits(12, n, 1).unwrap() < bits));
        // Uncontended: the demand is granted, and the packet delivered at once.
        assert_eq!(ue.alloc_rbs, ue.demand_rbs);
        assert_eq!(out.delivered, [(UeId(0), (0, t as u64))]);
    }
}

#[test]
fn a_packet_is_delivered_in_the_subframe_of_its_last_byte() {
    // 6 RBs at MCS 9 carry a few hundred bytes per subframe; packets of 1000 bytes take
    // several subframes each.
    let mut cell = one_ue(config("background-first"), conditions(constant_columns(100, 9, 44)));
    let tbs_bytes = u64::from(lte::tbs::tbs_bits(9, 6, 1).unwrap() / 8);
    for seq in 0..10 {
        cell.enqueue(UeId(0), 1000, (0, seq));
    }
    let mut out = SubframeOutput::new();
    let mut delivered = Vec::new();
    for t in 0..200u64 {
        cell.run_subframe(t, &mut out);
        delivered.extend(out.delivered.iter().map(|&(_, (_, seq))| (seq, t)));
    }
    assert_eq!(delivered.len(), 10);
    for &(seq, t) in &delivered {
        // Packet `seq` ends at byte 1000·(seq+1), carried in subframe ⌈end / TBS⌉ − 1.
        let last_byte_subframe = (1000 * (seq + 1)).div_ceil(tbs_bytes) - 1;
        assert_eq!(t, last_byte_subframe, "packet {seq}");
    }
}

#[test]
fn harq_failure_is_retransmitted_8_ms_later_on_reserved_rbs() {
    let mut columns = constant_columns(100, 20, 10);
    let mut fail = vec![0u8; 100];
    fail[5] = 1;
    columns.harq_fail = Some(fail);
    // Proportional fair, other users wanting 10: uncontended for a small queue.
    let mut cell = one_ue(config("proportional-fair"), conditions(columns));
    let mut out = SubframeOutput::new();
    let mut at_5 = None;
    for t in 0..30u64 {
        // A 1000-byte packet every subframe: the UE has new data in every subframe.
        cell.enqueue(UeId(0), 1000, (0, t));
        cell.run_subframe(t, &mut out);
        let ue = out.truth.ues[0];
        let tb = out.diag[0].pdsch.transport_block.unwrap();
        match t {
            5 => {
                assert_eq!(ue.crc_pass, Some(false));
                assert!(out.delivered.is_empty());
                at_5 = Some((ue.alloc_rbs, ue.tbs_bits, tb));
            }
            13 => {
                let (rbs, tbs_bits, first) = at_5.unwrap();
                assert!(ue.harq_retx);
                assert_eq!(ue.demand_rbs, 0, "no new data beside a retransmission");
                assert_eq!((ue.alloc_rbs, ue.tbs_bits), (rbs, tbs_bits));
                assert_eq!((tb.harq_id, tb.ndi, tb.mcs, tb.rv), (first.harq_id, first.ndi, first.mcs, 2));
                assert_eq!(ue.crc_pass, Some(true));
                // Everything held back since subframe 5 comes out now, in order.
                assert!(out.delivered.len() > 1);
                assert!(out.delivered.windows(2).all(|w| w[0].1 .1 < w[1].1 .1));
            }
            6..=12 => {
                assert!(!ue.harq_retx);
                // In-order delivery: nothing passes the packet stuck in subframe 5.
                assert!(out.delivered.is_empty(), "t = {t}");
            }
            _ => assert!(!ue.harq_retx),
        }
    }
}

#[test]
fn rlc_loss_is_counted_alike_in_diag_and_truth() {
    let mut config = config("proportional-fair");
    config.harq.bler = 0.3;
    config.harq.retx_bler = 0.9;
    config.harq.max_tx = 2;
    config.rlc.max_retx = 1;
    config.rlc.retx_delay_ms = 20;
    let mut cell = one_ue(config, conditions(constant_columns(100, 15, 20)));
    let mut saturator = Saturator::new(1, 1500, 100_000);
    let (mut truth_drops, mut lost_handles) = (0u64, 0u64);
    let mut last = None;
    run(&mut cell, &mut saturator, 0, 5000, |out| {
        truth_drops += u64::from(out.truth.ues[0].rlc_loss_drops);
        lost_handles += out.lost.len() as u64;
        assert!(out.lost.iter().all(|&(_, _, cause)| cause == DropCause::RlcLoss));
        last = Some(out.diag[0]);
    });
    let diag = last.unwrap();
    assert!(truth_drops > 10, "the settings must lose packets: {truth_drops}");
    assert_eq!(diag.rlc.num_dropped_pdu, truth_drops);
    assert_eq!(lost_handles, truth_drops);
    assert!(diag.rlc.num_retx_pdu > 0);
    assert!(diag.rlc.num_complete_nack > 0);
}

#[test]
fn overflow_is_counted_alike_in_diag_and_truth() {
    let ue = UeConfig { queue_limit_bytes: 10_000, ..UeConfig::default() };
    let mut cell: Cell<Handle> =
        Cell::new(config("proportional-fair"), vec![UeSetup::new(ue, conditions(constant_columns(10, 5, 0)))], 1)
            .unwrap();
    let mut dropped = 0;
    for seq in 0..20 {
        match cell.enqueue(UeId(0), 1500, (0, seq)) {
            Enqueued::Dropped(handle, DropCause::Overflow) => {
                assert_eq!(handle, (0, seq));
                dropped += 1;
            }
            Enqueued::Queued => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    // 6 × 1500 fit in 10 000 bytes.
    assert_eq!(dropped, 14);
    let mut out = SubframeOutput::new();
    cell.run_subframe(0, &mut out);
    let truth = out.truth.ues[0];
    assert_eq!(truth.overflow_drops, 14);
    assert_eq!(truth.overflow_drop_bytes, 14 * 1500);
    assert_eq!(out.diag[0].pdcp.offload_q_full_count, 14);
    assert_eq!(out.diag[0].rlc.pdcp_q_full_count, 14);
    cell.run_subframe(1, &mut out);
    assert_eq!(out.truth.ues[0].overflow_drops, 0, "reported once");
    assert_eq!(out.diag[0].pdcp.offload_q_full_count, 14, "cumulative");
    assert_eq!(cell.enqueue(UeId(7), 100, (7, 0)), Enqueued::Rejected((7, 0)));
    assert_eq!(cell.enqueue(UeId(0), 0, (0, 99)), Enqueued::Rejected((0, 99)));
}

#[test]
fn rsrq_without_noise_is_eq6_of_the_true_allocation() {
    for (quant_db, antennas) in [(0.0, 2u8), (0.0, 1), (0.0625, 2)] {
        let mut config = config("proportional-fair");
        config.rsrq.quant_db = quant_db;
        let mut columns = constant_columns(300, 18, 0);
        columns.n_antennas = antennas;
        columns.other_rbs = (0..300).map(|t| ((t * 13) % 51) as u8).collect();
        let mut cell = one_ue(config, conditions(columns));
        let mut out = SubframeOutput::new();
        for t in 0..300u64 {
            // Bursty own traffic, so that A_k covers many values.
            if t % 7 == 0 {
                cell.enqueue(UeId(0), 1500 * (t as u32 % 5 + 1), (0, t));
            }
            cell.run_subframe(t, &mut out);
            let a = out.truth.total_alloc_rbs;
            assert_eq!(a, out.truth.other_alloc_rbs + out.truth.ues[0].alloc_rbs);
            let eq6 = 10.0
                * (1.0
                    / (f64::from(a) * (12.0 - lte::rsrq::n_ref(antennas).unwrap()) * f64::from(antennas) / 50.0
                        + lte::rsrq::n_ref(antennas).unwrap()))
                .log10();
            assert!((out.truth.rsrq_db - eq6).abs() < 1e-12, "A = {a}: {} vs {eq6}", out.truth.rsrq_db);
            let reported = out.diag[0].serv_cell.rsrq_db;
            if quant_db == 0.0 {
                assert_eq!(reported, out.truth.rsrq_db);
            } else {
                assert_eq!(reported, (out.truth.rsrq_db / quant_db).round() * quant_db);
            }
        }
    }
}

/// Everything a run produces, serialised, for comparing runs.
fn transcript(seed: u64) -> Vec<String> {
    let config = CellConfig {
        rrc: PolicyChoice::parse("lte,promotion_p25_ms=50,promotion_ms=50,promotion_p75_ms=50").unwrap(),
        stall: PolicyChoice::parse("poisson,mean_interval_s=0.5,min_ms=20,max_ms=80").unwrap(),
        ..CellConfig::default()
    };
    let mut columns = constant_columns(1000, 0, 0);
    columns.mcs = (0..1000).map(|t| (t % 29) as u8).collect();
    columns.other_rbs = (0..1000).map(|t| ((t * 11) % 51) as u8).collect();
    let ues =
        (0..3).map(|i| UeSetup::new(UeConfig::default(), conditions(columns.clone()).starting_at(i * 100))).collect();
    let mut cell: Cell<Handle> = Cell::new(config, ues, seed).unwrap();
    let mut saturator = Saturator::new(3, 1400, 60_000);
    let mut lines = Vec::new();
    run(&mut cell, &mut saturator, 0, 3000, |out| {
        lines.push(serde_json::to_string(&out.truth).unwrap());
        lines.push(serde_json::to_string(&out.diag).unwrap());
        lines.push(format!("{:?} {:?}", out.delivered, out.lost));
    });
    lines
}

#[test]
fn same_seed_same_outputs() {
    let a = transcript(42);
    assert_eq!(a, transcript(42));
    assert_ne!(a, transcript(43));
}

#[test]
fn mahimahi_delivers_exactly_the_opportunity_bytes() {
    let timestamps: Vec<u64> = vec![1, 1, 2, 5, 5, 5, 8, 9, 9, 10];
    let mahimahi = MahimahiConditions::from_timestamps_ms(&timestamps).unwrap();
    let mut cell = one_ue(CellConfig::default(), mahimahi.clone());
    let mut saturator = Saturator::new(1, 1000, 100_000);
    let mut t = 0u64;
    let mut total = 0u64;
    run(&mut cell, &mut saturator, 0, 1000, |out| {
        let expected = match mahimahi.at(t).unwrap().capacity {
            cell::Capacity::OpenLoop { bytes } => u64::from(bytes),
            cell::Capacity::Channel { .. } => unreachable!(),
        };
        assert_eq!(out.truth.ues[0].carried_bytes, expected, "t = {t}");
        assert_eq!(out.truth.ues[0].alloc_rbs, 0);
        total += expected;
        t += 1;
    });
    // 100 periods of 10 opportunities, less the one at t = 1000 (the next run's).
    assert_eq!(total, (100 * 10 - 1) * u64::from(MAHIMAHI_OPPORTUNITY_BYTES));
}

#[test]
fn open_loop_reports_a_transport_block_only_when_it_carried_data() {
    let mut cell = one_ue(CellConfig::default(), ConstantRate { rate_bps: 24_000_000 });
    let mut out = SubframeOutput::new();
    cell.run_subframe(0, &mut out);
    assert_eq!(out.diag[0].pdsch.transport_block, None, "an unused budget is no transmission");
    assert_eq!(out.diag[0].mac.sample, None);
    assert_eq!((out.truth.ues[0].tbs_bits, out.truth.ues[0].crc_pass), (0, None));
    assert_eq!(out.diag[0].serv_cell.channel_mcs, None, "open loop has no channel MCS");
    assert_eq!(cell.enqueue(UeId(0), 100, (0, 0)), Enqueued::Queued);
    cell.run_subframe(1, &mut out);
    let tb = out.diag[0].pdsch.transport_block.expect("a block carried the packet");
    assert_eq!(tb.tb_size_bytes, 3000, "the subframe's byte budget");
    assert_eq!(out.diag[0].mac.sample.map(|s| s.padding_bytes), Some(2900));
    assert_eq!(out.truth.ues[0].tbs_bits, 24_000);
}

#[test]
fn a_cell_is_idle_when_nothing_is_in_flight() {
    let mut cell = one_ue(CellConfig::default(), ConstantRate { rate_bps: 24_000_000 });
    let mut out = SubframeOutput::new();
    assert!(cell.is_idle());
    assert_eq!(cell.enqueue(UeId(0), 5000, (0, 0)), Enqueued::Queued);
    assert!(!cell.is_idle());
    cell.run_subframe(0, &mut out);
    assert!(!cell.is_idle(), "2000 bytes still queued");
    cell.run_subframe(1, &mut out);
    assert_eq!(out.delivered.len(), 1);
    assert!(cell.is_idle());
    cell.uplink_activity(UeId(0), 100);
    assert!(!cell.is_idle(), "uplink activity waits for the next subframe");
}

#[test]
fn constant_rate_link() {
    let mut cell = one_ue(CellConfig::default(), ConstantRate { rate_bps: 24_000_000 });
    let mut saturator = Saturator::new(1, 1500, 100_000);
    let mut carried = 0;
    run(&mut cell, &mut saturator, 0, 1000, |out| carried += out.truth.ues[0].carried_bytes);
    assert_eq!(carried, 3_000_000);
    assert_eq!(cell.n_rb(), 50);
    assert_eq!(cell.end_ms(), None);
}

#[test]
fn rrc_promotion_holds_the_first_packet() {
    let mut config = config("proportional-fair");
    // A fixed 435 ms promotion, paged at once.
    config.rrc =
        PolicyChoice::parse("lte,tail_ms=1000,promotion_p25_ms=435,promotion_p75_ms=435,paging_cycle_ms=0").unwrap();
    let mut cell = one_ue(config, conditions(constant_columns(100, 20, 0)));
    let mut out = SubframeOutput::new();
    // A UE starts connected; quiet for the 1 s tail, it is idle.
    cell.run_subframe(0, &mut out);
    assert_eq!(cell.rrc_state(UeId(0)), Some(RrcState::Connected));
    cell.run_subframe(1000, &mut out);
    assert_eq!(cell.rrc_state(UeId(0)), Some(RrcState::Idle));
    cell.enqueue(UeId(0), 1000, (0, 0));
    let mut delivered_at = None;
    for t in 1001..3000 {
        cell.run_subframe(t, &mut out);
        if !out.delivered.is_empty() {
            delivered_at = Some(t);
        }
        if t == 2000 {
            assert_eq!(cell.rrc_state(UeId(0)), Some(RrcState::Connected));
        }
    }
    // Promotion from subframe 1001 takes 435 ms; then it goes idle after the 1 s tail.
    assert_eq!(delivered_at, Some(1436));
    assert_eq!(cell.rrc_state(UeId(0)), Some(RrcState::Idle));
    assert!(cell.uplink_activity(UeId(0), 100));
    cell.run_subframe(3000, &mut out);
    assert_eq!(cell.rrc_state(UeId(0)), Some(RrcState::Promoting));
}

#[test]
fn umts_fach_carries_a_small_packet_slowly_and_promotes_for_a_flight() {
    let mut config = config("proportional-fair");
    config.rrc = PolicyChoice::parse("umts").unwrap();
    let mut cell = one_ue(config, conditions(constant_columns(100, 20, 0)));
    let mut out = SubframeOutput::new();
    for t in 0..=5_001 {
        cell.run_subframe(t, &mut out);
    }
    // FACH from 5 000 ms (the DCH tail); its budget accrues from then.
    assert_eq!(cell.rrc_state(UeId(0)), Some(RrcState::Fach));
    assert_eq!(cell.uplink_allowance(UeId(0)), Some(UplinkAllowance::CommonChannel { bits: 32 }));
    // 100 bytes at 32 kbit/s (4 bytes a subframe): 25 subframes, none of them on the PDSCH.
    cell.enqueue(UeId(0), 100, (0, 0));
    let mut delivered_at = None;
    for t in 5_002..5_100 {
        cell.run_subframe(t, &mut out);
        assert_eq!(cell.rrc_state(UeId(0)), Some(RrcState::Fach), "at {t}");
        assert!(out.diag[0].pdsch.transport_block.is_none(), "at {t}");
        if !out.delivered.is_empty() {
            delivered_at.get_or_insert(t);
        }
    }
    assert_eq!(delivered_at, Some(5_026));
    // A 1 500-byte packet is above the 512-byte threshold: FACH → DCH holds it 1.5 s.
    cell.enqueue(UeId(0), 1_500, (0, 1));
    let mut delivered_at = None;
    for t in 5_100..7_000 {
        cell.run_subframe(t, &mut out);
        if t < 6_600 {
            assert_eq!(cell.rrc_state(UeId(0)), Some(RrcState::Promoting), "at {t}");
            assert_eq!(cell.uplink_allowance(UeId(0)), Some(UplinkAllowance::Held));
        }
        if !out.delivered.is_empty() {
            delivered_at.get_or_insert(t);
        }
    }
    assert_eq!(delivered_at, Some(6_600));
    assert_eq!(cell.uplink_allowance(UeId(0)), Some(UplinkAllowance::Scheduled));
}

#[test]
fn config_errors_name_the_field() {
    let from_json = |json: &str| -> CellConfig { serde_json::from_str(json).expect("parses") };
    let cases = [
        (r#"{"harq": {"max_tx": 9}}"#, "harq.max_tx"),
        (r#"{"harq": {"bler": 1.5}}"#, "harq.bler"),
        (r#"{"harq": {"rtt_ms": 0}}"#, "harq.rtt_ms"),
        (r#"{"rlc": {"max_retx": 100}}"#, "rlc.max_retx"),
        (r#"{"rlc": {"retx_delay_ms": 5000}}"#, "rlc.retx_delay_ms"),
        (r#"{"rsrq": {"hold_ms": 0}}"#, "rsrq.hold_ms"),
        (r#"{"rsrq": {"noise_db": -1}}"#, "rsrq.noise_db"),
        (r#"{"rrc": {"tail_ms": 0}}"#, "rrc.tail_ms"),
        (r#"{"n_rb": 40}"#, "n_rb"),
        (r#"{"n_antennas": 4}"#, "n_antennas"),
        (r#"{"default_other_users": 0}"#, "default_other_users"),
    ];
    for (json, field) in cases {
        let error = from_json(json).validate().unwrap_err();
        assert_eq!(error.field, field, "{json}");
        assert!(error.to_string().contains(field));
    }
    // Unknown keys are refused, naming the key.
    let typo = serde_json::from_str::<CellConfig>(r#"{"harq": {"max_txs": 3}}"#).unwrap_err();
    assert!(typo.to_string().contains("max_txs"));
    let parsed = from_json(r#"{"scheduler": "round-robin", "harq": {"max_tx": 2}}"#);
    assert_eq!((parsed.scheduler.kind.as_str(), parsed.harq.max_tx, parsed.harq.rtt_ms), ("round-robin", 2, 8));
    // A policy as a table with its parameters; an unknown policy or parameter names its key.
    let parsed =
        from_json(r#"{"scheduler": {"kind": "background-first"}, "loss": {"kind": "fixed", "probability": 0.5}}"#);
    assert_eq!(parsed.scheduler, PolicyChoice::named("background-first"));
    assert_eq!(parsed.loss, PolicyChoice::parse("fixed,probability=0.5").unwrap());
    for (json, field) in [
        (r#"{"scheduler": "fifo"}"#, "scheduler.kind"),
        (r#"{"loss": {"kind": "fixed", "probability": 3}}"#, "loss.probability"),
        (r#"{"loss": {"kind": "correlated", "bler": 0.1}}"#, "loss.bler"),
    ] {
        assert_eq!(from_json(json).validate().unwrap_err().field, field, "{json}");
    }
    let bad_queue = UeConfig { queue: PolicyChoice::named("red"), ..UeConfig::default() };
    let ue_setup = UeSetup::new(bad_queue, conditions(constant_columns(10, 5, 0)));
    let error = Cell::<Handle>::new(CellConfig::default(), vec![ue_setup], 1).err().unwrap();
    assert_eq!(error.field, "ues[0].queue.kind");

    // Through Cell::new: UE fields, the UE list, and traces that disagree with the cell.
    let ue = |config: UeConfig| UeSetup::new(config, conditions(constant_columns(10, 5, 0)));
    let bad_ue = UeConfig { queue_limit_bytes: 0, ..UeConfig::default() };
    let error = Cell::<Handle>::new(CellConfig::default(), vec![ue(UeConfig::default()), ue(bad_ue)], 1).err().unwrap();
    assert_eq!(error.field, "ues[1].queue_limit_bytes");
    let error = Cell::<Handle>::new(CellConfig::default(), vec![], 1).err().unwrap();
    assert_eq!(error.field, "ues");
    let mut other_cell = constant_columns(10, 5, 0);
    other_cell.n_rb = 100;
    let mismatched = vec![ue(UeConfig::default()), UeSetup::new(UeConfig::default(), conditions(other_cell))];
    let error = Cell::<Handle>::new(CellConfig::default(), mismatched, 1).err().unwrap();
    assert_eq!(error.field, "ues[1].conditions");
    let error =
        Cell::<Handle>::new(CellConfig { n_rb: Some(25), ..CellConfig::default() }, vec![ue(UeConfig::default())], 1)
            .err()
            .unwrap();
    assert_eq!(error.field, "ues[0].conditions");
    let bad_rsrp: UeConfig = serde_json::from_str(r#"{"rsrp_dbm": -20}"#).unwrap();
    assert_eq!(bad_rsrp.validate().unwrap_err().field, "rsrp_dbm");
}

#[test]
fn background_trace_drives_the_other_users() {
    // UE 0's own trace says the cell is empty; the background says 40 RBs are wanted.
    let background = conditions(constant_columns(100, 0, 40));
    let ues = vec![UeSetup::new(UeConfig::default(), conditions(constant_columns(100, 20, 0)))];
    let mut cell: Cell<Handle> = Cell::with_background(config("background-first"), background, ues, 1).unwrap();
    let mut saturator = Saturator::new(1, 1500, 100_000);
    run(&mut cell, &mut saturator, 0, 10, |out| {
        assert_eq!(out.truth.other_demand_rbs, 40);
        assert_eq!(out.truth.ues[0].alloc_rbs, 10);
    });
}

#[test]
fn diag_json_uses_mobileinsight_names() {
    let mut cell = one_ue(config("proportional-fair"), conditions(constant_columns(100, 20, 10)));
    let mut out = SubframeOutput::new();
    cell.enqueue(UeId(0), 1000, (0, 0));
    cell.run_subframe(123, &mut out);
    let record = serde_json::to_value(out.diag[0]).unwrap();
    let pdsch = &record["LTE_PHY_PDSCH_Stat_Indication"];
    assert_eq!(pdsch["type_id"], "LTE_PHY_PDSCH_Stat_Indication");
    let r = &pdsch["Records"][0];
    assert_eq!((r["Frame Num"].as_u64(), r["Subframe Num"].as_u64()), (Some(12), Some(3)));
    assert_eq!(r["Serving Cell Index"], "PCell");
    assert_eq!(r["Num Layers"], 1);
    let tb = &r["Transport Blocks"][0];
    let tbs_bytes = u64::from(lte::tbs::tbs_bits(20, r["Num RBs"].as_u64().unwrap() as u8, 1).unwrap() / 8);
    assert_eq!(tb["TB Size"].as_u64(), Some(tbs_bytes));
    assert_eq!(
        (&tb["CRC Result"], &tb["RNTI Type"], &tb["Modulation Type"]),
        (&"Pass".into(), &"C-RNTI".into(), &"64QAM".into())
    );
    for key in ["HARQ ID", "RV", "NDI", "TB Index", "MCS", "Num RBs"] {
        assert!(tb[key].is_u64(), "{key}");
    }
    assert_eq!(record["LTE_PHY_Serv_Cell_Measurement"]["channel_mcs"], 20, "the extra field carries the channel MCS");
    let meas = &record["LTE_PHY_Serv_Cell_Measurement"]["Subpackets"][0];
    for key in ["Current SFN", "Current Subframe Number", "RSRP", "RSRQ", "RSSI", "FTL SNR Rx[0]"] {
        assert!(meas[key].is_number(), "{key}");
    }
    let mac = &record["LTE_MAC_DL_Transport_Block"]["Samples"][0];
    assert_eq!(mac["DL TBS (bytes)"].as_u64(), Some(tbs_bytes));
    assert_eq!(mac["Padding (bytes)"].as_u64(), Some(tbs_bytes - 1000));
    for key in ["SFN", "Sub-FN", "HARQ ID", "RLC PDUs"] {
        assert!(mac[key].is_u64(), "{key}");
    }
    let rlc = &record["LTE_RLC_DL_Stats"]["RB Stats"][0];
    for key in ["Num Retx PDU", "Num Dropped PDU", "RLC PDCP Q Full Count", "Num Complete NACK", "Num Segments NACK"] {
        assert_eq!(rlc[key], 0, "{key}");
    }
    let pdcp = &record["LTE_PDCP_DL_Stats"];
    for key in ["Num Offload Q Full Count", "Num PDU Dups", "Num PDU Out of Win"] {
        assert_eq!(pdcp[key], 0, "{key}");
    }
    // An idle subframe still has a record, without a transport block.
    cell.run_subframe(124, &mut out);
    let idle = serde_json::to_value(out.diag[0]).unwrap();
    assert_eq!(idle["LTE_PHY_PDSCH_Stat_Indication"]["Records"][0]["Transport Blocks"], serde_json::json!([]));
    assert_eq!(idle["LTE_MAC_DL_Transport_Block"]["Samples"], serde_json::json!([]));
    let truth = serde_json::to_value(&out.truth).unwrap();
    assert_eq!(truth["ues"][0]["rrc"], "connected");
}

#[test]
fn seek_trace_replays_a_stretch_of_the_trace_while_time_runs_on() {
    // Other users' demand = the row number (mod 50): what the truth shows is the row played.
    let mut columns = constant_columns(100, 20, 0);
    columns.other_rbs = (0..100).map(|row| (row % 50) as u8).collect();
    let mut cell = one_ue(config("background-first"), conditions(columns.clone()));
    let mut rows = Vec::new();
    let mut saturator = Saturator::new(1, 1500, 100_000);
    run(&mut cell, &mut saturator, 0, 30, |out| rows.push(out.truth.other_demand_rbs));
    cell.seek_trace(30, 10);
    assert_eq!((cell.trace_ms(30), cell.trace_ms(35), cell.trace_shift_ms()), (10, 15, -20));
    run(&mut cell, &mut saturator, 30, 40, |out| rows.push(out.truth.other_demand_rbs));
    // Forward too, and across the trace's end (it loops).
    cell.seek_trace(40, 95);
    run(&mut cell, &mut saturator, 40, 50, |out| rows.push(out.truth.other_demand_rbs));
    let expected: Vec<u8> =
        (0..30).chain(10..20).chain((95..105).map(|row| row % 100)).map(|row| (row % 50) as u8).collect();
    assert_eq!(rows, expected);

    // A trace that does not loop ends by trace time: a seek moves the run's end.
    let once = conditions(columns).without_loop();
    let mut cell = one_ue(config("background-first"), once);
    assert_eq!(cell.end_ms(), Some(100));
    cell.seek_trace(30, 90);
    assert_eq!(cell.end_ms(), Some(40));
}

#[test]
fn the_configured_loss_model_decides_every_transmission() {
    // `fixed` at 1: every transmission fails, so nothing is delivered and RLC gives up.
    let mut failing = config("proportional-fair");
    failing.loss = PolicyChoice::parse("fixed,probability=1").unwrap();
    let mut cell = one_ue(failing, conditions(constant_columns(200, 12, 0)));
    let mut out = SubframeOutput::new();
    let (mut delivered, mut lost) = (0, 0);
    assert_eq!(cell.enqueue(UeId(0), 500, (0, 0)), Enqueued::Queued);
    for t in 0..200 {
        cell.run_subframe(t, &mut out);
        delivered += out.delivered.len();
        lost += out.lost.len();
        assert!(out.truth.ues[0].crc_pass != Some(true));
    }
    assert_eq!((delivered, lost), (0, 1));
    // `fixed` at 0 overrides a trace whose every first transmission fails.
    let mut clean = config("proportional-fair");
    clean.loss = PolicyChoice::named("fixed");
    let mut columns = constant_columns(100, 12, 0);
    columns.harq_fail = Some(vec![1; 100]);
    let mut cell = one_ue(clean, conditions(columns));
    assert_eq!(cell.enqueue(UeId(0), 500, (0, 0)), Enqueued::Queued);
    cell.run_subframe(0, &mut out);
    assert_eq!(out.delivered, [(UeId(0), (0, 0))]);
}

#[test]
fn an_outage_holds_the_data_then_releases_it_at_the_cell_rate() {
    // A trace whose link is out in subframes 100..300; 1000-byte packets every ms from 50.
    let mut columns = constant_columns(1000, 20, 0);
    columns.outage = Some((0..1000).map(|t| u8::from((100..300).contains(&t))).collect());
    let config = CellConfig { rrc: PolicyChoice::named("off"), ..config("proportional-fair") };
    let mut cell = one_ue(config, conditions(columns));
    let full_tbs = u64::from(lte::tbs::tbs_bits(20, 50, 1).unwrap() / 8);
    let mut out = SubframeOutput::new();
    let (mut queue, mut carried, mut stalled) = (Vec::new(), Vec::new(), Vec::new());
    for t in 0..600u64 {
        if (50..400).contains(&t) {
            assert_eq!(cell.enqueue(UeId(0), 1000, (0, t)), Enqueued::Queued);
        }
        cell.run_subframe(t, &mut out);
        let u = out.truth.ues[0];
        queue.push(u.queue_bytes);
        carried.push(u.carried_bytes);
        stalled.push(u.stalled);
        assert_eq!(cell.stalled(UeId(0)), Some((100..300).contains(&t)));
    }
    // Nothing carried in the outage; 200 packets wait at its end (none dropped).
    assert!(carried[100..300].iter().all(|&c| c == 0));
    assert_eq!(queue[299], 200 * 1000);
    assert!(stalled[100..300].iter().all(|&s| s) && !stalled[300]);
    // Then the full band until the backlog is gone: the burst.
    let drained = 300 + queue[300..].iter().position(|&q| q < full_tbs).unwrap();
    assert!(drained > 310);
    assert!(carried[300..drained].iter().all(|&c| c == full_tbs), "{:?}", &carried[300..drained]);
}

#[test]
fn the_default_rrc_model_waits_for_the_drx_on_duration() {
    // The default model (lte): quiet for 200 ms after the start, the UE is in long DRX (40 ms
    // cycle, 1 ms on-duration at multiples of 40): a packet at 201 leaves at 240.
    let mut cell = one_ue(config("proportional-fair"), conditions(constant_columns(1000, 20, 0)));
    let mut out = SubframeOutput::new();
    cell.run_subframe(0, &mut out);
    cell.run_subframe(200, &mut out);
    assert_eq!(out.truth.ues[0].drx, cell::DrxState::LongDrx);
    cell.enqueue(UeId(0), 1000, (0, 0));
    let delivered_at = (201..300u64).find(|&t| {
        cell.run_subframe(t, &mut out);
        !out.delivered.is_empty()
    });
    assert_eq!(delivered_at, Some(240));
    assert_eq!(out.truth.ues[0].drx, cell::DrxState::Continuous);
}
