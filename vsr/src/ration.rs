//! A node's repair ration: every group on a node that wants repair in the same tick shares one
//! budget, so a node that comes back missing writes in all of its groups does not ask its peers
//! for everything at once (the article's "Twenty-five view changes": 3 new repair sessions per
//! tick, 8 in flight, picking up on the next tick where it stopped).
//!
//! A session is one group's repair from the tick it is admitted until the group no longer
//! needs repair (or stops being the replica that repairs: a primary in normal status never
//! does). Sans I/O like the replica: the node tells it which groups want repair, it answers
//! which may ask this tick.

use std::collections::BTreeSet;

/// Repair sessions admitted per tick (the article's figure).
pub const REPAIR_NEW_PER_TICK: usize = 3;
/// Repair sessions in flight at once on one node.
pub const REPAIR_IN_FLIGHT_MAX: usize = 8;

/// The repair budget of one node's groups.
#[derive(Clone, Debug)]
pub struct RepairRation {
    new_per_tick: usize,
    in_flight_max: usize,
    in_flight: BTreeSet<u128>,
    /// The last group admitted: the next tick's scan starts after it.
    cursor: Option<u128>,
    /// The most sessions ever in flight at once, and admitted in one tick.
    pub peak_in_flight: usize,
    pub peak_new: usize,
}

impl Default for RepairRation {
    fn default() -> Self {
        Self::new(REPAIR_NEW_PER_TICK, REPAIR_IN_FLIGHT_MAX)
    }
}

impl RepairRation {
    /// A ration admitting `new_per_tick` sessions a tick with at most `in_flight_max` open
    /// (`usize::MAX` for both: no ration).
    #[must_use]
    pub fn new(new_per_tick: usize, in_flight_max: usize) -> Self {
        assert!(
            new_per_tick >= 1 && in_flight_max >= 1,
            "a ration admits someone"
        );
        Self {
            new_per_tick,
            in_flight_max,
            in_flight: BTreeSet::new(),
            cursor: None,
            peak_in_flight: 0,
            peak_new: 0,
        }
    }

    /// This tick's decision. `wanting` holds every group on the node that needs repair now
    /// (any order; a group not in it has finished or stopped repairing and closes its session).
    /// Afterwards [`RepairRation::permits`] answers for each group.
    pub fn tick(&mut self, wanting: &BTreeSet<u128>) {
        self.in_flight.retain(|group| wanting.contains(group));
        let room = self
            .in_flight_max
            .saturating_sub(self.in_flight.len())
            .min(self.new_per_tick);
        let after = self.cursor;
        let waiting = wanting
            .iter()
            .filter(|g| after.is_none_or(|c| **g > c))
            .chain(wanting.iter().filter(|g| after.is_some_and(|c| **g <= c)))
            .filter(|g| !self.in_flight.contains(g))
            .copied()
            .take(room)
            .collect::<Vec<u128>>();
        for group in &waiting {
            self.in_flight.insert(*group);
            self.cursor = Some(*group);
        }
        self.peak_new = self.peak_new.max(waiting.len());
        self.peak_in_flight = self.peak_in_flight.max(self.in_flight.len());
    }

    /// Whether `group` may ask peers for prepares this tick.
    #[must_use]
    pub fn permits(&self, group: u128) -> bool {
        self.in_flight.contains(&group)
    }

    /// Sessions open now.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.in_flight.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_a_tick_eight_at_once_and_the_next_tick_picks_up_where_it_stopped() {
        let mut ration = RepairRation::default();
        let mut wanting: BTreeSet<u128> = (1..=24).collect();
        ration.tick(&wanting);
        assert_eq!((1..=24).filter(|g| ration.permits(*g)).count(), 3);
        assert!(ration.permits(1) && ration.permits(3) && !ration.permits(4));
        ration.tick(&wanting);
        ration.tick(&wanting);
        // 3 + 3 + 2: the ninth waits for a session to close.
        assert_eq!(ration.in_flight(), 8);
        assert!(ration.permits(8) && !ration.permits(9));
        ration.tick(&wanting);
        assert_eq!(ration.in_flight(), 8);
        // Groups 1 and 2 caught up: two new sessions, from where the scan stopped (9, 10).
        wanting.remove(&1);
        wanting.remove(&2);
        ration.tick(&wanting);
        assert!(ration.permits(9) && ration.permits(10) && !ration.permits(11));
        assert!(!ration.permits(1));
        assert_eq!(ration.in_flight(), 8);
        // Everyone but the last three caught up: they are admitted, wrapping around.
        let rest: BTreeSet<u128> = [22, 23, 24].into_iter().collect();
        ration.tick(&rest);
        assert_eq!(ration.in_flight(), 3);
        assert!(rest.iter().all(|g| ration.permits(*g)));
        assert_eq!((ration.peak_new, ration.peak_in_flight), (3, 8));
    }

    #[test]
    fn a_group_that_wants_repair_again_is_admitted_again() {
        let mut ration = RepairRation::new(1, 1);
        let one: BTreeSet<u128> = [7].into_iter().collect();
        ration.tick(&one);
        assert!(ration.permits(7));
        ration.tick(&BTreeSet::new());
        assert!(!ration.permits(7));
        ration.tick(&one);
        assert!(ration.permits(7));
    }
}
