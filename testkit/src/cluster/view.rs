//! What the nodes say about the cluster: `CLUSTER NODES` parsed into entries, the entries of
//! every running node merged into one [`Snapshot`] when they agree and the cluster is healthy
//! (owners of the slots, roles, open slots), and the wait for such a snapshot that every verb
//! ends with.

use std::io;
use std::time::Duration;

use super::command::wait_until;
use super::slot::SLOTS;
use super::RedisCluster;
use crate::server::RedisServer;

/// How long the cluster may take to settle after a change, beyond its node timeout.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(30);

impl RedisCluster {
    /// Polls [`snapshot`](Self::snapshot) until the cluster has settled and `also` accepts it.
    pub(super) fn settle(
        &self,
        what: &str,
        mut also: impl FnMut(&Snapshot) -> Result<(), String>,
    ) -> io::Result<Snapshot> {
        let timeout = SETTLE_TIMEOUT + self.node_timeout.saturating_mul(4);
        wait_until(what, timeout, || {
            let snapshot = self.snapshot()?;
            also(&snapshot)?;
            Ok(snapshot)
        })
    }

    /// The cluster as every running node sees it, if they all agree and it is healthy; else why
    /// not.
    fn snapshot(&self) -> Result<Snapshot, String> {
        let running: Vec<bool> = self.nodes.iter().map(RedisServer::is_running).collect();
        let mut agreed: Option<(usize, Snapshot)> = None;
        for reporter in (0..self.nodes.len()).filter(|&i| running[i]) {
            let view = self.view_of(reporter, &running)?;
            let Some((first, agreed)) = &mut agreed else {
                agreed = Some((reporter, view));
                continue;
            };
            let slots = 0..agreed.owners.len();
            if let Some(slot) = slots.clone().find(|&s| view.owners[s] != agreed.owners[s]) {
                return Err(format!(
                    "node {first} and node {reporter} disagree on the owner of slot {slot}: \
                     {:?} and {:?}",
                    agreed.owners[slot], view.owners[slot]
                ));
            }
            let nodes = 0..agreed.roles.len();
            if let Some(node) = nodes.clone().find(|&n| view.roles[n] != agreed.roles[n]) {
                return Err(format!(
                    "node {first} and node {reporter} disagree on the role of node {node}: \
                     {:?} and {:?}",
                    agreed.roles[node], view.roles[node]
                ));
            }
            agreed.open.extend(view.open);
        }
        let Some((_, snapshot)) = agreed else {
            return Err("no node is running".to_owned());
        };
        for (slot, owner) in snapshot.owners.iter().enumerate() {
            match *owner {
                None => return Err(format!("slot {slot} is not served by any node")),
                Some(node) if snapshot.roles[node] != Some(Role::Primary) => {
                    return Err(format!(
                        "slot {slot} is served by node {node}, which is down or not a primary"
                    ))
                }
                Some(_) => {}
            }
        }
        for (node, role) in snapshot.roles.iter().enumerate() {
            if let Some(Role::Replica(primary)) = *role {
                self.check_linked(node, primary)?;
            }
        }
        Ok(snapshot)
    }

    /// The cluster as node `reporter` sees it, if it says `cluster_state:ok`, knows every node
    /// as a member and flags none of the running ones as failing; else why not. `open` holds the
    /// slots the reporter itself has open.
    fn view_of(&self, reporter: usize, running: &[bool]) -> Result<Snapshot, String> {
        let name = self.name(reporter);
        let info: String = self
            .run(reporter, redis::cmd("CLUSTER").arg("INFO"))
            .map_err(|error| error.to_string())?;
        let state = info_field(&info, "cluster_state").unwrap_or("(missing)");
        if state != "ok" {
            return Err(format!("{name} says cluster_state:{state}"));
        }
        let entries = self.entries(reporter).map_err(|error| error.to_string())?;
        let mut by_index: Vec<Option<&Entry>> = vec![None; self.nodes.len()];
        for entry in &entries {
            let Some(index) = self.index_of(&entry.id) else {
                return Err(format!(
                    "{name} knows a node {} that is not one of ours (a handshake?)",
                    entry.id
                ));
            };
            if entry.joining {
                return Err(format!("{name} is still shaking hands with node {index}"));
            }
            if entry.failing && running[index] {
                return Err(format!("{name} flags node {index} as failing"));
            }
            by_index[index] = Some(entry);
        }
        let mut view = Snapshot {
            owners: vec![None; usize::from(SLOTS)],
            roles: vec![None; self.nodes.len()],
            open: Vec::new(),
        };
        for (index, entry) in by_index.iter().enumerate() {
            let Some(entry) = entry else {
                return Err(format!("{name} does not know node {index} yet"));
            };
            if entry.myself {
                view.open
                    .extend(entry.open.iter().map(|&open| (reporter, open)));
            }
            if entry.primary {
                for &(start, end) in &entry.slots {
                    for slot in start..=end.min(SLOTS - 1) {
                        view.owners[usize::from(slot)] = Some(index);
                    }
                }
            }
            if !running[index] {
                continue;
            }
            view.roles[index] = Some(if entry.primary {
                Role::Primary
            } else {
                let primary = entry.primary_id.as_deref().unwrap_or("-");
                let primary = self
                    .index_of(primary)
                    .ok_or_else(|| format!("{name} says node {index} replicates {primary}"))?;
                Role::Replica(primary)
            });
        }
        Ok(view)
    }

    /// Whether node `node` replicates node `primary` with the link up; else what it says.
    fn check_linked(&self, node: usize, primary: usize) -> Result<(), String> {
        let info: String = self
            .run(node, redis::cmd("INFO").arg("replication"))
            .map_err(|error| error.to_string())?;
        let port = self.nodes[primary].port().to_string();
        let master_port = info_field(&info, "master_port").unwrap_or("(none)");
        let link = info_field(&info, "master_link_status").unwrap_or("(none)");
        if master_port == port && link == "up" {
            Ok(())
        } else {
            Err(format!(
                "node {node}, replica of node {primary}, has master_port:{master_port} \
                 master_link_status:{link}"
            ))
        }
    }

    /// `CLUSTER NODES` of the first running node that answers, with that node's index.
    pub(super) fn view(&self) -> io::Result<(usize, Vec<Entry>)> {
        let mut last_error = None;
        for index in (0..self.nodes.len()).filter(|&i| self.nodes[i].is_running()) {
            match self.entries(index) {
                Ok(entries) => return Ok((index, entries)),
                Err(error) => last_error = Some(error),
            }
        }
        Err(last_error.unwrap_or_else(|| io::Error::other("no cluster node is running")))
    }

    /// `CLUSTER NODES` of node `index`, parsed.
    fn entries(&self, index: usize) -> io::Result<Vec<Entry>> {
        let text: String = self.run(index, redis::cmd("CLUSTER").arg("NODES"))?;
        parse_nodes(&text).map_err(|error| {
            io::Error::other(format!(
                "{}: unexpected CLUSTER NODES ({error}):\n{text}",
                self.name(index)
            ))
        })
    }

    /// The node ID node `index` gives itself.
    pub(super) fn own_id(&self, index: usize) -> io::Result<String> {
        self.entries(index)?
            .into_iter()
            .find(|entry| entry.myself)
            .map(|entry| entry.id)
            .ok_or_else(|| {
                io::Error::other(format!(
                    "{}: CLUSTER NODES has no `myself` line",
                    self.name(index)
                ))
            })
    }
}

/// A node's role, as the cluster sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    Primary,
    /// A replica of the node with this index.
    Replica(usize),
}

/// A slot a node has open for a migration (only its own `CLUSTER NODES` line shows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct OpenSlot {
    pub(super) slot: u16,
}

/// The settled cluster, as every running node agrees it is.
#[derive(Debug)]
pub(super) struct Snapshot {
    /// The index of the primary serving each slot.
    pub(super) owners: Vec<Option<usize>>,
    /// The role of each running node, by index; `None` for nodes that are down.
    pub(super) roles: Vec<Option<Role>>,
    /// The slots each node has open (`MIGRATING` or `IMPORTING`), by the node's index.
    pub(super) open: Vec<(usize, OpenSlot)>,
}

impl Snapshot {
    pub(super) fn owner(&self, slot: u16) -> io::Result<usize> {
        self.owners
            .get(usize::from(slot))
            .copied()
            .flatten()
            .ok_or_else(|| io::Error::other(format!("slot {slot} is not served by any node")))
    }

    /// The running replicas of node `primary`, in index order.
    pub(super) fn replicas_of(&self, primary: usize) -> Vec<usize> {
        (0..self.roles.len())
            .filter(|&node| self.roles[node] == Some(Role::Replica(primary)))
            .collect()
    }
}

/// One line of `CLUSTER NODES`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Entry {
    pub(super) id: String,
    myself: bool,
    pub(super) primary: bool,
    /// Flagged `fail` or `fail?`.
    failing: bool,
    /// Flagged `handshake` or `noaddr`: not yet a member.
    joining: bool,
    pub(super) primary_id: Option<String>,
    pub(super) slots: Vec<(u16, u16)>,
    open: Vec<OpenSlot>,
}

impl Entry {
    pub(super) fn serves(&self, slot: u16) -> bool {
        self.slots
            .iter()
            .any(|&(start, end)| (start..=end).contains(&slot))
    }
}

/// Parses `CLUSTER NODES`:
/// `<id> <ip:port@cport[,hostname]> <flags> <primary> <ping> <pong> <epoch> <link> <slot>...`.
fn parse_nodes(text: &str) -> Result<Vec<Entry>, String> {
    text.lines()
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let [id, _addr, flags, primary, _ping, _pong, _epoch, _link, slots @ ..] =
                fields.as_slice()
            else {
                return Err(format!("short line {line:?}"));
            };
            let flags: Vec<&str> = flags.split(',').collect();
            let has = |names: &[&str]| flags.iter().any(|flag| names.contains(flag));
            let mut entry = Entry {
                id: (*id).to_owned(),
                myself: has(&["myself"]),
                primary: has(&["master", "primary"]),
                failing: has(&["fail", "fail?"]),
                joining: has(&["handshake", "noaddr"]),
                primary_id: Some((*primary).to_owned()).filter(|id| id != "-"),
                slots: Vec::new(),
                open: Vec::new(),
            };
            for slot in slots {
                if let Some(open) = slot.strip_prefix('[') {
                    // `[slot->-id]` (migrating) or `[slot-<-id]` (importing).
                    let number = open
                        .split(['-', ']'])
                        .next()
                        .and_then(|n| n.parse().ok())
                        .ok_or_else(|| format!("bad open slot {slot:?}"))?;
                    entry.open.push(OpenSlot { slot: number });
                    continue;
                }
                let range = match slot.split_once('-') {
                    Some((start, end)) => (start.parse(), end.parse()),
                    None => (slot.parse(), slot.parse()),
                };
                match range {
                    (Ok(start), Ok(end)) if start <= end && end < SLOTS => {
                        entry.slots.push((start, end));
                    }
                    _ => return Err(format!("bad slot range {slot:?}")),
                }
            }
            Ok(entry)
        })
        .collect()
}

/// The value of `field:` in an `INFO`-style text.
fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.trim()
            .strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_nodes_lines_are_parsed() {
        let text = "\
07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected
67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922
292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f 127.0.0.1:30003@31003 master,fail? - 0 1426238318243 3 connected 10923-16383
e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 [5461-<-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1] [93->-292f8b365bb7edb5e285caf0b7e6ddc7265d2f4f]
6ec23923021cf3ffec47632106199cb7f496ce01 :0@0 handshake - 0 0 0 connected
";
        let entries = parse_nodes(text).unwrap();
        assert_eq!(entries.len(), 5);
        assert!(!entries[0].primary);
        assert_eq!(
            entries[0].primary_id.as_deref(),
            Some("e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca")
        );
        assert_eq!(entries[1].slots, [(5461, 10922)]);
        assert!(entries[2].failing && entries[2].primary);
        assert!(entries[3].myself && entries[3].serves(0) && !entries[3].serves(5461));
        assert_eq!(
            entries[3].open,
            [OpenSlot { slot: 5461 }, OpenSlot { slot: 93 }]
        );
        assert!(entries[4].joining);
        assert!(parse_nodes("abc 127.0.0.1:1@2 master").is_err());
        assert!(parse_nodes("a b master - 0 0 1 connected 10-5").is_err());
    }

    #[test]
    fn info_fields_are_found() {
        let info = "# Cluster\r\ncluster_state:ok\r\ncluster_slots_assigned:16384\r\n";
        assert_eq!(info_field(info, "cluster_state"), Some("ok"));
        assert_eq!(info_field(info, "cluster_slots"), None);
    }
}
