//! Property tests of the cell crate's parsers of outside input (Mahimahi traces, delay
//! traces, policy choices, the cell's config) and of the uplink and delay models fed any
//! values: a result or an error with a message, never a panic. Bounded case counts.

use cell::conditions::Conditions;
use cell::delay::{CoreDelay, NANOS_PER_MS};
use cell::uplink::{Uplink, UplinkCapacity, UplinkTiming};
use cell::{CellConfig, MahimahiConditions, PolicyChoice, UeConfig};
use proptest::prelude::*;

fn config() -> ProptestConfig {
    ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() }
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn mahimahi_traces_of_any_text(lines in proptest::collection::vec("[0-9 #.a-]{0,12}", 0..20), t in any::<u64>()) {
        match MahimahiConditions::parse(&lines.join("\n")) {
            Ok(trace) => {
                let _ = trace.at(t);
                let _ = trace.clone().without_loop().at(t);
            }
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn delay_traces_of_any_text(
        rows in proptest::collection::vec("[0-9]{0,21},-?[0-9]{0,6}(\\.[0-9]{0,4})?|nan|[0-9,]{0,5}", 0..8),
        t_ns in any::<i64>(), shift in any::<i64>(),
    ) {
        let text = format!("t_ms,core_delay_ms\n{}", rows.join("\n"));
        match CoreDelay::parse_steps(&text) {
            Ok(delay) => prop_assert!((0..=10_000 * NANOS_PER_MS).contains(&delay.at(t_ns, shift))),
            Err(e) => prop_assert!(!e.to_string().is_empty()),
        }
    }

    #[test]
    fn policy_choices_of_any_text(text in "[a-z=,.0-9 -]{0,30}") {
        if let Ok(choice) = PolicyChoice::parse(&text) {
            let mut cell = CellConfig::default();
            let mut ue = UeConfig::default();
            for category in ["scheduler", "loss", "queue", "other"] {
                if let Err(e) = cell::policy::apply(category, choice.clone(), &mut cell, &mut [&mut ue]) {
                    prop_assert!(!e.problem.is_empty());
                }
            }
            let _ = cell.validate();
        }
    }

    #[test]
    fn scripted_events_of_any_text_then_any_packets(
        text in "(drop|outage|capacity|burst|x)?:?[a-z_=,.0-9 -]{0,40}",
        packets in proptest::collection::vec((0u64..100_000, 0u32..2000, any::<u64>(), any::<u64>(), any::<bool>()), 0..20),
    ) {
        // Text → a table or a message; a table → an event or an error naming a key; an event
        // → effects and drop decisions for any subframes and packets, never a panic.
        let Ok(choice) = cell::events::parse(&text) else { return Ok(()) };
        match cell::events::build(&choice) {
            Err(e) => prop_assert!(!e.field.is_empty() && !e.problem.is_empty()),
            Ok(event) => {
                let mut script = cell::events::Script::new(vec![("x", event)], 2);
                for (t, len, first_byte, in_flight, tcp) in packets {
                    let _ = script.effects(t);
                    let segment = cell::events::TcpSegment { first_byte, payload_bytes: len, in_flight_bytes: in_flight };
                    let packet = cell::events::DownlinkPacket { len_bytes: len, tcp: tcp.then_some(segment) };
                    let _ = script.drops(cell::UeId(0), t, &packet);
                    if t % 7 == 0 {
                        script.arm(t);
                    }
                }
            }
        }
    }

    #[test]
    fn cell_configs_of_any_json(
        scheduler in prop::sample::select(vec!["\"round-robin\"", "\"x\"", "{\"kind\": \"background-first\"}", "3", "{}", "{\"kind\": 1}"]),
        loss in prop::sample::select(vec!["\"fixed\"", "{\"kind\": \"fixed\", \"probability\": 1e300}", "{\"kind\": \"fixed\", \"probability\": true}",
                                          "{\"kind\": \"correlated\"}", "{\"kind\": \"fixed\", \"probability\": -0.0}", "[]"]),
        n_rb in prop::sample::select(vec!["6", "50", "51", "-1", "4294967296", "null"]),
        max_tx in prop::sample::select(vec!["0", "4", "9", "1e9"]),
    ) {
        let json = format!(r#"{{"scheduler": {scheduler}, "loss": {loss}, "n_rb": {n_rb}, "harq": {{"max_tx": {max_tx}}}}}"#);
        if let Ok(config) = serde_json::from_str::<CellConfig>(&json) {
            if let Err(e) = config.validate() {
                prop_assert!(!e.field.is_empty() && !e.problem.is_empty());
            }
        }
    }

    #[test]
    fn the_uplink_under_any_capacity_and_timing(
        rate in any::<u64>(), bits in proptest::collection::vec(any::<u32>(), 0..5), offset in any::<u64>(),
        sr in -5i64..50, grant in 0i64..20, arrivals in proptest::collection::vec((0i64..100, 1u32..70_000), 0..20),
        t0 in any::<u64>(),
    ) {
        let timing = UplinkTiming { sr_period_ns: sr * NANOS_PER_MS, sr_offset_ns: 3 * NANOS_PER_MS, grant_delay_ns: grant * NANOS_PER_MS };
        for capacity in [UplinkCapacity::Rate(rate), UplinkCapacity::PerSubframe { bits: bits.clone().into(), offset_ms: offset }, UplinkCapacity::Unlimited] {
            let mut up: Uplink<usize> = Uplink::new(timing, capacity, 1 << 20);
            for (i, &(at_ms, len)) in arrivals.iter().enumerate() {
                let _ = up.arrive(at_ms * NANOS_PER_MS, len, i);
            }
            let t0 = t0 % (1 << 40);
            for t in 0..120 {
                up.transmit(t, t0.saturating_add(t), None, |_| {});
            }
            let _ = up.drain().count();
            prop_assert_eq!(up.queued_bytes(), 0);
        }
    }
}
