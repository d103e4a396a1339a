//! Drawing a [`Plan`] from its seed: the configuration (`config`), then the fault schedule
//! (`schedule`), each from a random source of its own. Above the plan and both of them, so that
//! they use the plan's types without the plan using them back.

use std::collections::BTreeSet;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::config::draw_groups;
use super::plan::{Control, Options, Plan};
use super::schedule::draw_schedule;

/// Salts of the plan's random sources, so that they draw independently of each other and of
/// the clients' (which the engine derives from the seed itself).
const CONFIG_SALT: u64 = 0x0C0F_1600_5A17_0001;
const SCHEDULE_SALT: u64 = 0x5C4E_D01E_5A17_0002;
const EXTRA_SALT: u64 = 0xE874_A5A1_5A17_0003;

impl Plan {
    /// The plan of `seed`.
    pub fn draw(seed: u64, options: &Options) -> Plan {
        let mut rng = StdRng::seed_from_u64(seed ^ CONFIG_SALT);
        let masters = if rng.random_bool(0.35) { 3 } else { 5 };
        let aof = rng.random_bool(0.4);
        let drawn_control = match rng.random_bool(0.25) {
            true => Some(match rng.random_bool(0.5) {
                true => Control::ClockJump,
                false => Control::SkewBeyondGrace,
            }),
            false => None,
        };
        let control = options
            .control
            .or(drawn_control.filter(|_| options.controls));
        let mut extra = StdRng::seed_from_u64(seed ^ EXTRA_SALT);
        let groups = draw_groups(&mut rng, &mut extra, aof, control);
        let mut plan = Plan {
            seed,
            duration: options.duration,
            masters,
            aof,
            groups,
            faults: Vec::new(),
            control,
            removed: BTreeSet::new(),
        };
        let mut rng = StdRng::seed_from_u64(seed ^ SCHEDULE_SALT);
        plan.faults = draw_schedule(&mut rng, &plan);
        plan
    }
}
