//! Scripted events inside the cell: outages hold data, capacity steps scale what a UE
//! receives, bursts take the other users' share, drops are counted in the truth; all
//! relative to the last arming.

mod common;

use cell::events::{self, DownlinkPacket};
use cell::{Cell, CellConfig, ConstantRate, PolicyChoice, UeConfig, UeId, UeSetup};
use common::*;

fn scripted(cell: Cell<Handle>, texts: &[&str]) -> Cell<Handle> {
    let events = texts
        .iter()
        .map(|t| {
            let choice = events::parse(t).expect("parses");
            (events::kind(&choice.kind).expect("kind").name, events::build(&choice).expect("valid"))
        })
        .collect();
    cell.with_events(events).expect("events of the cell's UEs")
}

fn trace_cell(scheduler: &str) -> Cell<Handle> {
    let config = lossless(CellConfig { scheduler: PolicyChoice::named(scheduler), ..CellConfig::default() });
    let ue = UeSetup::new(UeConfig::default(), conditions(constant_columns(10_000, 15, 0)));
    Cell::new(config, vec![ue], 1).expect("valid cell")
}

#[test]
fn a_burst_takes_its_share_before_the_scheduler() {
    let mut cell = scripted(trace_cell("proportional-fair"), &["burst:at_ms=100,ms=200,share=0.6"]);
    let mut saturator = Saturator::new(1, 1500, 500_000);
    let mut t = 0u64;
    run(&mut cell, &mut saturator, 0, 400, |out| {
        let expected = if (100..300).contains(&t) { 20 } else { 50 };
        assert_eq!(out.truth.ues[0].alloc_rbs, expected, "t = {t}");
        assert_eq!(out.truth.burst_rbs, 50 - expected);
        assert_eq!(out.truth.other_alloc_rbs, 50 - expected);
        assert_eq!(out.truth.total_alloc_rbs, 50);
        t += 1;
    });
}

#[test]
fn a_capacity_step_scales_the_transport_blocks_and_open_loop_budgets() {
    let full = u64::from(lte::tbs::tbs_bits(15, 50, 1).unwrap() / 8);
    let mut cell = scripted(trace_cell("proportional-fair"), &["capacity:at_ms=100,factor=0.5,ms=100"]);
    let mut saturator = Saturator::new(1, 1500, 500_000);
    let mut carried = [0u64; 3];
    let mut t = 0u64;
    run(&mut cell, &mut saturator, 0, 300, |out| {
        let ue = &out.truth.ues[0];
        carried[(t / 100) as usize] += ue.carried_bytes;
        assert_eq!(ue.capacity_factor, if (100..200).contains(&t) { 0.5 } else { 1.0 });
        t += 1;
    });
    assert_eq!(carried[0], 100 * full);
    assert_eq!(carried[2], 100 * full);
    assert_eq!(carried[1], 100 * (full / 2), "half of each block, whole bytes");

    // Open loop: 24 Mbit/s is 3000 bytes a subframe; at 0.3, 900.
    let ue = UeSetup::new(UeConfig::default(), ConstantRate { rate_bps: 24_000_000 });
    let cell = Cell::new(lossless(CellConfig::default()), vec![ue], 1).expect("valid");
    let mut cell = scripted(cell, &["capacity:at_ms=0,factor=0.3"]);
    let mut total = 0u64;
    run(&mut cell, &mut Saturator::new(1, 1000, 100_000), 0, 1000, |out| total += out.truth.ues[0].carried_bytes);
    assert!((899_000..=900_000).contains(&total), "{total}");
}

#[test]
fn an_outage_holds_the_data_and_re_arming_moves_it() {
    let mut cell = scripted(trace_cell("proportional-fair"), &["outage:at_ms=50,ms=30"]);
    let mut saturator = Saturator::new(1, 1500, 200_000);
    let mut t = 0u64;
    run(&mut cell, &mut saturator, 0, 100, |out| {
        let ue = &out.truth.ues[0];
        let out_now = (50..80).contains(&t);
        assert_eq!((ue.scripted_outage, ue.stalled), (out_now, out_now), "t = {t}");
        assert_eq!(ue.carried_bytes == 0, out_now, "t = {t}");
        t += 1;
    });
    cell.arm_events(100);
    run(&mut cell, &mut saturator, 100, 200, |out| {
        assert_eq!(out.truth.ues[0].scripted_outage, (150..180).contains(&t), "t = {t}");
        t += 1;
    });
    assert_eq!(cell.event_tallies()[0].active_ms, 60);
    assert_eq!(cell.event_tallies()[0].armings, 2);
}

#[test]
fn a_scripted_drop_is_in_the_next_truth_record() {
    let mut cell = scripted(trace_cell("proportional-fair"), &["drop:packet=2"]);
    assert!(cell.has_drop_events());
    let packet = DownlinkPacket { len_bytes: 1500, tcp: None };
    assert!(!cell.scripted_drop(UeId(0), 0, &packet));
    assert!(cell.scripted_drop(UeId(0), 0, &packet));
    let mut out = cell::SubframeOutput::new();
    cell.run_subframe(0, &mut out);
    assert_eq!((out.truth.ues[0].event_drops, out.truth.ues[0].event_drop_bytes), (1, 1500));
    cell.run_subframe(1, &mut out);
    assert_eq!(out.truth.ues[0].event_drops, 0);
}

#[test]
fn an_event_of_a_missing_ue_is_refused_naming_it() {
    let choice = events::parse("outage:ue=1,at_ms=0,ms=1").expect("parses");
    let e = trace_cell("round-robin")
        .with_events(vec![("outage", events::build(&choice).expect("valid"))])
        .err()
        .expect("UE 1 is not there");
    assert_eq!(e.field, "events[0].ue");
}
