//! [`Report`]: the verdict on a whole history, printed as a chaos test's failure message.

use super::violation::{ms, until};
use super::{Fault, FencedCounts, Op, OpKind, Violation};
use std::collections::BTreeMap;
use std::fmt;
use std::time::Instant;

/// Successful and failed attempts of one [`OpKind`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OpCounts {
    /// Attempts that succeeded.
    pub ok: usize,
    /// Attempts that failed.
    pub failed: usize,
}

impl fmt::Display for OpCounts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ok / {} failed", self.ok, self.failed)
    }
}

/// The verdict on a history: every violation found plus counts for context.
///
/// `Display` prints a summary, the faults, and each violation with the pair involved and the faults
/// active during its window; print it as the chaos test's failure message.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Report {
    /// The history's origin; times are printed as offsets from it.
    pub origin: Instant,
    /// Acquire attempts.
    pub acquires: OpCounts,
    /// Extend attempts.
    pub extends: OpCounts,
    /// Release attempts.
    pub releases: OpCounts,
    /// Successful acquires per resource.
    pub acquired: BTreeMap<String, usize>,
    /// Writes to the [`FencedRegister`](crate::FencedRegister)s created through the history, per
    /// resource.
    pub fenced_writes: BTreeMap<String, FencedCounts>,
    /// Every fault recorded.
    pub faults: Vec<Fault>,
    /// Every violation found.
    pub violations: Vec<Violation>,
}

impl Report {
    /// A report with the counts of `ops`, the given faults and no violations yet; add them with
    /// [`add_violations`](Report::add_violations). [`History::check`](crate::History::check)
    /// builds one for you.
    pub fn new(origin: Instant, ops: &[Op], faults: Vec<Fault>) -> Self {
        let mut report = Self {
            origin,
            acquires: OpCounts::default(),
            extends: OpCounts::default(),
            releases: OpCounts::default(),
            acquired: BTreeMap::new(),
            fenced_writes: BTreeMap::new(),
            faults,
            violations: Vec::new(),
        };
        for op in ops {
            let counts = match op.kind {
                OpKind::Acquire => &mut report.acquires,
                OpKind::Extend => &mut report.extends,
                OpKind::Release => &mut report.releases,
            };
            if op.succeeded() {
                counts.ok += 1;
                if op.kind == OpKind::Acquire {
                    *report.acquired.entry(op.resource.clone()).or_default() += 1;
                }
            } else {
                counts.failed += 1;
            }
        }
        report
    }

    /// Adds violations found elsewhere (for example by a witness not created through the history).
    pub fn add_violations(&mut self, violations: impl IntoIterator<Item = Violation>) {
        self.violations.extend(violations);
    }

    /// Whether no violation was found.
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty()
    }

    /// The faults active at some point of `violation`'s [window](Violation::window).
    pub fn active_faults(&self, violation: &Violation) -> Vec<&Fault> {
        match violation.window() {
            Some((from, until)) => self
                .faults
                .iter()
                .filter(|fault| fault.active_during(from, until))
                .collect(),
            None => Vec::new(),
        }
    }

    fn write_fault(&self, f: &mut fmt::Formatter<'_>, fault: &Fault) -> fmt::Result {
        let (start, end) = (ms(self.origin, fault.start), until(self.origin, fault.end));
        write!(f, "{} {} [{start}, {end})", fault.id, fault.description)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ops = self.acquires.ok
            + self.acquires.failed
            + self.extends.ok
            + self.extends.failed
            + self.releases.ok
            + self.releases.failed;
        writeln!(
            f,
            "history: {ops} ops (acquire {}, extend {}, release {}), {} fault(s); times in ms from the start",
            self.acquires,
            self.extends,
            self.releases,
            self.faults.len()
        )?;
        if !self.acquired.is_empty() {
            f.write_str("acquired:")?;
            for (resource, n) in &self.acquired {
                write!(f, " {resource:?} {n}")?;
            }
            writeln!(f)?;
        }
        for (resource, counts) in &self.fenced_writes {
            writeln!(
                f,
                "fenced writes to {resource:?}: {} accepted, {} rejected as stale",
                counts.accepted, counts.rejected
            )?;
        }
        for fault in &self.faults {
            f.write_str("fault ")?;
            self.write_fault(f, fault)?;
            writeln!(f)?;
        }
        if self.is_clean() {
            return writeln!(f, "violations: 0");
        }
        writeln!(f, "violations: {}", self.violations.len())?;
        for (i, violation) in self.violations.iter().enumerate() {
            writeln!(f, "{:>3}. {}", i + 1, violation.display_from(self.origin))?;
            if violation.window().is_some() {
                let active = self.active_faults(violation);
                if active.is_empty() {
                    writeln!(f, "     faults active: none")?;
                } else {
                    writeln!(f, "     faults active:")?;
                    for fault in active {
                        f.write_str("       ")?;
                        self.write_fault(f, fault)?;
                        writeln!(f)?;
                    }
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::testing::Clock;
    use crate::history::{check_overlaps, FaultId, TokenFingerprint};

    #[test]
    fn report_display_names_the_faults_active_at_a_violation() {
        let c = Clock::new();
        let faults = [
            ("node 1 killed", 0, Some(20)),
            ("node 2 paused", 30, Some(80)),
            ("node 3 partitioned", 90, None),
            ("node 4 slow", 300, None),
        ]
        .into_iter()
        .enumerate()
        .map(|(i, (description, start, end))| Fault {
            id: FaultId(i),
            description: description.into(),
            start: c.at(start),
            end: end.map(|end| c.at(end)),
        })
        .collect();
        let ops = [
            c.acquire(0, "tok-a-secret", (0, 5), 100, Some(1)),
            c.acquire(1, "tok-b-secret", (50, 60), 150, Some(2)),
        ];
        let mut report = Report::new(c.0, &ops, faults);
        report.add_violations(check_overlaps(&ops));

        assert!(!report.is_clean());
        let text = report.to_string();
        let (_, violation) = text.split_once("violations: 1").unwrap();
        // The overlap is [60, 100): node 2 (until 80) and node 3 (from 90) were active.
        assert!(violation.contains("node 2 paused"), "{text}");
        assert!(violation.contains("node 3 partitioned"), "{text}");
        assert!(!violation.contains("node 1 killed"), "{text}");
        assert!(!violation.contains("node 4 slow"), "{text}");
        assert!(violation.contains("[60.0ms, 100.0ms)"), "{text}");
        assert!(violation.contains("client 0") && violation.contains("client 1"));
        assert!(violation.contains(&TokenFingerprint::of("tok-a-secret").to_string()));
        assert!(violation.contains("fence 1") && violation.contains("fence 2"));
        assert!(!text.contains("secret"), "a token was printed: {text}");
    }
}
