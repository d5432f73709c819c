//! Downlink schedulers: who gets the subframe's free resource blocks.
//!
//! A scheduler sees the RBs left after HARQ retransmissions have taken theirs, the other
//! users' demand B_k (the trace's `other_rbs`) and how many they are, and each emulated
//! UE's demand D_k in RBs at its own MCS. It grants each UE at most its demand and returns
//! how many RBs the other users get. Every policy is deterministic.

use crate::config::CellConfig;
use crate::policy::{Policy, Registry};

/// One subframe's scheduling request.
#[derive(Clone, Copy, Debug)]
pub struct Request<'a> {
    /// RBs free after HARQ reservations, 0..=N_rb.
    pub free_rbs: u8,
    /// RBs the other users demand, B_k.
    pub other_demand_rbs: u8,
    /// Active other users (≥ 1 when `other_demand_rbs` > 0, else 0).
    pub other_users: u8,
    /// Each emulated UE's demand D_k, RBs (0: nothing to send, or not schedulable now).
    pub demand_rbs: &'a [u8],
}

/// A downlink scheduling policy.
pub trait Scheduler {
    /// Fills `grants_rbs` (as long as `request.demand_rbs`) with each UE's RBs, each at
    /// most its demand, and returns the other users' RBs (at most their demand); the total
    /// is at most `request.free_rbs`.
    fn allocate(&mut self, request: &Request<'_>, grants_rbs: &mut [u8]) -> u8;
}

/// Every scheduler, by name: the `cell.scheduler` choice (`crate::policy`). A new
/// scheduler is a type implementing [`Scheduler`] plus one entry here.
pub static POLICIES: Registry<dyn Scheduler + Send, CellConfig> = Registry {
    category: "scheduler",
    config_key: "cell.scheduler",
    default: "proportional-fair",
    summary: "who gets each subframe's free resource blocks: the emulated UEs and the trace's other users",
    policies: &[
        Policy {
            name: "proportional-fair",
            summary: "everyone gets its demand when the cell has room, else max-min fair shares (the other \
                      users counting as `other_users` users)",
            params: &[],
            build: |_, _| Box::new(ProportionalFair::default()),
        },
        Policy {
            name: "background-first",
            summary: "the trace's other users get their whole demand; the emulated UEs share what they leave",
            params: &[],
            build: |_, _| Box::new(BackgroundFirst::default()),
        },
        Policy {
            name: "round-robin",
            summary: "the CLAW paper's simulator: users take turns, each granted its whole demand",
            params: &[],
            build: |_, _| Box::new(RoundRobin::default()),
        },
    ],
    legacy: None,
};

/// A party competing for RBs: an emulated UE, or the other users as one weighted group.
#[derive(Clone, Copy, Debug)]
struct Claimant {
    /// UE index; the other users' group comes after every UE.
    index: usize,
    demand: u32,
    weight: u32,
    grant: u32,
}

/// Weighted max-min (water-filling) sharing of RBs, integer-exact: claimants wanting no
/// more than their share get their demand; the rest split what remains in proportion to
/// their weights, the indivisible remainder going one RB each in an order that rotates
/// every call, so that no UE is favoured over time.
#[derive(Debug, Default)]
struct WaterFill {
    claimants: Vec<Claimant>,
    rotation: usize,
}

impl WaterFill {
    fn clear(&mut self) {
        self.claimants.clear();
    }

    fn add(&mut self, index: usize, demand: u8, weight: u8) {
        if demand > 0 && weight > 0 {
            self.claimants.push(Claimant { index, demand: demand.into(), weight: weight.into(), grant: 0 });
        }
    }

    /// Shares `capacity` RBs among the claimants added since `clear`.
    fn share(&mut self, capacity: u8) {
        let claimants = &mut self.claimants;
        // Ascending demand per unit of weight, ties by index (stable sort).
        claimants.sort_by(|a, b| {
            (u64::from(a.demand) * u64::from(b.weight)).cmp(&(u64::from(b.demand) * u64::from(a.weight)))
        });
        let mut remaining = u32::from(capacity);
        let mut weight_left: u32 = claimants.iter().map(|c| c.weight).sum();
        let mut satisfied = 0;
        for c in claimants.iter_mut() {
            // Demand within the equal share per weight of what remains: grant it whole.
            if u64::from(c.demand) * u64::from(weight_left) > u64::from(remaining) * u64::from(c.weight) {
                break;
            }
            c.grant = c.demand;
            remaining -= c.demand;
            weight_left -= c.weight;
            satisfied += 1;
        }
        let rest = &mut claimants[satisfied..];
        if rest.is_empty() {
            return;
        }
        // Each remaining claimant wants more than its share, so floor(share) + 1 ≤ demand.
        let pool = remaining;
        for c in rest.iter_mut() {
            c.grant = pool * c.weight / weight_left;
            remaining -= c.grant;
        }
        rest.sort_unstable_by_key(|c| c.index);
        let start = self.rotation % rest.len();
        for k in 0..remaining as usize {
            rest[(start + k) % rest.len()].grant += 1;
        }
        self.rotation = self.rotation.wrapping_add(1);
    }

    /// Copies the UE grants into `grants_rbs` and returns the grant of claimant `group`.
    fn grants(&self, grants_rbs: &mut [u8], group: usize) -> u8 {
        grants_rbs.fill(0);
        let mut group_grant = 0;
        for c in &self.claimants {
            // Grants never exceed a demand, which came from a u8.
            let grant = c.grant as u8;
            match grants_rbs.get_mut(c.index) {
                Some(slot) => *slot = grant,
                None if c.index == group => group_grant = grant,
                None => {}
            }
        }
        group_grant
    }
}

/// The default policy (`emulator-model.md`): when B_k + ΣD_k fits in the free RBs,
/// everyone gets its demand; otherwise the RBs are shared max-min fairly among the active
/// users, the other users counting as `other_users` users, so that a backlogged UE gets at
/// least ⌊N_rb / active users⌋ and the other users get the rest. Equal RB shares under
/// contention are what a proportional-fair scheduler converges to for users whose rates
/// are each averaged against themselves, hence the name.
#[derive(Debug, Default)]
pub struct ProportionalFair {
    fill: WaterFill,
}

impl Scheduler for ProportionalFair {
    fn allocate(&mut self, request: &Request<'_>, grants_rbs: &mut [u8]) -> u8 {
        let group = request.demand_rbs.len();
        self.fill.clear();
        for (index, &demand) in request.demand_rbs.iter().enumerate() {
            self.fill.add(index, demand, 1);
        }
        self.fill.add(group, request.other_demand_rbs, request.other_users.max(1));
        self.fill.share(request.free_rbs);
        self.fill.grants(grants_rbs, group)
    }
}

/// The other users first (Mahimahi-like open loop for them): they get their whole demand
/// B_k, and the emulated UEs share what they leave, max-min fairly among themselves.
#[derive(Debug, Default)]
pub struct BackgroundFirst {
    fill: WaterFill,
}

impl Scheduler for BackgroundFirst {
    fn allocate(&mut self, request: &Request<'_>, grants_rbs: &mut [u8]) -> u8 {
        let others = request.other_demand_rbs.min(request.free_rbs);
        self.fill.clear();
        for (index, &demand) in request.demand_rbs.iter().enumerate() {
            self.fill.add(index, demand, 1);
        }
        self.fill.share(request.free_rbs - others);
        self.fill.grants(grants_rbs, usize::MAX);
        others
    }
}

/// The CLAW paper's multi-user simulator: a round-robin scheduler in the time domain.
/// Users stand in a ring (the emulated UEs, then one place per active other user, who
/// split B_k evenly); each subframe starts where the previous one stopped and grants each
/// user in turn its whole demand until the RBs run out. A backlogged user thus takes the
/// whole free band for a subframe, and N equally backlogged users alternate.
#[derive(Debug, Default)]
pub struct RoundRobin {
    next: usize,
}

impl Scheduler for RoundRobin {
    fn allocate(&mut self, request: &Request<'_>, grants_rbs: &mut [u8]) -> u8 {
        grants_rbs.fill(0);
        let ues = request.demand_rbs.len();
        let others = usize::from(if request.other_demand_rbs > 0 { request.other_users.max(1) } else { 0 });
        let ring = ues + others;
        if ring == 0 {
            return 0;
        }
        let demand_of = |place: usize| -> u8 {
            if place < ues {
                request.demand_rbs[place]
            } else {
                // Other user j of `others` gets B/others, the first B mod others one more.
                let j = place - ues;
                let b = usize::from(request.other_demand_rbs);
                (b / others + usize::from(j < b % others)) as u8
            }
        };
        let start = self.next % ring;
        let mut remaining = request.free_rbs;
        let mut other_grant = 0u8;
        let mut last_served = None;
        for step in 0..ring {
            if remaining == 0 {
                break;
            }
            let place = (start + step) % ring;
            let grant = demand_of(place).min(remaining);
            if grant == 0 {
                continue;
            }
            remaining -= grant;
            last_served = Some(place);
            match grants_rbs.get_mut(place) {
                Some(slot) => *slot = grant,
                None => other_grant += grant,
            }
        }
        self.next = last_served.map_or(start, |place| place + 1);
        other_grant
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(scheduler: &mut dyn Scheduler, free: u8, b: u8, users: u8, demand: &[u8]) -> (u8, Vec<u8>) {
        let mut grants = vec![0; demand.len()];
        let request = Request { free_rbs: free, other_demand_rbs: b, other_users: users, demand_rbs: demand };
        let others = scheduler.allocate(&request, &mut grants);
        assert!(u32::from(others) + grants.iter().map(|&g| u32::from(g)).sum::<u32>() <= u32::from(free));
        assert!(others <= b);
        assert!(grants.iter().zip(demand).all(|(g, d)| g <= d));
        (others, grants)
    }

    #[test]
    fn proportional_fair_uncontended_gives_demands() {
        let (others, grants) = run(&mut ProportionalFair::default(), 50, 20, 3, &[10, 0, 20]);
        assert_eq!((others, grants), (20, vec![10, 0, 20]));
    }

    #[test]
    fn proportional_fair_contended_fair_shares() {
        let mut pf = ProportionalFair::default();
        // One saturated UE against one saturated other user: half each.
        assert_eq!(run(&mut pf, 50, 50, 1, &[50]), (25, vec![25]));
        // Against four other users: a fifth, the other users the rest.
        assert_eq!(run(&mut pf, 50, 50, 4, &[50]), (40, vec![10]));
        // A small demand is met whole; the saturated parties split the rest.
        let (others, grants) = run(&mut pf, 50, 50, 1, &[4, 50]);
        assert_eq!(grants[0], 4);
        assert_eq!(u32::from(others) + u32::from(grants[1]), 46);
        assert!(others.abs_diff(grants[1]) <= 1);
        // Other users wanting little leave the rest to the UE.
        assert_eq!(run(&mut pf, 50, 5, 1, &[50]), (5, vec![45]));
    }

    #[test]
    fn proportional_fair_remainder_rotates() {
        let mut pf = ProportionalFair::default();
        let mut totals = [0u32; 3];
        for _ in 0..300 {
            let (_, grants) = run(&mut pf, 50, 0, 0, &[50, 50, 50]);
            assert_eq!(grants.iter().map(|&g| u32::from(g)).sum::<u32>(), 50);
            for (total, g) in totals.iter_mut().zip(grants) {
                *total += u32::from(g);
            }
        }
        assert_eq!(totals, [5000, 5000, 5000]);
    }

    #[test]
    fn background_first_takes_only_the_leftover() {
        let mut bf = BackgroundFirst::default();
        assert_eq!(run(&mut bf, 50, 30, 5, &[50]), (30, vec![20]));
        assert_eq!(run(&mut bf, 50, 50, 1, &[50]), (50, vec![0]));
        assert_eq!(run(&mut bf, 40, 50, 1, &[50]), (40, vec![0]));
    }

    #[test]
    fn round_robin_takes_turns() {
        let mut rr = RoundRobin::default();
        assert_eq!(run(&mut rr, 50, 0, 0, &[50, 50, 50]).1, [50, 0, 0]);
        assert_eq!(run(&mut rr, 50, 0, 0, &[50, 50, 50]).1, [0, 50, 0]);
        assert_eq!(run(&mut rr, 50, 0, 0, &[10, 50, 50]).1, [0, 0, 50]);
        assert_eq!(run(&mut rr, 50, 0, 0, &[10, 50, 50]).1, [10, 40, 0]);
        // The other users take their turn too.
        assert_eq!(run(&mut rr, 50, 50, 1, &[0, 0, 50]), (0, vec![0, 0, 50]));
        assert_eq!(run(&mut rr, 50, 50, 1, &[0, 0, 50]), (50, vec![0, 0, 0]));
    }
}
