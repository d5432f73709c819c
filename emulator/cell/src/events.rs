//! Scripted events: impairments at chosen moments, on top of the conditions and the
//! stochastic processes. A config's `events` list holds them, each a table with `kind` and
//! its parameters (the text form `KIND:PARAM=VALUE,...` on the command line):
//!
//! | kind | what | parameters |
//! |---|---|---|
//! | `drop` | drops one downlink packet of UE `ue` | exactly one of `at_ms`, `packet`, `seq_byte`, `in_flight_bytes` |
//! | `outage` | UE `ue`'s link carries nothing for `ms` from `at_ms`; its data waits (as a stall) | `at_ms`, `ms` |
//! | `capacity` | UE `ue`'s capacity times `factor` from `at_ms`, for `ms` (default: on) | `at_ms`, `factor`, `ms` |
//! | `burst` | the other users take `share` of the cell's RBs from `at_ms` for `ms` | `at_ms`, `ms`, `share` |
//!
//! Time: every `at_ms` is ms of emulated time since the script was last armed: at time zero,
//! and again at each seek of the traces ([`crate::Cell::arm_events`]; the data plane re-arms
//! on SIGHUP), so in a replay, which seeks at each load's start, `at_ms` means "ms into each
//! load". Arming also resets the drop triggers (each drops one packet per arming) and the
//! packet counts.
//!
//! Drop triggers, checked for every downlink packet of the UE as the emulator takes it in
//! from the core side, in arrival order (the drop is decided in the subframe that takes it
//! in; the packet never reaches the base station):
//! - `at_ms`: the first packet taken in at or after `at_ms`;
//! - `packet`: the N-th packet (1-based) since arming;
//! - `seq_byte`: the first TCP segment whose payload carries byte S of its flow, counted
//!   from 0 at the flow's first payload byte (the SYN's sequence number + 1 when the data
//!   plane saw the SYN, else the first segment's);
//! - `in_flight_bytes`: the first TCP segment carrying payload after which its flow has at
//!   least N bytes in flight: the highest sequence number sent toward the UE (this segment's
//!   end included) minus the highest acknowledgment number the UE sent on the flow, both as
//!   the data plane reads them from its TUNs (before the core delay on the way in, after it
//!   on the way back: what the server has sent and not yet seen acknowledged, give or take
//!   an ACK's trip through the core).
//!
//! Overlapping events combine: outages by "any", capacity factors by product, bursts by
//! the largest share. One type per kind plus one entry in [`EVENTS`], as the policy
//! registries do; `clawbed-emu --list-events --json` prints the registry
//! (`emulator/events.json`, which the Python side reads).

use std::collections::BTreeMap;
use std::fmt;

use serde::Serialize;

use crate::config::ConfigError;
use crate::policy::{ParamDefault, ParamType, ParamValue, PolicyChoice};
use crate::UeId;

/// Most events one script holds.
pub const MAX_EVENTS: usize = 1024;
/// Drops noted per event in its tally (the rest are counted only).
pub const MAX_DROP_NOTES: usize = 256;
/// Longest time parameter, ms (a day).
const MAX_MS: i64 = 86_400_000;

/// A downlink packet as a drop trigger sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DownlinkPacket {
    /// IP packet length, bytes.
    pub len_bytes: u32,
    /// What the data plane read of it as a TCP segment; `None` for anything else.
    pub tcp: Option<TcpSegment>,
}

/// A TCP segment toward a UE, as the data plane follows its flow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpSegment {
    /// Its first payload byte, counted from 0 at the flow's first payload byte.
    pub first_byte: u64,
    /// Payload bytes.
    pub payload_bytes: u32,
    /// The flow's bytes in flight with this segment sent, bytes (see the module's docs).
    pub in_flight_bytes: u64,
}

/// What the timed events do to one UE in a subframe.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UeEffect {
    /// A scripted outage: nothing is sent to the UE, its data waits.
    pub outage: bool,
    /// Its capacity is scaled by this (1: unchanged).
    pub capacity_factor: f64,
}

impl Default for UeEffect {
    fn default() -> UeEffect {
        UeEffect { outage: false, capacity_factor: 1.0 }
    }
}

/// What the timed events do in a subframe.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Effects {
    /// Per UE, in UE order.
    pub ues: Vec<UeEffect>,
    /// Share of the cell's RBs the other users take by a burst, 0..=1 (0: no burst).
    pub burst_share: f64,
}

/// One scripted event. Its state between armings is the script's, so an event is a pure
/// description: what it does `since_arm_ms` after arming.
pub trait ScriptedEvent: fmt::Debug {
    /// The UE it acts on; `None` for the whole cell.
    fn ue(&self) -> Option<UeId>;

    /// Adds its effect in the subframe `since_arm_ms` after arming to `effects`; returns
    /// whether it was in force.
    fn apply(&self, _since_arm_ms: u64, _effects: &mut Effects) -> bool {
        false
    }

    /// Whether it drops `packet`, its UE's `nth` downlink packet since arming (1-based),
    /// taken in `since_arm_ms` after arming. Asked for each of its UE's packets in order
    /// until it says yes, then not again until the next arming.
    fn drops(&self, _since_arm_ms: u64, _nth: u64, _packet: &DownlinkPacket) -> bool {
        false
    }

    /// Whether it drops packets at all (the data plane follows TCP flows only then).
    fn is_drop(&self) -> bool {
        false
    }
}

/// When a [`Drop`] fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropTrigger {
    /// The first packet taken in at or after this many ms.
    AtMs(u64),
    /// The N-th packet since arming (1-based).
    Packet(u64),
    /// The first TCP segment carrying this byte of its flow (0: the first payload byte).
    SeqByte(u64),
    /// The first TCP segment with payload after which its flow has this many bytes in flight.
    InFlightBytes(u64),
}

/// Drops one downlink packet of a UE per arming.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drop {
    /// The UE.
    pub ue: UeId,
    /// Which packet.
    pub trigger: DropTrigger,
}

impl ScriptedEvent for Drop {
    fn ue(&self) -> Option<UeId> {
        Some(self.ue)
    }

    fn drops(&self, since_arm_ms: u64, nth: u64, packet: &DownlinkPacket) -> bool {
        let with_payload = packet.tcp.filter(|s| s.payload_bytes > 0);
        match self.trigger {
            DropTrigger::AtMs(at) => since_arm_ms >= at,
            DropTrigger::Packet(n) => nth == n,
            DropTrigger::SeqByte(byte) => {
                with_payload.is_some_and(|s| (s.first_byte..s.first_byte + u64::from(s.payload_bytes)).contains(&byte))
            }
            DropTrigger::InFlightBytes(bytes) => with_payload.is_some_and(|s| s.in_flight_bytes >= bytes),
        }
    }

    fn is_drop(&self) -> bool {
        true
    }
}

/// Whether `since_arm_ms` is within `at_ms .. at_ms + ms` (`ms` `None`: from `at_ms` on).
fn within(since_arm_ms: u64, at_ms: u64, ms: Option<u64>) -> bool {
    since_arm_ms >= at_ms && ms.is_none_or(|ms| since_arm_ms - at_ms < ms)
}

/// An outage of a UE's link: nothing sent to it for `ms`, its data held (as a stall).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Outage {
    /// The UE.
    pub ue: UeId,
    /// Start, ms since arming.
    pub at_ms: u64,
    /// Length, ms.
    pub ms: u64,
}

impl ScriptedEvent for Outage {
    fn ue(&self) -> Option<UeId> {
        Some(self.ue)
    }

    fn apply(&self, since_arm_ms: u64, effects: &mut Effects) -> bool {
        let on = within(since_arm_ms, self.at_ms, Some(self.ms));
        if let (true, Some(e)) = (on, effects.ues.get_mut(self.ue.index())) {
            e.outage = true;
        }
        on
    }
}

/// A step of a UE's capacity: closed loop, every transport block carries `factor` times its
/// TBS (and the UE's demand in RBs grows by 1/`factor`); open loop, each subframe's byte
/// budget is scaled (fractions carried over).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CapacityStep {
    /// The UE.
    pub ue: UeId,
    /// Start, ms since arming.
    pub at_ms: u64,
    /// Length, ms; `None`: until the next arming.
    pub ms: Option<u64>,
    /// Scale of the capacity.
    pub factor: f64,
}

impl ScriptedEvent for CapacityStep {
    fn ue(&self) -> Option<UeId> {
        Some(self.ue)
    }

    fn apply(&self, since_arm_ms: u64, effects: &mut Effects) -> bool {
        let on = within(since_arm_ms, self.at_ms, self.ms);
        if let (true, Some(e)) = (on, effects.ues.get_mut(self.ue.index())) {
            e.capacity_factor *= self.factor;
        }
        on
    }
}

/// A burst of other users: they take `share` of the cell's RBs (rounded to whole RBs)
/// before the scheduler shares the rest, after any HARQ retransmissions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Burst {
    /// Start, ms since arming.
    pub at_ms: u64,
    /// Length, ms.
    pub ms: u64,
    /// Share of the cell's RBs, 0..=1.
    pub share: f64,
}

impl ScriptedEvent for Burst {
    fn ue(&self) -> Option<UeId> {
        None
    }

    fn apply(&self, since_arm_ms: u64, effects: &mut Effects) -> bool {
        let on = within(since_arm_ms, self.at_ms, Some(self.ms));
        if on {
            effects.burst_share = effects.burst_share.max(self.share);
        }
        on
    }
}

/// Whether a parameter must be given.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Need {
    /// Always.
    Required,
    /// No: its default applies (or, without one, the event's documented behaviour).
    Optional,
    /// Exactly one of the kind's `one-of` parameters.
    OneOf,
}

/// One parameter of an event kind.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct EventParam {
    /// Its key.
    pub name: &'static str,
    /// Its type and range.
    #[serde(flatten)]
    pub kind: ParamType,
    /// Whether it must be given.
    pub need: Need,
    /// Its value when not given, if it has one.
    pub default: Option<ParamDefault>,
    /// What it means, with its unit.
    pub doc: &'static str,
}

/// The parameters of an event, checked, defaults filled in: what a constructor receives.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EventParams {
    values: BTreeMap<&'static str, ParamValue>,
}

impl EventParams {
    /// The integer `name`, if given or defaulted (negative values do not occur: every
    /// integer parameter's range starts at 0 or above).
    pub fn integer(&self, name: &str) -> Option<u64> {
        match self.values.get(name) {
            Some(ParamValue::Integer(i)) => u64::try_from(*i).ok(),
            _ => None,
        }
    }

    /// The number `name`, if given or defaulted.
    pub fn real(&self, name: &str) -> Option<f64> {
        match self.values.get(name) {
            Some(ParamValue::Real(x)) => Some(*x),
            _ => None,
        }
    }
}

/// One kind of event: its name, parameters and constructor.
#[derive(Serialize)]
pub struct EventKind {
    /// Its name (`kind` in the config, the text form's prefix).
    pub name: &'static str,
    /// What it does.
    pub summary: &'static str,
    /// Its parameters.
    pub params: &'static [EventParam],
    /// Builds it from checked parameters.
    #[serde(skip)]
    pub build: fn(&EventParams) -> Box<dyn ScriptedEvent + Send>,
}

const UE_PARAM: EventParam = EventParam {
    name: "ue",
    kind: ParamType::Integer { min: 0, max: 1023 },
    need: Need::Optional,
    default: Some(ParamDefault::Integer(0)),
    doc: "the UE it acts on",
};

const fn ms_param(name: &'static str, need: Need, doc: &'static str) -> EventParam {
    EventParam { name, kind: ParamType::Integer { min: 0, max: MAX_MS }, need, default: None, doc }
}

/// A checked integer parameter (present: the kind requires it or gives it a default).
fn int(p: &EventParams, name: &str) -> u64 {
    p.integer(name).unwrap_or(0)
}

fn ue_of(p: &EventParams) -> UeId {
    // Checked 0..=1023.
    UeId(int(p, "ue") as u16)
}

/// Every event kind: one entry per type.
pub static EVENTS: &[EventKind] = &[
    EventKind {
        name: "drop",
        summary: "drops one downlink packet of the UE (per arming): at a time, the N-th packet, the segment \
                  carrying a byte of its TCP flow, or the segment that brings its flow's bytes in flight to N",
        params: &[
            UE_PARAM,
            ms_param("at_ms", Need::OneOf, "the first packet taken in at or after this time, ms since arming"),
            EventParam {
                name: "packet",
                kind: ParamType::Integer { min: 1, max: i64::MAX },
                need: Need::OneOf,
                default: None,
                doc: "the N-th downlink packet of the UE since arming (1-based)",
            },
            EventParam {
                name: "seq_byte",
                kind: ParamType::Integer { min: 0, max: i64::MAX },
                need: Need::OneOf,
                default: None,
                doc: "the first TCP segment carrying this byte of its flow (0: the flow's first payload byte)",
            },
            EventParam {
                name: "in_flight_bytes",
                kind: ParamType::Integer { min: 1, max: i64::MAX },
                need: Need::OneOf,
                default: None,
                doc: "the first TCP segment after which its flow has this many bytes in flight (highest sequence \
                      sent toward the UE minus highest ACK from it), bytes",
            },
        ],
        build: |p| {
            let trigger = if let Some(at) = p.integer("at_ms") {
                DropTrigger::AtMs(at)
            } else if let Some(n) = p.integer("packet") {
                DropTrigger::Packet(n)
            } else if let Some(byte) = p.integer("seq_byte") {
                DropTrigger::SeqByte(byte)
            } else {
                DropTrigger::InFlightBytes(int(p, "in_flight_bytes"))
            };
            Box::new(Drop { ue: ue_of(p), trigger })
        },
    },
    EventKind {
        name: "outage",
        summary: "the UE's link carries nothing for ms from at_ms; its data waits at the base station and goes \
                  out when the outage ends (as a stall)",
        params: &[
            UE_PARAM,
            ms_param("at_ms", Need::Required, "start, ms since arming"),
            ms_param("ms", Need::Required, "length, ms"),
        ],
        build: |p| Box::new(Outage { ue: ue_of(p), at_ms: int(p, "at_ms"), ms: int(p, "ms") }),
    },
    EventKind {
        name: "capacity",
        summary: "the UE's capacity times factor from at_ms, for ms (default: until the next arming)",
        params: &[
            UE_PARAM,
            ms_param("at_ms", Need::Required, "start, ms since arming"),
            ms_param("ms", Need::Optional, "length, ms (default: until the next arming)"),
            EventParam {
                name: "factor",
                kind: ParamType::Real { min: 0.01, max: 100.0 },
                need: Need::Required,
                default: None,
                doc: "scale of the capacity (TBS per RB closed loop, bytes per subframe open loop)",
            },
        ],
        build: |p| {
            Box::new(CapacityStep {
                ue: ue_of(p),
                at_ms: int(p, "at_ms"),
                ms: p.integer("ms"),
                factor: p.real("factor").unwrap_or(1.0),
            })
        },
    },
    EventKind {
        name: "burst",
        summary: "other users take share of the cell's RBs from at_ms for ms, before the scheduler shares the \
                  rest (closed loop only: an open-loop link has no cell to share)",
        params: &[
            ms_param("at_ms", Need::Required, "start, ms since arming"),
            ms_param("ms", Need::Required, "length, ms"),
            EventParam {
                name: "share",
                kind: ParamType::Real { min: 0.0, max: 1.0 },
                need: Need::Required,
                default: None,
                doc: "share of the cell's RBs the other users take, 0..=1",
            },
        ],
        build: |p| Box::new(Burst { at_ms: int(p, "at_ms"), ms: int(p, "ms"), share: p.real("share").unwrap_or(0.0) }),
    },
];

/// The kind called `name`.
pub fn kind(name: &str) -> Option<&'static EventKind> {
    EVENTS.iter().find(|k| k.name == name)
}

/// "a" or "an" before `word`.
fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}

fn kind_names() -> String {
    EVENTS.iter().map(|k| k.name).collect::<Vec<_>>().join(", ")
}

/// Checks an event (a kind, known parameters within range, the required ones given,
/// exactly one of the `one-of` ones); the error names the key relative to the event
/// (`kind`, `at_ms`).
pub fn check(choice: &PolicyChoice) -> Result<EventParams, ConfigError> {
    let kind = kind(&choice.kind).ok_or_else(|| {
        let what = if choice.kind.is_empty() { "missing".to_string() } else { format!("unknown `{}`", choice.kind) };
        ConfigError::new("kind", format!("{what}: an event's kind is one of {}", kind_names()))
    })?;
    if let Some(key) = choice.params.keys().find(|k| !kind.params.iter().any(|p| p.name == k.as_str())) {
        let known = kind.params.iter().map(|p| p.name).collect::<Vec<_>>().join(", ");
        return Err(ConfigError::new(
            key.as_str(),
            format!("unknown parameter of a {} event (its parameters: {known})", kind.name),
        ));
    }
    let mut values = BTreeMap::new();
    for param in kind.params {
        match (choice.params.get(param.name), param.default) {
            (Some(v), _) => {
                values
                    .insert(param.name, param.kind.check(v).map_err(|problem| ConfigError::new(param.name, problem))?);
            }
            (None, Some(default)) => {
                let value = match default {
                    ParamDefault::Integer(i) => ParamValue::Integer(i),
                    ParamDefault::Real(x) => ParamValue::Real(x),
                    ParamDefault::Bool(b) => ParamValue::Bool(b),
                };
                values.insert(param.name, value);
            }
            (None, None) if param.need == Need::Required => {
                return Err(ConfigError::new(
                    param.name,
                    format!("{} {} event needs it: {}", article(kind.name), kind.name, param.doc),
                ));
            }
            (None, None) => {}
        }
    }
    let one_of: Vec<&str> = kind.params.iter().filter(|p| p.need == Need::OneOf).map(|p| p.name).collect();
    if !one_of.is_empty() {
        let given: Vec<&str> = one_of.iter().copied().filter(|n| choice.params.contains_key(*n)).collect();
        match given.as_slice() {
            [_] => {}
            [] => {
                return Err(ConfigError::new(
                    "kind",
                    format!("a {} event needs exactly one of {}, got none", kind.name, one_of.join(", ")),
                ))
            }
            [_, second, ..] => {
                return Err(ConfigError::new(
                    *second,
                    format!(
                        "a {} event takes exactly one of {}, got {}",
                        kind.name,
                        one_of.join(", "),
                        given.join(", ")
                    ),
                ))
            }
        }
    }
    Ok(EventParams { values })
}

/// Builds the event `choice` describes, after [`check`].
pub fn build(choice: &PolicyChoice) -> Result<Box<dyn ScriptedEvent + Send>, ConfigError> {
    let params = check(choice)?;
    let kind = kind(&choice.kind).ok_or_else(|| ConfigError::new("kind", "unknown event kind"))?;
    Ok((kind.build)(&params))
}

/// Parses the command-line form `KIND:PARAM=VALUE[,PARAM=VALUE...]` (e.g.
/// `outage:at_ms=3000,ms=500`) into the config's table; [`check`] judges it.
pub fn parse(text: &str) -> Result<PolicyChoice, String> {
    let (kind, params) = match text.split_once(':') {
        Some((kind, params)) => (kind.trim(), params.trim()),
        None => (text.trim(), ""),
    };
    if kind.is_empty() || kind.contains(',') || kind.contains('=') {
        return Err(format!("`{text}` is not KIND:PARAM=VALUE[,PARAM=VALUE...] (KIND one of {})", kind_names()));
    }
    let joined = if params.is_empty() { kind.to_string() } else { format!("{kind},{params}") };
    let choice = PolicyChoice::parse(&joined)?;
    if choice.params.contains_key("") {
        return Err(format!("a parameter without a name (in `{text}`)"));
    }
    Ok(choice)
}

/// What happened to one event over the run: `counters.json`'s `engine.events`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct EventTally {
    /// Its kind.
    pub kind: &'static str,
    /// The UE it acts on (`None`: the cell).
    pub ue: Option<u16>,
    /// Times the script was armed (1 + the seeks).
    pub armings: u64,
    /// Subframes it was in force (timed events).
    pub active_ms: u64,
    /// Packets it dropped.
    pub dropped_packets: u64,
    /// Their bytes.
    pub dropped_bytes: u64,
    /// The first [`MAX_DROP_NOTES`] drops.
    pub drops: Vec<DropNote>,
}

/// One scripted drop.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct DropNote {
    /// Subframe that took the packet in, ms since time zero.
    pub t_ms: u64,
    /// The same, ms since the arming.
    pub since_arm_ms: u64,
    /// Its UE's downlink packets since the arming, this one included.
    pub nth: u64,
    /// IP packet length, bytes.
    pub bytes: u32,
    /// Its first payload byte in its TCP flow (TCP only).
    pub first_byte: Option<u64>,
    /// Its flow's bytes in flight with it sent (TCP only).
    pub in_flight_bytes: Option<u64>,
}

/// An event with the script's state of it.
#[derive(Debug)]
struct Armed {
    event: Box<dyn ScriptedEvent + Send>,
    /// It dropped its packet since the last arming.
    fired: bool,
    tally: EventTally,
}

/// A config's events, armed at a subframe: asked each subframe for the timed effects, and
/// for each downlink packet whether a drop takes it.
#[derive(Debug, Default)]
pub struct Script {
    events: Vec<Armed>,
    armed_at_ms: u64,
    /// Per UE: downlink packets since arming.
    seen: Vec<u64>,
    effects: Effects,
    has_drops: bool,
}

impl Script {
    /// A script of `events` (kind name, event) for a cell of `n_ues` UEs, armed at 0.
    pub fn new(events: Vec<(&'static str, Box<dyn ScriptedEvent + Send>)>, n_ues: usize) -> Script {
        let has_drops = events.iter().any(|(_, e)| e.is_drop());
        let events = events
            .into_iter()
            .map(|(kind, event)| Armed {
                tally: EventTally { kind, ue: event.ue().map(|u| u.0), armings: 1, ..EventTally::default() },
                event,
                fired: false,
            })
            .collect();
        Script {
            events,
            armed_at_ms: 0,
            seen: vec![0; n_ues],
            effects: Effects { ues: vec![UeEffect::default(); n_ues], burst_share: 0.0 },
            has_drops,
        }
    }

    /// Whether it holds no event.
    pub fn is_empty(&self) -> bool {
        self.events.is_empty()
    }

    /// Whether some event drops packets.
    pub fn has_drops(&self) -> bool {
        self.has_drops
    }

    /// Arms the script at subframe `t_ms`: `at_ms` counts from there, the drops fire anew.
    pub fn arm(&mut self, t_ms: u64) {
        self.armed_at_ms = t_ms;
        self.seen.fill(0);
        for a in &mut self.events {
            a.fired = false;
            a.tally.armings += 1;
        }
    }

    /// The subframe the script was last armed at.
    pub fn armed_at_ms(&self) -> u64 {
        self.armed_at_ms
    }

    /// The timed events' effects in subframe `t_ms` (called once per subframe run).
    pub fn effects(&mut self, t_ms: u64) -> &Effects {
        let since = t_ms.saturating_sub(self.armed_at_ms);
        self.effects.ues.fill(UeEffect::default());
        self.effects.burst_share = 0.0;
        for a in &mut self.events {
            if a.event.apply(since, &mut self.effects) {
                a.tally.active_ms += 1;
            }
        }
        &self.effects
    }

    /// Whether a drop event takes UE `ue`'s downlink `packet`, taken in at subframe `t_ms`
    /// (every downlink packet of the UE must pass here, in order: it is counted).
    pub fn drops(&mut self, ue: UeId, t_ms: u64, packet: &DownlinkPacket) -> bool {
        let Some(seen) = self.seen.get_mut(ue.index()) else { return false };
        *seen += 1;
        let nth = *seen;
        let since = t_ms.saturating_sub(self.armed_at_ms);
        let Some(a) =
            self.events.iter_mut().find(|a| !a.fired && a.event.ue() == Some(ue) && a.event.drops(since, nth, packet))
        else {
            return false;
        };
        a.fired = true;
        a.tally.dropped_packets += 1;
        a.tally.dropped_bytes += u64::from(packet.len_bytes);
        if a.tally.drops.len() < MAX_DROP_NOTES {
            a.tally.drops.push(DropNote {
                t_ms,
                since_arm_ms: since,
                nth,
                bytes: packet.len_bytes,
                first_byte: packet.tcp.map(|s| s.first_byte),
                in_flight_bytes: packet.tcp.map(|s| s.in_flight_bytes),
            });
        }
        true
    }

    /// Every event's tally, in config order.
    pub fn tallies(&self) -> Vec<EventTally> {
        self.events.iter().map(|a| a.tally.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(text: &str) -> Box<dyn ScriptedEvent + Send> {
        build(&parse(text).expect("parses")).expect("valid")
    }

    fn script(texts: &[&str], n_ues: usize) -> Script {
        let events = texts
            .iter()
            .map(|t| (kind(parse(t).expect("parses").kind.as_str()).expect("kind").name, event(t)))
            .collect();
        Script::new(events, n_ues)
    }

    fn tcp(first_byte: u64, payload_bytes: u32, in_flight_bytes: u64) -> DownlinkPacket {
        DownlinkPacket {
            len_bytes: payload_bytes + 52,
            tcp: Some(TcpSegment { first_byte, payload_bytes, in_flight_bytes }),
        }
    }

    #[test]
    fn the_text_form_is_the_table() {
        let c = parse("capacity:at_ms=2000,factor=0.5,ms=1000").expect("parses");
        assert_eq!(c.kind, "capacity");
        assert_eq!(c.params["factor"], ParamValue::Real(0.5));
        assert_eq!(c.params["at_ms"], ParamValue::Integer(2000));
        assert!(parse(":at_ms=1").is_err());
        assert!(parse("outage,at_ms=1").is_err(), "the kind ends with a colon");
        assert!(parse("outage:at_ms").is_err());
        assert!(parse("outage:at_ms=1,at_ms=2").is_err());
        assert!(parse("drop:=5").is_err_and(|e| e.contains("without a name")));
    }

    #[test]
    fn errors_name_the_key() {
        for (text, field, needle) in [
            ("nope:at_ms=1", "kind", "one of drop, outage, capacity, burst"),
            ("outage:at_ms=1", "ms", "needs it"),
            ("outage:at_ms=-1,ms=5", "at_ms", "0..="),
            ("outage:at_ms=1,ms=5,share=0.5", "share", "unknown parameter"),
            ("burst:at_ms=1,ms=5,share=1.5", "share", "0..=1"),
            ("capacity:at_ms=1,factor=0", "factor", "0.01..="),
            ("drop", "kind", "exactly one of at_ms, packet, seq_byte, in_flight_bytes"),
            ("drop:at_ms=5,packet=3", "packet", "exactly one"),
            ("drop:packet=0", "packet", "1..="),
            ("drop:ue=2000,packet=1", "ue", "0..=1023"),
        ] {
            let e = check(&parse(text).expect(text)).expect_err(text);
            assert_eq!(e.field, field, "{text}: {e}");
            assert!(e.problem.contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn timed_events_act_relative_to_the_arming() {
        let mut s =
            script(&["outage:at_ms=100,ms=50", "capacity:ue=1,at_ms=10,factor=0.5", "burst:at_ms=0,ms=5,share=0.6"], 2);
        let fx = s.effects(0).clone();
        assert_eq!(fx.burst_share, 0.6);
        assert!(!fx.ues[0].outage);
        assert_eq!(fx.ues[1].capacity_factor, 1.0);
        assert!(s.effects(100).ues[0].outage);
        assert!(s.effects(149).ues[0].outage);
        assert!(!s.effects(150).ues[0].outage);
        assert_eq!(s.effects(5).burst_share, 0.0);
        assert_eq!(s.effects(1_000_000).ues[1].capacity_factor, 0.5, "no ms: on until the next arming");
        s.arm(2000);
        assert_eq!(s.effects(2005).ues[1].capacity_factor, 1.0, "re-armed: at_ms counts from 2000");
        assert!(s.effects(2120).ues[0].outage);
        let tallies = s.tallies();
        assert_eq!(tallies[0].armings, 2);
        assert_eq!(tallies[0].active_ms, 3);
    }

    #[test]
    fn each_drop_fires_once_per_arming() {
        let mut s = script(&["drop:packet=3", "drop:at_ms=50", "drop:ue=1,in_flight_bytes=300000"], 2);
        let p = DownlinkPacket { len_bytes: 100, tcp: None };
        let ue0 = UeId(0);
        assert!(!s.drops(ue0, 1, &p));
        assert!(!s.drops(ue0, 2, &p));
        assert!(s.drops(ue0, 3, &p), "the third packet");
        assert!(!s.drops(ue0, 4, &p));
        assert!(s.drops(ue0, 50, &p), "the first at or after 50 ms");
        assert!(!s.drops(ue0, 51, &p), "once");
        let ue1 = UeId(1);
        assert!(!s.drops(ue1, 60, &tcp(0, 1448, 299_999)));
        assert!(!s.drops(ue1, 60, &tcp(0, 0, 400_000)), "a segment without payload is no trigger");
        assert!(s.drops(ue1, 60, &tcp(300_000, 1448, 301_448)));
        s.arm(100);
        assert!(!s.drops(ue0, 120, &p));
        assert!(!s.drops(ue0, 121, &p));
        assert!(s.drops(ue0, 122, &p), "counted anew after the arming");
        assert!(!s.drops(ue0, 149, &p));
        assert!(s.drops(ue0, 150, &p));
        let t = s.tallies();
        assert_eq!((t[0].dropped_packets, t[0].dropped_bytes), (2, 200));
        assert_eq!(t[0].drops[1].since_arm_ms, 22);
        assert_eq!(t[2].drops[0].in_flight_bytes, Some(301_448));
    }

    #[test]
    fn a_seq_byte_drop_takes_the_segment_carrying_it() {
        let mut s = script(&["drop:seq_byte=3000"], 1);
        assert!(!s.drops(UeId(0), 1, &tcp(0, 1448, 1448)));
        assert!(!s.drops(UeId(0), 1, &tcp(1448, 1448, 2896)));
        assert!(s.drops(UeId(0), 1, &tcp(2896, 1448, 4344)));
        assert!(!s.drops(UeId(0), 2, &tcp(2896, 1448, 4344)), "its retransmission passes");
    }

    #[test]
    fn every_kind_builds_from_its_documented_minimum() {
        for text in ["drop:at_ms=0", "outage:at_ms=0,ms=1", "capacity:at_ms=0,factor=2", "burst:at_ms=0,ms=1,share=0"] {
            let choice = parse(text).expect(text);
            assert!(kind(&choice.kind).is_some());
            build(&choice).expect(text);
        }
        let json = serde_json::to_string(EVENTS).expect("serialises");
        assert!(json.contains("\"need\":\"one-of\""), "{json}");
    }
}
