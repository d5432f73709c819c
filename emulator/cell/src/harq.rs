//! HARQ: synchronous retransmission of failed transport blocks, and the failure draws.
//!
//! A UE receives at most one transport block per subframe (one codeword). A block that
//! fails its CRC in subframe k is retransmitted in subframe k + `rtt_ms` (8 ms: LTE FDD's
//! synchronous HARQ round trip) with the same size, MCS and number of RBs; those RBs are
//! reserved before anything else is scheduled, and the UE gets no new data in that
//! subframe, as with a single codeword on a real cell. Because a subframe's retransmissions
//! are a subset of what was allocated `rtt_ms` earlier, the reserved RBs never exceed N_rb.
//! After `max_tx` transmissions HARQ gives up and RLC takes over (`crate::rlc`).
//!
//! HARQ process numbers follow from time (k mod `rtt_ms`), so a retransmission keeps its
//! process; the new-data indicator toggles per process on each new block and the
//! redundancy version cycles 0, 2, 3, 1.

use crate::conditions::FirstTx;
use crate::config::HarqConfig;
use crate::policy::{Param, ParamDefault, ParamType, Policy, Registry};
use crate::rlc::TbPayload;

/// Which transmission of a transport block is being drawn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transmission {
    /// The first transmission of a block of new bytes only.
    New,
    /// The first transmission of a block that carries RLC retransmissions: its bytes have
    /// just failed every HARQ transmission, so its channel is likely still bad.
    RlcRetx,
    /// A HARQ retransmission (second or later transmission) of a block.
    HarqRetx,
}

/// Gives the probability that a transmission fails its CRC; the cell draws the outcome
/// with its seeded generator.
pub trait LossModel {
    /// Failure probability (0..=1) of `transmission`, given what the conditions say about
    /// first transmissions in this subframe.
    fn failure_probability(&self, transmission: Transmission, first_tx: FirstTx) -> f64;
}

/// The default loss model. A first transmission of new bytes fails as the trace says
/// (`harq_fail` column), else with the trace's `bler`, else with [`CorrelatedLoss::bler`].
/// Any transmission following a failure (a HARQ retransmission, or the first transmission
/// of RLC retransmissions unless a `harq_fail` column decides it) fails with
/// [`CorrelatedLoss::retx_bler`]. Failures cluster on a real link (a fade outlasts several
/// HARQ round trips); independent draws at the first-transmission BLER would make the
/// residual loss orders of magnitude lower than the seeds measured.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CorrelatedLoss {
    /// Failure probability of a first transmission when the trace says nothing, 0..=1.
    pub bler: f64,
    /// Failure probability of a transmission following a failure, 0..=1.
    pub retx_bler: f64,
}

impl LossModel for CorrelatedLoss {
    fn failure_probability(&self, transmission: Transmission, first_tx: FirstTx) -> f64 {
        match (transmission, first_tx) {
            (Transmission::HarqRetx, _) => self.retx_bler,
            // A recorded outcome is the real channel, correlation included.
            (_, FirstTx::Fails(fails)) => f64::from(u8::from(fails)),
            (Transmission::RlcRetx, _) => self.retx_bler,
            (Transmission::New, FirstTx::Bler(bler)) => f64::from(bler),
            (Transmission::New, FirstTx::Unspecified) => self.bler,
        }
    }
}

/// Every transmission fails with the same probability, first transmissions and
/// retransmissions alike, whatever the trace's `harq_fail` and `bler` columns say: a
/// channel without memory (0: no HARQ failure at all, every RB decision the scheduler's).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FixedLoss {
    /// Failure probability of every transmission, 0..=1.
    pub probability: f64,
}

impl LossModel for FixedLoss {
    fn failure_probability(&self, _: Transmission, _: FirstTx) -> f64 {
        self.probability
    }
}

/// Every loss model, by name: the `cell.loss` choice (`crate::policy`). A new model is a
/// type implementing [`LossModel`] plus one entry here; the constructor sees the HARQ
/// configuration.
pub static POLICIES: Registry<dyn LossModel + Send, HarqConfig> = Registry {
    category: "loss",
    config_key: "cell.loss",
    default: "correlated",
    summary: "the probability that a transport block's transmission fails its CRC",
    policies: &[
        Policy {
            name: "correlated",
            summary: "first transmissions as the trace says (harq_fail, else bler), else at harq.bler; every \
                      transmission after a failure at harq.retx_bler (the residual-loss calibration)",
            params: &[],
            build: |_, harq| Box::new(CorrelatedLoss { bler: harq.bler, retx_bler: harq.retx_bler }),
        },
        Policy {
            name: "fixed",
            summary: "every transmission fails with `probability`, whatever the trace says",
            params: &[Param {
                name: "probability",
                kind: ParamType::Real { min: 0.0, max: 1.0 },
                default: ParamDefault::Real(0.0),
                doc: "failure probability of every transmission",
            }],
            build: |params, _| Box::new(FixedLoss { probability: params.real("probability") }),
        },
    ],
    legacy: None,
};

/// Redundancy versions of successive transmissions (36.321 §5.3.2.2 order).
const RV_SEQUENCE: [u8; 4] = [0, 2, 3, 1];

/// Largest HARQ round trip the process table holds, ms.
const MAX_PROCESSES: usize = 16;

/// A transport block waiting in its HARQ process for a retransmission.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PendingTb {
    /// Subframe of the retransmission, ms.
    pub due_ms: u64,
    /// Transmissions so far (1 after the first).
    pub tx_count: u8,
    /// RBs the block occupies.
    pub n_rbs: u8,
    /// Transport block size, bits.
    pub tbs_bits: u32,
    /// MCS of the first transmission.
    pub mcs: u8,
    /// Spatial layers.
    pub layers: u8,
    /// New-data indicator of the block.
    pub ndi: bool,
    /// What the block carries.
    pub payload: TbPayload,
}

impl PendingTb {
    /// Redundancy version of the block's next transmission.
    pub fn next_rv(&self) -> u8 {
        RV_SEQUENCE[usize::from(self.tx_count) % RV_SEQUENCE.len()]
    }
}

/// The HARQ processes of one UE.
#[derive(Debug)]
pub(crate) struct HarqEntity {
    rtt_ms: u64,
    processes: [Option<PendingTb>; MAX_PROCESSES],
    ndi: [bool; MAX_PROCESSES],
}

impl HarqEntity {
    /// Processes for a round trip of `rtt_ms` (1..=16).
    pub fn new(rtt_ms: u8) -> HarqEntity {
        HarqEntity {
            rtt_ms: u64::from(rtt_ms.clamp(1, MAX_PROCESSES as u8)),
            processes: [None; MAX_PROCESSES],
            ndi: [false; MAX_PROCESSES],
        }
    }

    /// The HARQ process of subframe `t_ms`.
    pub fn process_id(&self, t_ms: u64) -> u8 {
        // < rtt_ms ≤ 16.
        (t_ms % self.rtt_ms) as u8
    }

    /// Takes the block due for retransmission in subframe `t_ms`, if any. (If the caller
    /// skipped the subframe a block was due in, it comes one round trip later.)
    pub fn take_due(&mut self, t_ms: u64) -> Option<PendingTb> {
        let process = usize::from(self.process_id(t_ms));
        match self.processes[process] {
            Some(tb) if tb.due_ms <= t_ms => self.processes[process].take(),
            _ => None,
        }
    }

    /// Parks `tb`, which failed in subframe `t_ms`, for its retransmission one round
    /// trip later.
    pub fn park(&mut self, t_ms: u64, tb: PendingTb) {
        let process = usize::from(self.process_id(t_ms));
        self.processes[process] = Some(PendingTb { due_ms: t_ms + self.rtt_ms, ..tb });
    }

    /// The new-data indicator for a new block in subframe `t_ms` (toggled per process).
    pub fn next_ndi(&mut self, t_ms: u64) -> bool {
        let process = usize::from(self.process_id(t_ms));
        self.ndi[process] = !self.ndi[process];
        self.ndi[process]
    }

    /// Whether any block waits for a retransmission.
    pub fn busy(&self) -> bool {
        self.processes.iter().any(Option::is_some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loss_model_sources() {
        let model = CorrelatedLoss { bler: 0.1, retx_bler: 0.4 };
        assert_eq!(model.failure_probability(Transmission::New, FirstTx::Unspecified), 0.1);
        assert_eq!(model.failure_probability(Transmission::New, FirstTx::Bler(0.25)), 0.25);
        assert_eq!(model.failure_probability(Transmission::New, FirstTx::Fails(true)), 1.0);
        assert_eq!(model.failure_probability(Transmission::RlcRetx, FirstTx::Fails(false)), 0.0);
        assert_eq!(model.failure_probability(Transmission::RlcRetx, FirstTx::Bler(0.25)), 0.4);
        assert_eq!(model.failure_probability(Transmission::HarqRetx, FirstTx::Fails(false)), 0.4);
    }

    #[test]
    fn retransmission_one_round_trip_later() {
        let mut harq = HarqEntity::new(8);
        let tb = PendingTb {
            due_ms: 0,
            tx_count: 1,
            n_rbs: 5,
            tbs_bits: 800,
            mcs: 10,
            layers: 1,
            ndi: true,
            payload: TbPayload::default(),
        };
        harq.park(3, tb);
        assert!(harq.busy());
        for t in 4..11 {
            assert_eq!(harq.take_due(t), None);
        }
        assert_eq!(harq.take_due(11).map(|tb| (tb.due_ms, tb.next_rv())), Some((11, 2)));
        assert!(!harq.busy());
        assert!(harq.next_ndi(5));
        assert!(!harq.next_ndi(13));
    }
}
