//! Turns the validated config into the cell model and each UE's links: loads the traces,
//! builds the `cell` crate's conditions, and picks each UE's uplink capacity and core delay.
//! Everything here can fail only on the caller's input (exit code 2) and creates nothing
//! outside the process.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cell::{Cell, ConditionTrace, ConstantRate, MahimahiConditions, TraceColumns, TraceConditions, UeSetup};

use crate::config::{Config, Downlink, UplinkSource};
use crate::error::{Error, Result};
use cell::delay::CoreDelay;
use cell::uplink::UplinkCapacity;

/// A UE's links outside the cell.
#[derive(Debug, Clone)]
pub struct UeLinks {
    /// Core delay towards the UE.
    pub core_down: CoreDelay,
    /// Core delay towards the core.
    pub core_up: CoreDelay,
    /// Uplink capacity.
    pub uplink: UplinkCapacity,
    /// Drop-tail limit of the UE's uplink buffer, bytes.
    pub uplink_queue_limit_bytes: u64,
}

/// A PHY trace as loaded: the cell's columns plus the two the data plane plays itself.
struct LoadedTrace {
    conditions: Arc<ConditionTrace>,
    ul_capacity_bits: Option<Arc<[u32]>>,
    core_delay_ms: Option<Arc<[f32]>>,
}

fn load_trace(path: &Path) -> Result<LoadedTrace> {
    let trace = phy_trace::Trace::read(path).map_err(|e| Error::Trace(e.to_string()))?;
    let meta = &trace.metadata;
    let c = trace.columns;
    let columns = TraceColumns {
        n_rb: meta.cell.n_rb,
        n_antennas: meta.cell.n_antennas,
        start_sfn: meta.start_sfn,
        mcs: c.mcs,
        other_rbs: c.other_rbs,
        other_users: c.other_users,
        harq_fail: c.harq_fail,
        bler: c.bler,
        layers: c.layers,
        rsrp_dbm: c.rsrp_dbm,
        outage: c.outage,
    };
    let conditions = ConditionTrace::new(columns).map_err(|e| Error::Trace(format!("{}: {e}", path.display())))?;
    Ok(LoadedTrace {
        conditions: Arc::new(conditions),
        ul_capacity_bits: c.ul_capacity_bits.map(Into::into),
        core_delay_ms: c.core_delay_ms.map(Into::into),
    })
}

fn read_mahimahi(path: &Path, looping: bool) -> Result<MahimahiConditions> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::Trace(format!("{}: {e}", path.display())))?;
    let trace = MahimahiConditions::parse(&text).map_err(|e| Error::Trace(format!("{}: {e}", path.display())))?;
    Ok(if looping { trace } else { trace.without_loop() })
}

/// Reads a delay trace file (`CoreDelay::parse_steps`); errors name the file and line.
fn read_delay_trace(path: &Path) -> Result<CoreDelay> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::Trace(format!("{}: reading the delay trace: {e}", path.display())))?;
    CoreDelay::parse_steps(&text).map_err(|e| Error::Trace(format!("{}: {e}", path.display())))
}

/// Builds the cell (handles of type `H`) and every UE's links.
pub fn build<H>(config: &Config) -> Result<(Cell<H>, Vec<UeLinks>)> {
    let mut traces: HashMap<PathBuf, Arc<LoadedTrace>> = HashMap::new();
    let mut trace_at = |path: &PathBuf| -> Result<Arc<LoadedTrace>> {
        if let Some(t) = traces.get(path) {
            return Ok(Arc::clone(t));
        }
        let t = Arc::new(load_trace(path)?);
        traces.insert(path.clone(), Arc::clone(&t));
        Ok(t)
    };
    let delay_trace = config.core_delay_trace.as_deref().map(read_delay_trace).transpose()?;
    let mut setups = Vec::with_capacity(config.ues.len());
    let mut links = Vec::with_capacity(config.ues.len());
    for ue in &config.ues {
        let mut core_down = CoreDelay::Constant(config.core_down_ns);
        let mut core_up = CoreDelay::Constant(config.core_up_ns);
        let mut uplink = UplinkCapacity::Unlimited;
        let setup = match &ue.downlink {
            Downlink::Trace { path, offset_ms } => {
                let trace = trace_at(path)?;
                if let Some(bits) = &trace.ul_capacity_bits {
                    uplink = UplinkCapacity::PerSubframe { bits: Arc::clone(bits), offset_ms: *offset_ms };
                }
                if let (Some(delay_ms), false) = (&trace.core_delay_ms, config.ignore_trace_core_delay) {
                    let d = CoreDelay::PerSubframe {
                        delay_ms: Arc::clone(delay_ms),
                        offset_ms: *offset_ms,
                        looping: config.loop_trace,
                    };
                    core_down = d.clone();
                    core_up = d;
                }
                let conditions = TraceConditions::new(Arc::clone(&trace.conditions)).starting_at(*offset_ms);
                if config.loop_trace {
                    UeSetup::new(ue.cell.clone(), conditions)
                } else {
                    UeSetup::new(ue.cell.clone(), conditions.without_loop())
                }
            }
            Downlink::Mahimahi { path } => UeSetup::new(ue.cell.clone(), read_mahimahi(path, config.loop_trace)?),
            Downlink::Rate { bps } => UeSetup::new(ue.cell.clone(), ConstantRate { rate_bps: *bps }),
        };
        match &ue.uplink {
            UplinkSource::TraceOrUnlimited => {}
            UplinkSource::Mahimahi { path } => {
                uplink = UplinkCapacity::Mahimahi(read_mahimahi(path, config.loop_trace)?)
            }
            UplinkSource::Rate { bps } => uplink = UplinkCapacity::Rate(*bps),
        }
        if let Some(d) = &delay_trace {
            core_down = d.clone();
            core_up = d.clone();
        }
        setups.push(setup);
        links.push(UeLinks { core_down, core_up, uplink, uplink_queue_limit_bytes: ue.uplink_queue_limit_bytes });
    }
    let cell = match &config.background_trace {
        None => Cell::new(config.cell.clone(), setups, config.seed),
        Some(path) => {
            let background = TraceConditions::new(Arc::clone(&trace_at(path)?.conditions));
            if config.loop_trace {
                Cell::with_background(config.cell.clone(), background, setups, config.seed)
            } else {
                Cell::with_background(config.cell.clone(), background.without_loop(), setups, config.seed)
            }
        }
    }
    .and_then(|cell| {
        let events = config
            .events
            .iter()
            .enumerate()
            .map(|(i, choice)| {
                let kind = cell::events::kind(&choice.kind).map_or("", |k| k.name);
                let event = cell::events::build(choice)
                    .map_err(|e| cell::ConfigError { field: format!("events[{i}].{}", e.field), problem: e.problem })?;
                Ok((kind, event))
            })
            .collect::<std::result::Result<Vec<_>, cell::ConfigError>>()?;
        cell.with_events(events)
    })
    .map_err(|e| {
        // The cell names UE fields `ues[i].x`, events `events[i].x`, and its own fields bare.
        let field = if e.field.starts_with("ues[") || e.field.starts_with("events[") {
            e.field
        } else {
            format!("cell.{}", e.field)
        };
        Error::config(field, e.problem)
    })?;
    Ok((cell, links))
}
