//! From the file and flags to the validated [`Config`]: every check, each naming the key at
//! fault (`ues[1].address`, `events[0].ue`).

use std::net::Ipv4Addr;
use std::path::PathBuf;

use cell::PolicyChoice;

use super::delays::delay_ns;
use super::{parse_rate_bps, Config, Downlink, FileConfig, Mode, UeSpec, UplinkSource, MAX_CPUS};
use crate::error::{Error, Result};
use crate::tun::{Ipv4Prefix, MAX_IFNAME_BYTES};

/// Checks an interface name: 1..=15 bytes of letters, digits, `-`, `_`, `.`.
fn ifname(field: &str, name: &str) -> Result<String> {
    let ok_chars = name.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if name.is_empty() || name.len() > MAX_IFNAME_BYTES || !ok_chars {
        return Err(Error::config(
            field,
            format!("`{name}` must be 1..={MAX_IFNAME_BYTES} letters, digits, `-`, `_` or `.`"),
        ));
    }
    Ok(name.to_string())
}

/// The TUN name: the configured one, else the namespace's name.
fn tun_name(field: &str, tun: &Option<String>, netns: &str) -> Result<String> {
    match tun {
        Some(name) => ifname(field, name),
        None if !netns.contains('/') && netns.len() <= MAX_IFNAME_BYTES => ifname(field, netns),
        None => {
            Err(Error::config(field, format!("must be given: the namespace `{netns}` cannot serve as a device name")))
        }
    }
}

pub(super) fn validate(file: FileConfig) -> Result<Config> {
    let mode = file.mode.unwrap_or(match file.ues.first() {
        Some(ue) if ue.rate.is_some() && ue.trace.is_none() => Mode::Rate,
        Some(ue) if ue.mahimahi_trace.is_some() && ue.trace.is_none() => Mode::Mahimahi,
        _ => Mode::Cell,
    });
    let d = &file.delays;
    let core_down_ns = delay_ns("delays.core_down_ms", d.core_down_ms)?;
    let core_up_ns = delay_ns("delays.core_up_ms", d.core_up_ms)?;
    let air_ns = delay_ns("delays.air_ms", d.air_ms)?;
    let sr_period_ns = delay_ns("delays.sr_period_ms", d.sr_period_ms)?;
    let grant_delay_ns = delay_ns("delays.grant_delay_ms", d.grant_delay_ms)?;
    if let Some(p) = &d.core_delay_trace {
        if !p.is_file() {
            return Err(Error::config("delays.core_delay_trace", format!("{} is not a file", p.display())));
        }
    }
    let duration_ms = match file.duration_s {
        None => None,
        Some(s) if s.is_finite() && s > 0.0 && s <= 1e7 => Some((s * 1000.0).round() as u64),
        Some(s) => return Err(Error::config("duration_s", format!("must be a positive number of seconds, got {s}"))),
    };
    let realtime_priority = match file.realtime_priority {
        0 => None,
        p @ 1..=99 => Some(p as i32),
        p => return Err(Error::config("realtime_priority", format!("must be 0..=99 (0: normal priority), got {p}"))),
    };
    let a = &file.affinity;
    for (name, cpus) in [("cell", &a.cell), ("tx", &a.tx), ("io", &a.io), ("diag", &a.diag), ("record", &a.record)] {
        if let Some(cpu) = cpus.iter().find(|&&c| c >= MAX_CPUS) {
            return Err(Error::config(format!("affinity.{name}"), format!("CPU {cpu} is not below {MAX_CPUS}")));
        }
    }
    if !(576..=9000).contains(&file.mtu_bytes) {
        return Err(Error::config("mtu_bytes", format!("must be 576..=9000, got {}", file.mtu_bytes)));
    }
    if !(64..=(1 << 24)).contains(&file.max_packets) {
        return Err(Error::config("max_packets", format!("must be 64..=16777216, got {}", file.max_packets)));
    }
    if let Some(p) = &file.background_trace {
        if mode != Mode::Cell {
            return Err(Error::config("background_trace", "only mode cell has other users"));
        }
        existing_file("background_trace", Some(p), "")?;
    }
    if file.diag.stats_period_ms == 0 {
        return Err(Error::config("diag.stats_period_ms", "must be at least 1"));
    }
    file.diag.phone.validate().map_err(|(field, problem)| Error::config(format!("diag.phone.{field}"), problem))?;
    file.cell.validate().map_err(|e| Error::config(format!("cell.{}", e.field), e.problem))?;
    check_events(&file.events, file.ues.len(), mode)?;

    let Some(core) = &file.core else {
        return Err(Error::config("core.netns", "the core namespace must be given (core.netns or --core-netns)"));
    };
    if core.netns.is_empty() {
        return Err(Error::config("core.netns", "must not be empty"));
    }
    let core_tun = tun_name("core.tun", &core.tun, &core.netns)?;
    for (i, r) in core.routes.iter().enumerate() {
        r.parse::<Ipv4Prefix>().map_err(|e| Error::config(format!("core.routes[{i}]"), e))?;
    }
    if file.ues.is_empty() {
        return Err(Error::config("ues", "at least one UE must be given (a [[ues]] table or --ue-netns)"));
    }
    if file.ues.len() > 64 {
        return Err(Error::config("ues", format!("at most 64 UEs, got {}", file.ues.len())));
    }

    let mut ues: Vec<UeSpec> = Vec::with_capacity(file.ues.len());
    for (i, ue) in file.ues.iter().enumerate() {
        let f = |key: &str| format!("ues[{i}].{key}");
        if ue.netns.is_empty() {
            return Err(Error::config(f("netns"), "must be given (or --ue-netns)"));
        }
        let tun = tun_name(&f("tun"), &ue.tun, &ue.netns)?;
        let address = ue.address.unwrap_or(Ipv4Addr::new(10, 200, 1, (2 + i) as u8));
        for (j, r) in ue.routes.iter().enumerate() {
            r.parse::<Ipv4Prefix>().map_err(|e| Error::config(f(&format!("routes[{j}]")), e))?;
        }
        let rate = |key: &str, v: &Option<String>| -> Result<Option<u64>> {
            v.as_deref().map(parse_rate_bps).transpose().map_err(|e| Error::config(f(key), e))
        };
        let downlink = match mode {
            Mode::Cell => Downlink::Trace {
                path: existing_file(&f("trace"), ue.trace.as_ref(), "mode cell needs a PHY trace per UE (--trace)")?,
                offset_ms: ue.trace_offset_ms,
            },
            Mode::Mahimahi => Downlink::Mahimahi {
                path: existing_file(
                    &f("mahimahi_trace"),
                    ue.mahimahi_trace.as_ref(),
                    "mode mahimahi needs a Mahimahi trace per UE (--mahimahi-trace)",
                )?,
            },
            Mode::Rate => Downlink::Rate {
                bps: rate("rate", &ue.rate)?
                    .ok_or_else(|| Error::config(f("rate"), "mode rate needs a rate per UE (--rate)"))?,
            },
        };
        let uplink = match (&ue.uplink_mahimahi_trace, rate("uplink_rate", &ue.uplink_rate)?) {
            (Some(_), Some(_)) => {
                return Err(Error::config(f("uplink_rate"), "give uplink_rate or uplink_mahimahi_trace, not both"))
            }
            (Some(p), None) => {
                UplinkSource::Mahimahi { path: existing_file(&f("uplink_mahimahi_trace"), Some(p), "")? }
            }
            (None, Some(bps)) => UplinkSource::Rate { bps },
            (None, None) => UplinkSource::TraceOrUnlimited,
        };
        if !(1..=1 << 30).contains(&ue.uplink_queue_limit_bytes) {
            return Err(Error::config(
                f("uplink_queue_limit_bytes"),
                format!("must be 1..=1073741824, got {}", ue.uplink_queue_limit_bytes),
            ));
        }
        ue.cell.validate().map_err(|e| Error::config(f(&format!("cell.{}", e.field)), e.problem))?;
        if let Some(j) = ues.iter().position(|o| o.netns == ue.netns && o.tun == tun) {
            return Err(Error::config(f("tun"), format!("`{tun}` in namespace {} is also UE {j}'s", ue.netns)));
        }
        if ue.netns == core.netns && tun == core_tun {
            return Err(Error::config(f("tun"), format!("`{tun}` in namespace {} is also the core's", ue.netns)));
        }
        if let Some(j) = ues.iter().position(|o| o.address == address) {
            return Err(Error::config(f("address"), format!("{address} is also UE {j}'s")));
        }
        if address == core.address {
            return Err(Error::config(f("address"), format!("{address} is also the core's")));
        }
        if ue.diag_port != 0 {
            if let Some(j) = ues.iter().position(|o| o.netns == ue.netns && o.diag_port == ue.diag_port) {
                return Err(Error::config(
                    f("diag_port"),
                    format!("{} is also UE {j}'s in the same namespace", ue.diag_port),
                ));
            }
        }
        ues.push(UeSpec {
            netns: ue.netns.clone(),
            tun,
            address,
            routes: ue.routes.clone(),
            downlink,
            uplink,
            uplink_queue_limit_bytes: ue.uplink_queue_limit_bytes,
            diag_port: ue.diag_port,
            diag_file: ue.diag_file,
            cell: ue.cell.clone(),
        });
    }
    let core_routes = ues.iter().map(|u| u.address.to_string()).chain(core.routes.iter().cloned()).collect();
    Ok(Config {
        mode,
        seed: file.seed,
        output_dir: file.output_dir,
        duration_ms,
        loop_trace: file.loop_trace,
        background_trace: file.background_trace.clone(),
        realtime_priority,
        affinity: file.affinity.clone(),
        tun_offload: file.tun_offload,
        cpu_latency_qos: file.cpu_latency_qos,
        max_packets: file.max_packets,
        mtu_bytes: file.mtu_bytes,
        core_down_ns,
        core_up_ns,
        air_ns,
        sr_period_ns,
        grant_delay_ns,
        core_delay_trace: file.delays.core_delay_trace.clone(),
        ignore_trace_core_delay: file.delays.ignore_trace_core_delay,
        core_netns: core.netns.clone(),
        core_tun,
        core_address: core.address,
        core_routes,
        ues,
        diag_stats_period_ms: file.diag.stats_period_ms,
        diag_file: file.diag.file,
        diag_mi2log: file.diag.mi2log,
        diag_feed_timing: file.diag.feed_timing,
        diag_phone: file.diag.phone,
        cell: file.cell.clone(),
        events: file.events.clone(),
    })
}

/// Checks the scripted events: each one's kind and parameters, its UE among the `n_ues`, a
/// burst only in mode cell; errors name `events[i].<key>`.
fn check_events(events: &[PolicyChoice], n_ues: usize, mode: Mode) -> Result<()> {
    if events.len() > cell::events::MAX_EVENTS {
        return Err(Error::config(
            "events",
            format!("at most {} events, got {}", cell::events::MAX_EVENTS, events.len()),
        ));
    }
    for (i, event) in events.iter().enumerate() {
        let params =
            cell::events::check(event).map_err(|e| Error::config(format!("events[{i}].{}", e.field), e.problem))?;
        if let Some(ue) = params.integer("ue").filter(|&ue| ue >= n_ues as u64) {
            return Err(Error::config(format!("events[{i}].ue"), format!("UE {ue} is not one of the {n_ues} UEs")));
        }
        if event.kind == "burst" && mode != Mode::Cell {
            return Err(Error::config(
                format!("events[{i}].kind"),
                "a burst of other users needs mode cell (an open-loop link has no cell to share)",
            ));
        }
    }
    Ok(())
}

/// A path that must name an existing file.
fn existing_file(field: &str, path: Option<&PathBuf>, missing: &str) -> Result<PathBuf> {
    match path {
        None => Err(Error::config(field, missing)),
        Some(p) if p.is_file() => Ok(p.clone()),
        Some(p) => Err(Error::config(field, format!("{} is not a file", p.display()))),
    }
}
