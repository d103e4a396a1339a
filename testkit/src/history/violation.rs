//! [`Violation`]: what a checker or a witness found, and how it is printed.

use super::{Access, Acquisition, LeaderRead, Lease, Occupant, PermitLease, ReleaseAudit};
use std::fmt;
use std::time::Instant;

/// One safety violation found by a checker or a witness.
///
/// `Display` prints times in milliseconds from the violation's own first instant;
/// [`display_from`](Violation::display_from) (used by the [`Report`](crate::Report)) prints them
/// from a given origin instead.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Violation {
    /// Two leases of different tokens on one resource overlap
    /// ([`check_overlaps`](crate::check_overlaps)).
    Overlap {
        /// The resource.
        resource: String,
        /// The lease that started first.
        first: Lease,
        /// The lease that started while `first` was still held.
        second: Lease,
        /// Start of the overlap.
        from: Instant,
        /// End of the overlap; `None` if it never ended.
        until: Option<Instant>,
    },
    /// An acquire that began after another had returned got a fence that is not higher
    /// ([`check_fence_order`](crate::check_fence_order)).
    FenceOrder {
        /// The resource.
        resource: String,
        /// The acquire that returned first.
        earlier: Acquisition,
        /// The acquire that started after `earlier` returned.
        later: Acquisition,
    },
    /// A client entered a critical section while others were inside
    /// ([`OccupancyWitness`](crate::OccupancyWitness)).
    DoubleOccupancy {
        /// The resource.
        resource: String,
        /// Who was inside.
        holders: Vec<Occupant>,
        /// Who entered.
        intruder: Occupant,
    },
    /// A client entered a critical section that already held as many clients as it admits
    /// ([`OccupancyWitness::with_capacity`](crate::OccupancyWitness::with_capacity)).
    OverCapacity {
        /// The resource (a semaphore).
        resource: String,
        /// How many clients may be inside at once.
        capacity: usize,
        /// Who was inside.
        holders: Vec<Occupant>,
        /// Who entered.
        intruder: Occupant,
    },
    /// More holders of a semaphore's permits held a lease at once than it has permits
    /// ([`check_max_holders`](crate::history::check_max_holders)).
    TooManyHolders {
        /// The semaphore.
        resource: String,
        /// How many permits it has.
        permits: usize,
        /// Every lease open when the stretch was most crowded, in the order they started.
        holders: Vec<PermitLease>,
        /// When a lease too many started.
        from: Instant,
        /// When the count fell back to `permits`; `None` if it never did.
        until: Option<Instant>,
    },
    /// A writer of a read-write lock held a lease while a reader held one
    /// ([`check_rw_exclusion`](crate::history::check_rw_exclusion)).
    ReadWriteOverlap {
        /// The read-write lock.
        resource: String,
        /// The writer's lease.
        writer: Lease,
        /// The reader's lease.
        reader: Lease,
        /// Start of the overlap.
        from: Instant,
        /// End of the overlap; `None` if it never ended.
        until: Option<Instant>,
    },
    /// A writer entered a read-write lock's critical section while somebody was inside, or a
    /// reader while a writer was ([`ReadWriteWitness`](crate::history::ReadWriteWitness)).
    ReadWriteOccupancy {
        /// The read-write lock.
        resource: String,
        /// Who was inside, and how.
        inside: Vec<(Access, Occupant)>,
        /// Who entered, and how.
        intruder: (Access, Occupant),
    },
    /// A leader was elected with a term not above that of a leader elected before it
    /// ([`check_term_order`](crate::history::check_term_order)).
    TermOrder {
        /// The election.
        resource: String,
        /// The earlier leader with the highest term so far.
        earlier: Acquisition,
        /// The later leader.
        later: Acquisition,
    },
    /// A quorum read of an election named a leader that did not lead at any point of the read
    /// ([`check_leader_reads`](crate::history::check_leader_reads)).
    LeaderRead {
        /// The election.
        resource: String,
        /// The read.
        read: LeaderRead,
        /// The leadership whose token the read named; `None` when no leader had it.
        named: Option<Acquisition>,
        /// The next leader, when it had been elected before the read started.
        superseded_by: Option<Acquisition>,
    },
    /// A master that confirmed the release of a lock's last hold still held the lock for its
    /// holder afterwards ([`check_left_behind`](crate::history::check_left_behind)).
    LeftBehind {
        /// What the masters held just after the release.
        audit: ReleaseAudit,
    },
    /// A write did not raise a [`LostUpdateRegister`](crate::LostUpdateRegister): its writer read
    /// before another critical section committed.
    StaleWrite {
        /// The resource.
        resource: String,
        /// The value written.
        written: u64,
        /// The value it replaced.
        overwritten: u64,
        /// When it was written.
        at: Instant,
    },
    /// A [`LostUpdateRegister`](crate::LostUpdateRegister) ended below the number of committed
    /// critical sections.
    LostUpdate {
        /// The resource.
        resource: String,
        /// The register's final value.
        final_value: u64,
        /// How many critical sections committed.
        expected: u64,
        /// How many writes the register saw.
        writes: u64,
    },
    /// Two clients wrote to a [`FencedRegister`](crate::FencedRegister) under the same fence.
    SharedFence {
        /// The resource.
        resource: String,
        /// The shared fence.
        fence: u64,
        /// The client that first wrote with it.
        first_client: usize,
        /// Another client writing with it.
        second_client: usize,
        /// When the second client wrote.
        at: Instant,
    },
}

impl Violation {
    /// The resource involved.
    pub fn resource(&self) -> &str {
        match self {
            Violation::Overlap { resource, .. }
            | Violation::FenceOrder { resource, .. }
            | Violation::DoubleOccupancy { resource, .. }
            | Violation::OverCapacity { resource, .. }
            | Violation::TooManyHolders { resource, .. }
            | Violation::ReadWriteOverlap { resource, .. }
            | Violation::ReadWriteOccupancy { resource, .. }
            | Violation::TermOrder { resource, .. }
            | Violation::LeaderRead { resource, .. }
            | Violation::LeftBehind {
                audit: ReleaseAudit { resource, .. },
            }
            | Violation::StaleWrite { resource, .. }
            | Violation::LostUpdate { resource, .. }
            | Violation::SharedFence { resource, .. } => resource,
        }
    }

    /// The closed time window the violation concerns, used to find the faults active during it;
    /// `None` when it is a whole-run verdict ([`Violation::LostUpdate`]). The window's end is
    /// `None` when it runs to the end of the run.
    ///
    /// Overlap, read-write overlap and too many holders: the stretch itself. Fence order and
    /// term order: from the earlier acquire's start to the later one's end. Double occupancy and
    /// read-write occupancy: from the first holder's entry to the intruder's. Leader read: the
    /// read. Left behind: the instant the release returned. Stale write and shared fence: the
    /// instant of the offending write.
    pub fn window(&self) -> Option<(Instant, Option<Instant>)> {
        match self {
            Violation::Overlap { from, until, .. }
            | Violation::ReadWriteOverlap { from, until, .. } => Some((*from, *until)),
            Violation::FenceOrder { earlier, later, .. }
            | Violation::TermOrder { earlier, later, .. } => {
                Some((earlier.start.min(later.start), Some(later.end)))
            }
            Violation::DoubleOccupancy {
                holders, intruder, ..
            }
            | Violation::OverCapacity {
                holders, intruder, ..
            } => {
                let first = holders
                    .iter()
                    .map(|h| h.entered)
                    .min()
                    .map_or(intruder.entered, |e| e.min(intruder.entered));
                Some((first, Some(intruder.entered)))
            }
            Violation::ReadWriteOccupancy {
                inside, intruder, ..
            } => {
                let first = inside
                    .iter()
                    .map(|(_, o)| o.entered)
                    .min()
                    .map_or(intruder.1.entered, |e| e.min(intruder.1.entered));
                Some((first, Some(intruder.1.entered)))
            }
            Violation::LeaderRead { read, .. } => Some((read.start, Some(read.end))),
            Violation::LeftBehind { audit } => Some((audit.released, Some(audit.released))),
            Violation::TooManyHolders { from, until, .. } => Some((*from, *until)),
            Violation::StaleWrite { at, .. } | Violation::SharedFence { at, .. } => {
                Some((*at, Some(*at)))
            }
            Violation::LostUpdate { .. } => None,
        }
    }

    /// The earliest instant the violation mentions.
    fn first_instant(&self) -> Option<Instant> {
        match self {
            Violation::Overlap { first, second, .. } => Some(first.start.min(second.start)),
            Violation::ReadWriteOverlap { writer, reader, .. } => {
                Some(writer.start.min(reader.start))
            }
            Violation::LeaderRead {
                read,
                named,
                superseded_by,
                ..
            } => Some(
                [named, superseded_by]
                    .into_iter()
                    .flatten()
                    .map(|a| a.start)
                    .fold(read.start, Instant::min),
            ),
            Violation::TooManyHolders { holders, from, .. } => Some(
                holders
                    .iter()
                    .map(|h| h.lease.start)
                    .min()
                    .map_or(*from, |start| start.min(*from)),
            ),
            _ => self.window().map(|(from, _)| from),
        }
    }

    /// Displays the violation with times in milliseconds from `origin`.
    pub fn display_from(&self, origin: Instant) -> impl fmt::Display + '_ {
        ViolationFrom {
            violation: self,
            origin,
        }
    }

    fn write_from(&self, f: &mut fmt::Formatter<'_>, origin: Instant) -> fmt::Result {
        let at = |t: Instant| ms(origin, t);
        match self {
            Violation::Overlap {
                resource,
                first,
                second,
                from,
                until: end,
            } => {
                write!(f, "overlapping leases on {resource:?}: ")?;
                write_lease(f, first, origin)?;
                f.write_str(" and ")?;
                write_lease(f, second, origin)?;
                write!(f, "; overlap [{}, {})", at(*from), until(origin, *end))
            }
            Violation::FenceOrder {
                resource,
                earlier,
                later,
            } => {
                let how = if earlier.fence == later.fence {
                    "repeated"
                } else {
                    "went backwards"
                };
                write!(f, "fence {how} on {resource:?}: ")?;
                write_acquisition(f, earlier, origin)?;
                f.write_str(" returned before ")?;
                write_acquisition(f, later, origin)?;
                write!(f, " started, yet {} ≥ {}", earlier.fence, later.fence)
            }
            Violation::DoubleOccupancy {
                resource,
                holders,
                intruder,
            } => {
                write!(
                    f,
                    "two holders inside {resource:?}: client {} entered at {} while ",
                    intruder.client,
                    at(intruder.entered)
                )?;
                write_occupants(f, holders, origin)?;
                f.write_str(" was inside")
            }
            Violation::OverCapacity {
                resource,
                capacity,
                holders,
                intruder,
            } => {
                write!(
                    f,
                    "{} holders inside {resource:?}, which admits {capacity}: client {} entered at {} while ",
                    holders.len() + 1,
                    intruder.client,
                    at(intruder.entered)
                )?;
                write_occupants(f, holders, origin)?;
                f.write_str(" were inside")
            }
            Violation::TooManyHolders {
                resource,
                permits,
                holders,
                from,
                until: end,
            } => {
                write!(
                    f,
                    "{} holders of {resource:?} at once, more than its {permits} permits: ",
                    holders.len()
                )?;
                for (i, holder) in holders.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    if holder.resource != *resource {
                        write!(f, "{:?}: ", holder.resource)?;
                    }
                    write_lease(f, &holder.lease, origin)?;
                }
                write!(f, "; too many [{}, {})", at(*from), until(origin, *end))
            }
            Violation::ReadWriteOverlap {
                resource,
                writer,
                reader,
                from,
                until: end,
            } => {
                write!(
                    f,
                    "a writer and a reader held {resource:?} at once: writer "
                )?;
                write_lease(f, writer, origin)?;
                f.write_str(" and reader ")?;
                write_lease(f, reader, origin)?;
                write!(f, "; overlap [{}, {})", at(*from), until(origin, *end))
            }
            Violation::ReadWriteOccupancy {
                resource,
                inside,
                intruder: (access, intruder),
            } => {
                write!(
                    f,
                    "{access} client {} entered {resource:?} at {} while ",
                    intruder.client,
                    at(intruder.entered)
                )?;
                for (i, (access, occupant)) in inside.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{access} ")?;
                    write_occupants(f, std::slice::from_ref(occupant), origin)?;
                }
                f.write_str(if inside.len() == 1 {
                    " was inside"
                } else {
                    " were inside"
                })
            }
            Violation::TermOrder {
                resource,
                earlier,
                later,
            } => {
                let how = if earlier.fence == later.fence {
                    "repeated"
                } else {
                    "went backwards"
                };
                write!(f, "term {how} in {resource:?}: ")?;
                write_acquisition(f, earlier, origin)?;
                f.write_str(" was elected before ")?;
                write_acquisition(f, later, origin)?;
                write!(f, ", yet {} ≥ {}", earlier.fence, later.fence)
            }
            Violation::LeaderRead {
                resource,
                read,
                named,
                superseded_by,
            } => {
                let value = read.value.as_deref().unwrap_or_default();
                write!(
                    f,
                    "client {} read {resource:?} over [{}, {}] and was told {value:?} leads, ",
                    read.client,
                    at(read.start),
                    at(read.end)
                )?;
                match (named, superseded_by) {
                    (None, _) => f.write_str("a leader never elected"),
                    (Some(named), Some(next)) => {
                        f.write_str("elected as ")?;
                        write_acquisition(f, named, origin)?;
                        f.write_str(", although ")?;
                        write_acquisition(f, next, origin)?;
                        f.write_str(" had been elected in its place before the read started")
                    }
                    (Some(named), None) if read.end < named.start => {
                        f.write_str("before its campaign began: ")?;
                        write_acquisition(f, named, origin)
                    }
                    (Some(named), None) => {
                        f.write_str("but the leader with that token, ")?;
                        write_acquisition(f, named, origin)?;
                        f.write_str(", announced something else")
                    }
                }
            }
            Violation::LeftBehind { audit } => write!(
                f,
                "masters {:?} still held {:?} for client {} (token {}) after the release of its \
                 last hold returned at {}, though {} of {} masters confirmed it",
                audit.holding,
                audit.resource,
                audit.client,
                audit.token,
                at(audit.released),
                audit.confirmed,
                audit.masters
            ),
            Violation::StaleWrite {
                resource,
                written,
                overwritten,
                at: when,
            } => write!(
                f,
                "stale write to {resource:?} at {}: wrote {written} over {overwritten}, \
                 so its writer read before another critical section committed",
                at(*when)
            ),
            Violation::LostUpdate {
                resource,
                final_value,
                expected,
                writes,
            } => write!(
                f,
                "lost update on {resource:?}: final value {final_value}, \
                 but {expected} critical sections committed ({writes} writes)"
            ),
            Violation::SharedFence {
                resource,
                fence,
                first_client,
                second_client,
                at: when,
            } => write!(
                f,
                "shared fence on {resource:?}: client {second_client} wrote with fence {fence} \
                 at {}, already used by client {first_client}",
                at(*when)
            ),
        }
    }
}

fn write_occupants(
    f: &mut fmt::Formatter<'_>,
    holders: &[Occupant],
    origin: Instant,
) -> fmt::Result {
    for (i, holder) in holders.iter().enumerate() {
        if i > 0 {
            f.write_str(", ")?;
        }
        write!(
            f,
            "client {} (entered at {})",
            holder.client,
            ms(origin, holder.entered)
        )?;
    }
    Ok(())
}

fn write_lease(f: &mut fmt::Formatter<'_>, lease: &Lease, origin: Instant) -> fmt::Result {
    write!(f, "client {} (token {}", lease.client, lease.token)?;
    if let Some(fence) = lease.fence {
        write!(f, ", fence {fence}")?;
    }
    let (start, end) = (ms(origin, lease.start), until(origin, lease.end));
    write!(f, ") held [{start}, {end})")
}

fn write_acquisition(
    f: &mut fmt::Formatter<'_>,
    acquisition: &Acquisition,
    origin: Instant,
) -> fmt::Result {
    let (start, end) = (ms(origin, acquisition.start), ms(origin, acquisition.end));
    write!(
        f,
        "client {} (token {}, fence {}, acquire [{start}, {end}])",
        acquisition.client, acquisition.token, acquisition.fence
    )
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let origin = self.first_instant().unwrap_or_else(Instant::now);
        self.write_from(f, origin)
    }
}

struct ViolationFrom<'a> {
    violation: &'a Violation,
    origin: Instant,
}

impl fmt::Display for ViolationFrom<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.violation.write_from(f, self.origin)
    }
}

/// `t` printed as signed milliseconds from `origin`.
pub(super) fn ms(origin: Instant, t: Instant) -> impl fmt::Display {
    Ms { origin, t }
}

/// The end of a window, `t`, printed like [`ms`], or "end of run" when it has none.
pub(super) fn until(origin: Instant, t: Option<Instant>) -> impl fmt::Display {
    Until { origin, t }
}

struct Ms {
    origin: Instant,
    t: Instant,
}

impl fmt::Display for Ms {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.t.checked_duration_since(self.origin) {
            Some(after) => write!(f, "{:.1}ms", after.as_secs_f64() * 1e3),
            None => write!(f, "-{:.1}ms", (self.origin - self.t).as_secs_f64() * 1e3),
        }
    }
}

struct Until {
    origin: Instant,
    t: Option<Instant>,
}

impl fmt::Display for Until {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.t {
            Some(t) => ms(self.origin, t).fmt(f),
            None => f.write_str("end of run"),
        }
    }
}
