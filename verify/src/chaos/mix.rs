//! Several workloads in one run ([`Mix`]): the explorer's clients use different primitives at
//! once, each through the workload the scenarios use for it, and several workloads can share
//! one set of resource names (quorumlock's mutex clients and rslock's on the same locks).
//!
//! The run's clients are split into [`Group`]s, each with resources of its own (its witnesses
//! and registers) and a [`Setup`] of its own that numbers its clients from 0; within a group,
//! [`Part`]s say which workload runs which of them. The engine sees one workload.

use std::io;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use futures::future::BoxFuture;
use rand::rngs::StdRng;

use super::setup::Setup;
use super::shared::Shared;
use super::workload::Workload;

/// Clients that share resources: their setup (its `clients`, `resources` and `tunings` are
/// the group's), and the name resource `r` of the group is locked by.
pub(super) struct Group {
    pub(super) setup: Setup,
    pub(super) lock_name: Box<dyn Fn(usize) -> String + Send + Sync>,
}

/// A workload that runs some clients of a group: `clients`, numbered within the group.
pub(super) struct Part {
    pub(super) group: usize,
    pub(super) clients: Range<usize>,
    pub(super) workload: Arc<dyn Workload>,
}

/// Several workloads as one: see the module docs.
pub(super) struct Mix {
    groups: Vec<Group>,
    parts: Vec<Part>,
    /// Where each group's clients start among the run's.
    starts: Vec<usize>,
    /// Each group's shared state, once the engine's exists.
    shared: OnceLock<Vec<Arc<Shared>>>,
}

impl Mix {
    /// The groups' clients follow each other in the run: group 0's first.
    pub(super) fn new(groups: Vec<Group>, parts: Vec<Part>) -> Self {
        let starts = groups
            .iter()
            .scan(0, |next, g| {
                let start = *next;
                *next += g.setup.clients;
                Some(start)
            })
            .collect();
        Mix {
            groups,
            parts,
            starts,
            shared: OnceLock::new(),
        }
    }

    /// Clients over every group.
    pub(super) fn clients(&self) -> usize {
        self.groups.iter().map(|g| g.setup.clients).sum()
    }

    /// The group of the run's client `client`, and its number there.
    fn locate(&self, client: usize) -> Option<(usize, usize)> {
        let group = self.starts.iter().rposition(|start| *start <= client)?;
        let local = client - self.starts[group];
        (local < self.groups[group].setup.clients).then_some((group, local))
    }
}

impl Workload for Mix {
    fn prepare(&self, shared: &Shared) {
        let parts: Vec<Arc<Shared>> = self
            .groups
            .iter()
            .zip(&self.starts)
            .map(|(group, start)| {
                let clients = *start..start + group.setup.clients;
                Arc::new(shared.part(group.setup.clone(), clients, &group.lock_name))
            })
            .collect();
        for part in &self.parts {
            if let Some(shared) = parts.get(part.group) {
                part.workload.prepare(shared);
            }
        }
        let _ = self.shared.set(parts);
    }

    fn client(
        self: Arc<Self>,
        _shared: Arc<Shared>,
        client: usize,
        rng: StdRng,
    ) -> BoxFuture<'static, ()> {
        let found = self.locate(client).and_then(|(group, local)| {
            let shared = self.shared.get()?.get(group)?;
            let part = self
                .parts
                .iter()
                .find(|p| p.group == group && p.clients.contains(&local))?;
            Some((Arc::clone(&part.workload), Arc::clone(shared), local))
        });
        match found {
            Some((workload, shared, local)) => workload.client(shared, local, rng),
            // A client no part runs does nothing.
            None => Box::pin(async {}),
        }
    }

    fn reached_goal(&self) -> bool {
        self.parts.iter().all(|p| p.workload.reached_goal())
    }

    fn finish(&self) -> BoxFuture<'_, io::Result<()>> {
        Box::pin(async move {
            for part in &self.parts {
                part.workload.finish().await?;
            }
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(clients: usize) -> Group {
        Group {
            setup: Setup {
                clients,
                ..Setup::default()
            },
            lock_name: Box::new(Setup::resource),
        }
    }

    #[test]
    fn clients_are_numbered_within_their_group() {
        let mix = Mix::new(vec![group(3), group(0), group(2)], Vec::new());
        assert_eq!(mix.clients(), 5);
        let located: Vec<_> = (0..6).map(|c| mix.locate(c)).collect();
        assert_eq!(
            located,
            [
                Some((0, 0)),
                Some((0, 1)),
                Some((0, 2)),
                Some((2, 0)),
                Some((2, 1)),
                None
            ]
        );
    }
}
