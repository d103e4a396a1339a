//! Moving a slot from one primary to another, step by step as `redis-cli --cluster reshard`
//! does: [`SlotMigration`] is a slot stopped halfway, `MIGRATING` on its owner and `IMPORTING` on
//! its target, so that clients meet `ASK` redirections until the move is finished.

use std::io;
use std::time::Duration;

use super::command::{query, COMMAND_TIMEOUT};
use super::slot::{check_slot, key_slot};
use super::view::Role;
use super::RedisCluster;

/// The timeout `MIGRATE` is given to hand its keys over.
const MIGRATE_TIMEOUT: Duration = Duration::from_secs(5);

/// How many keys one `MIGRATE` moves.
const MIGRATE_BATCH: usize = 100;

/// A slot halfway through its move from one primary to another: see
/// [`RedisCluster::begin_migration`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlotMigration {
    slot: u16,
    source: usize,
    target: usize,
    moved: Vec<Vec<u8>>,
}

impl SlotMigration {
    /// The slot being moved.
    pub fn slot(&self) -> u16 {
        self.slot
    }

    /// The index of the primary the slot is moving from, where it is `MIGRATING`.
    pub fn source(&self) -> usize {
        self.source
    }

    /// The index of the primary the slot is moving to, where it is `IMPORTING`.
    pub fn target(&self) -> usize {
        self.target
    }

    /// The keys moved to the target so far: the source answers `ASK` for them.
    pub fn moved_keys(&self) -> &[Vec<u8>] {
        &self.moved
    }

    /// Whether `key` has been moved to the target.
    pub fn is_moved(&self, key: impl AsRef<[u8]>) -> bool {
        self.moved.iter().any(|moved| moved == key.as_ref())
    }
}

impl RedisCluster {
    /// Moves `slot` with all its keys to primary `to`:
    /// [`begin_migration`](Self::begin_migration) then
    /// [`finish_migration`](Self::finish_migration).
    ///
    /// # Errors
    ///
    /// As those two.
    pub fn migrate_slot(&self, slot: u16, to: usize) -> io::Result<()> {
        let migration = self.begin_migration(slot, to)?;
        self.finish_migration(migration)
    }

    /// Starts moving `slot` to primary `to` as `redis-cli --cluster reshard` does, and stops
    /// halfway: `CLUSTER SETSLOT slot IMPORTING` on the target, `CLUSTER SETSLOT slot MIGRATING`
    /// on the owner, then the first half (rounded up) of the slot's keys, as
    /// `CLUSTER GETKEYSINSLOT` lists them, moved with `MIGRATE`.
    ///
    /// Until [`finish_migration`](Self::finish_migration), the owner answers `-ASK` for the moved
    /// keys and for keys that do not exist yet, and the target serves them only after `ASKING`;
    /// [`migrate_key`](Self::migrate_key) moves one more key.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] for a slot not below [`SLOTS`](super::SLOTS), if `to` is
    /// not a running primary, or already serves the slot; an error if the slot is already being
    /// moved or a command fails; [`io::ErrorKind::TimedOut`] if the cluster has not settled
    /// beforehand.
    pub fn begin_migration(&self, slot: u16, to: usize) -> io::Result<SlotMigration> {
        check_slot(slot)?;
        self.check_index(to)?;
        let before = self.settle("the cluster to settle before the migration", |_| Ok(()))?;
        let source = before.owner(slot)?;
        if source == to {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("slot {slot} is already served by {}", self.name(to)),
            ));
        }
        if before.roles.get(to) != Some(&Some(Role::Primary)) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not a running primary", self.name(to)),
            ));
        }
        if let Some(&(node, _)) = before.open.iter().find(|(_, open)| open.slot == slot) {
            return Err(io::Error::other(format!(
                "slot {slot} is already being migrated ({} has it open)",
                self.name(node)
            )));
        }
        self.run::<()>(
            to,
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("IMPORTING")
                .arg(&self.ids[source]),
        )?;
        self.run::<()>(
            source,
            redis::cmd("CLUSTER")
                .arg("SETSLOT")
                .arg(slot)
                .arg("MIGRATING")
                .arg(&self.ids[to]),
        )?;
        let count: usize = self.run(
            source,
            redis::cmd("CLUSTER").arg("COUNTKEYSINSLOT").arg(slot),
        )?;
        let keys = self.keys_in_slot(source, slot, count.div_ceil(2))?;
        self.migrate(source, to, &keys)?;
        Ok(SlotMigration {
            slot,
            source,
            target: to,
            moved: keys,
        })
    }

    /// Moves one more key of a migration in progress to its target, and returns whether it
    /// existed on the source (`MIGRATE` said `OK` rather than `NOKEY`).
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::InvalidInput`] if `key` is not in the migrating slot; an error if
    /// `MIGRATE` fails (for example because the target already holds the key).
    pub fn migrate_key(
        &self,
        migration: &mut SlotMigration,
        key: impl AsRef<[u8]>,
    ) -> io::Result<bool> {
        let key = key.as_ref();
        if key_slot(key) != migration.slot {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "key {:?} is in slot {}, not in the migrating slot {}",
                    String::from_utf8_lossy(key),
                    key_slot(key),
                    migration.slot
                ),
            ));
        }
        let moved = self.migrate(migration.source, migration.target, &[key.to_vec()])?;
        if moved {
            migration.moved.push(key.to_vec());
        }
        Ok(moved)
    }

    /// Completes a migration: moves the slot's remaining keys in batches with `MIGRATE`, then
    /// `CLUSTER SETSLOT slot NODE target` on the target, the source and every other primary, and
    /// waits until every node agrees that the target serves the slot and no node has it open.
    ///
    /// # Errors
    ///
    /// An error if a command fails; [`io::ErrorKind::TimedOut`] if the cluster does not settle.
    pub fn finish_migration(&self, migration: SlotMigration) -> io::Result<()> {
        let SlotMigration {
            slot,
            source,
            target,
            ..
        } = migration;
        loop {
            let keys = self.keys_in_slot(source, slot, MIGRATE_BATCH)?;
            if keys.is_empty() {
                break;
            }
            self.migrate(source, target, &keys)?;
        }
        let (_, entries) = self.view()?;
        let others = entries
            .iter()
            .filter(|entry| entry.primary)
            .filter_map(|entry| self.index_of(&entry.id))
            .filter(|&node| node != source && node != target && self.nodes[node].is_running());
        for node in [target, source].into_iter().chain(others) {
            self.run::<()>(
                node,
                redis::cmd("CLUSTER")
                    .arg("SETSLOT")
                    .arg(slot)
                    .arg("NODE")
                    .arg(&self.ids[target]),
            )?;
        }
        let what = format!(
            "every node to agree that {} serves slot {slot}",
            self.name(target)
        );
        self.settle(&what, |snapshot| {
            let owner = snapshot.owner(slot).map_err(|error| error.to_string())?;
            if owner != target {
                return Err(format!("slot {slot} is still served by node {owner}"));
            }
            match snapshot.open.iter().find(|(_, open)| open.slot == slot) {
                Some((node, _)) => Err(format!("node {node} still has slot {slot} open")),
                None => Ok(()),
            }
        })?;
        Ok(())
    }

    /// Up to `count` keys of `slot` on node `index`.
    fn keys_in_slot(&self, index: usize, slot: u16, count: usize) -> io::Result<Vec<Vec<u8>>> {
        if count == 0 {
            return Ok(Vec::new());
        }
        self.run(
            index,
            redis::cmd("CLUSTER")
                .arg("GETKEYSINSLOT")
                .arg(slot)
                .arg(count),
        )
    }

    /// Moves `keys` from node `source` to node `target` with one `MIGRATE`; whether any of them
    /// existed (`OK` rather than `NOKEY`).
    fn migrate(&self, source: usize, target: usize, keys: &[Vec<u8>]) -> io::Result<bool> {
        if keys.is_empty() {
            return Ok(false);
        }
        let mut migrate = redis::cmd("MIGRATE");
        migrate
            .arg("127.0.0.1")
            .arg(self.nodes[target].port())
            .arg("")
            .arg(0)
            .arg(MIGRATE_TIMEOUT.as_millis().to_string())
            .arg("KEYS")
            .arg(keys);
        let reply: String = query(
            &self.nodes[source],
            &migrate,
            MIGRATE_TIMEOUT + COMMAND_TIMEOUT,
        )
        .map_err(|error| {
            io::Error::new(
                error.kind(),
                format!(
                    "{}: MIGRATE of {} key(s) to node {target}: {error}",
                    self.name(source),
                    keys.len()
                ),
            )
        })?;
        Ok(reply == "OK")
    }
}
