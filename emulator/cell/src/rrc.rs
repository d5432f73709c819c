//! The optional RRC model: a UE inactive for `tail_ms` goes idle; new downlink data (or
//! uplink activity the data plane reports) then starts a promotion of `promotion_ms`,
//! during which nothing is scheduled for it. When the model is off, UEs are always
//! connected.

use crate::config::RrcConfig;
use serde::Serialize;

/// A UE's radio resource control state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RrcState {
    /// RRC_IDLE: nothing can be scheduled; data waits for a promotion.
    Idle,
    /// Being promoted to connected: nothing is scheduled yet.
    Promoting,
    /// RRC_CONNECTED: scheduled normally.
    Connected,
}

/// One UE's RRC state machine.
#[derive(Debug)]
pub(crate) struct Rrc {
    config: RrcConfig,
    state: RrcState,
    /// While promoting: the subframe the UE becomes connected in.
    connected_at_ms: u64,
    /// While connected: the last subframe with activity.
    last_activity_ms: u64,
}

impl Rrc {
    /// A UE that starts idle when the model is on, connected otherwise.
    pub fn new(config: RrcConfig) -> Rrc {
        let state = if config.enabled { RrcState::Idle } else { RrcState::Connected };
        Rrc { config, state, connected_at_ms: 0, last_activity_ms: 0 }
    }

    pub fn state(&self) -> RrcState {
        self.state
    }

    /// Advances to subframe `t_ms`, given whether the UE has activity (data held, a HARQ
    /// retransmission pending, or reported uplink traffic). Returns the state in force.
    pub fn step(&mut self, t_ms: u64, active: bool) -> RrcState {
        if !self.config.enabled {
            return RrcState::Connected;
        }
        if self.state == RrcState::Idle && active {
            self.state = RrcState::Promoting;
            self.connected_at_ms = t_ms + u64::from(self.config.promotion_ms);
        }
        if self.state == RrcState::Promoting && t_ms >= self.connected_at_ms {
            self.state = RrcState::Connected;
            self.last_activity_ms = t_ms;
        }
        if self.state == RrcState::Connected {
            if active {
                self.last_activity_ms = t_ms;
            } else if t_ms - self.last_activity_ms >= u64::from(self.config.tail_ms) {
                self.state = RrcState::Idle;
            }
        }
        self.state
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promotion_and_tail() {
        let mut rrc = Rrc::new(RrcConfig { enabled: true, tail_ms: 100, promotion_ms: 435 });
        assert_eq!(rrc.step(0, false), RrcState::Idle);
        assert_eq!(rrc.step(10, true), RrcState::Promoting);
        assert_eq!(rrc.step(444, true), RrcState::Promoting);
        assert_eq!(rrc.step(445, true), RrcState::Connected);
        assert_eq!(rrc.step(500, false), RrcState::Connected);
        assert_eq!(rrc.step(544, false), RrcState::Connected);
        assert_eq!(rrc.step(545, false), RrcState::Idle);
        let mut off = Rrc::new(RrcConfig::default());
        assert_eq!(off.step(0, false), RrcState::Connected);
        assert_eq!(off.state(), RrcState::Connected);
    }
}
