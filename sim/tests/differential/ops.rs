//! Random but well-formed requests: the library's scripts with arguments shaped as the library
//! shapes them, and the plain commands it (or a foreign client) sends, over a small pool of
//! resources, tokens and waiters so that they meet.

use quorumlock::{companion_key, resource_key};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::Rng;

/// One request, with a name for the report.
pub struct Op {
    pub label: String,
    pub argv: Vec<Vec<u8>>,
}

const RESOURCES: [&str; 3] = ["a", "b", "{c}:x"];
const WAITERS: [&str; 3] = [
    "0123456789abcdef-w1",
    "0123456789abcdef-w2",
    "fedcba9876543210-w3",
];
const OWNERS: [&str; 2] = ["svc-a", "svc-b"];
const TTLS: [u64; 11] = [1, 2, 3, 5, 10, 20, 50, 100, 500, 2_000, 10_000];

pub struct Gen<'a> {
    pub rng: &'a mut StdRng,
    pub scripts: &'a std::collections::BTreeMap<&'static str, String>,
    /// The sha1 of each script, for EVALSHA (both servers loaded them).
    pub shas: &'a std::collections::BTreeMap<&'static str, String>,
}

fn key(resource: &str) -> String {
    resource_key("", resource)
}

fn companion(resource: &str, suffix: &str) -> String {
    companion_key(&key(resource), suffix)
}

impl Gen<'_> {
    fn ttl(&mut self) -> String {
        TTLS.choose(self.rng).copied().unwrap_or(100).to_string()
    }

    fn resource(&mut self) -> &'static str {
        RESOURCES.choose(self.rng).copied().unwrap_or("a")
    }

    fn resources(&mut self) -> Vec<&'static str> {
        let n = self.rng.random_range(1..=2);
        let mut picked: Vec<&'static str> = Vec::new();
        while picked.len() < n {
            let r = self.resource();
            if !picked.contains(&r) {
                picked.push(r);
            }
        }
        picked
    }

    fn waiter(&mut self) -> &'static str {
        WAITERS.choose(self.rng).copied().unwrap_or(WAITERS[0])
    }

    fn owner(&mut self) -> &'static str {
        OWNERS.choose(self.rng).copied().unwrap_or(OWNERS[0])
    }

    /// A token: plain, an owner's attempt (`<32 hex>@owner`), a waiter's handed lock
    /// (`~queued:<id>`), or an elected leader's mark.
    fn token(&mut self) -> String {
        match self.rng.random_range(0..10) {
            0..=3 => format!("t{}", self.rng.random_range(1..=3)),
            4..=5 => {
                let nonce = [
                    "0123456789abcdef0123456789abcdef",
                    "fedcba9876543210fedcba9876543210",
                ]
                .choose(self.rng)
                .copied()
                .unwrap_or("");
                format!("{nonce}@{}", self.owner())
            }
            6..=7 => format!("~queued:{}", self.waiter()),
            8 => format!("~elected:t{}", self.rng.random_range(1..=3)),
            _ => format!("t{}", self.rng.random_range(1..=3)),
        }
    }

    fn script(&mut self, name: &str, keys: Vec<String>, args: Vec<String>) -> Op {
        let by_sha = self.rng.random_bool(0.5);
        let head = if by_sha {
            vec![b"EVALSHA".to_vec(), self.shas[name].clone().into_bytes()]
        } else {
            vec![b"EVAL".to_vec(), self.scripts[name].clone().into_bytes()]
        };
        let mut argv = head;
        argv.push(keys.len().to_string().into_bytes());
        let label = format!("{name} keys={keys:?} args={args:?}");
        argv.extend(keys.into_iter().map(String::into_bytes));
        argv.extend(args.into_iter().map(String::into_bytes));
        Op { label, argv }
    }

    fn plain(&mut self, args: Vec<String>) -> Op {
        Op {
            label: args.join(" "),
            argv: args.into_iter().map(String::into_bytes).collect(),
        }
    }

    /// The lock keys, lines, leases and records of `resources`, as the line's scripts take them.
    fn lined_keys(resources: &[&str]) -> Vec<String> {
        let mut keys: Vec<String> = resources.iter().map(|r| key(r)).collect();
        for suffix in [":queue", ":leases", ":held"] {
            keys.extend(resources.iter().map(|r| companion(r, suffix)));
        }
        keys
    }

    fn fences(resources: &[&str]) -> Vec<String> {
        resources.iter().map(|r| companion(r, ":fence")).collect()
    }

    pub fn next(&mut self) -> Op {
        let fencing = self.rng.random_bool(0.3);
        let lasts = "2000".to_owned();
        match self.rng.random_range(0..100) {
            0..=9 => {
                let r = self.resource();
                let mut keys = Self::lined_keys(&[r]);
                let mut args = vec![self.token(), self.ttl()];
                if fencing {
                    keys.extend(Self::fences(&[r]));
                    args.push(lasts);
                }
                self.script("acquire", keys, args)
            }
            10..=13 => {
                let rs = self.resources();
                let mut keys = Self::lined_keys(&rs);
                let mut args = vec![self.token(), self.ttl(), rs.len().to_string()];
                if fencing {
                    keys.extend(Self::fences(&rs));
                    args.push(lasts);
                }
                self.script("acquire_many", keys, args)
            }
            14..=18 => {
                let r = self.resource();
                let owner = self.owner();
                let mut keys = Self::lined_keys(&[r]);
                keys.push(companion(r, ":took"));
                let nonce = if self.rng.random_bool(0.5) {
                    "0123456789abcdef0123456789abcdef"
                } else {
                    "fedcba9876543210fedcba9876543210"
                };
                let token = format!("{nonce}@{owner}");
                let expected = if self.rng.random_bool(0.5) {
                    String::new()
                } else {
                    self.token()
                };
                let mut args = vec![token, self.ttl(), owner.to_owned(), expected];
                if fencing {
                    keys.extend(Self::fences(&[r]));
                    args.push(lasts);
                }
                self.script("acquire_owned", keys, args)
            }
            19..=30 => {
                let owned = self.rng.random_bool(0.2);
                let rs = if owned {
                    vec![self.resource()]
                } else {
                    self.resources()
                };
                let waiter = self.waiter();
                let mut keys = Self::lined_keys(&rs);
                let token = if self.rng.random_bool(0.5) {
                    format!("~queued:{waiter}")
                } else {
                    self.token()
                };
                let order = self.rng.random_range(1..=5).to_string();
                let lease = ["5", "50", "300", "2000"]
                    .choose(self.rng)
                    .copied()
                    .unwrap_or("300")
                    .to_owned();
                let mut args = vec![
                    token,
                    self.ttl(),
                    rs.len().to_string(),
                    waiter.to_owned(),
                    order,
                    lease,
                    lasts,
                ];
                if owned {
                    keys.push(companion(rs[0], ":took"));
                    args.push(self.owner().to_owned());
                    args.push(if self.rng.random_bool(0.5) {
                        String::new()
                    } else {
                        self.token()
                    });
                }
                if fencing {
                    keys.extend(Self::fences(&rs));
                }
                self.script("acquire_queued", keys, args)
            }
            31..=35 => {
                let rs = self.resources();
                let keys = Self::lined_keys(&rs);
                let mut args = vec![self.waiter().to_owned(), self.ttl(), rs.len().to_string()];
                if self.rng.random_bool(0.3) {
                    args.push("holding".to_owned());
                }
                self.script("dequeue", keys, args)
            }
            36..=43 => {
                let rs = self.resources();
                let mut keys = Self::lined_keys(&rs);
                let mut args = vec![self.token(), self.ttl(), rs.len().to_string()];
                if rs.len() == 1 && self.rng.random_bool(0.2) {
                    keys.push(companion(rs[0], ":took"));
                }
                match self.rng.random_range(0..4) {
                    0 => args.push(self.waiter().to_owned()),
                    1 => {
                        args.push(self.waiter().to_owned());
                        args.push(self.rng.random_range(1..=5).to_string());
                        args.push("300".to_owned());
                    }
                    _ => {}
                }
                self.script("release", keys, args)
            }
            44..=48 => {
                let rs = self.resources();
                let with_records = self.rng.random_bool(0.5);
                let mut keys: Vec<String> = rs.iter().map(|r| key(r)).collect();
                let mut args = vec![self.token(), self.ttl()];
                if with_records {
                    keys.extend(rs.iter().map(|r| companion(r, ":held")));
                    args.push(rs.len().to_string());
                } else {
                    args.push(String::new());
                }
                if self.rng.random_bool(0.15) {
                    args.push("mark".to_owned());
                    args.push(companion(rs[0], ":elected"));
                }
                self.script("extend", keys, args)
            }
            49..=51 => {
                let r = self.resource();
                let keys = vec![
                    key(r),
                    companion(r, ":queue"),
                    companion(r, ":leases"),
                    companion(r, ":took"),
                    companion(r, ":held"),
                ];
                let mut args = vec![self.token(), self.ttl(), self.ttl()];
                if self.rng.random_bool(0.3) {
                    args.push(self.waiter().to_owned());
                    args.push("2".to_owned());
                    args.push("300".to_owned());
                }
                self.script("restore", keys, args)
            }
            52..=54 => {
                let r = self.resource();
                let keys = vec![key(r), companion(r, ":readers"), companion(r, ":writers")];
                let args = vec![self.token(), self.ttl()];
                self.script("acquire_read", keys, args)
            }
            55..=57 => {
                let r = self.resource();
                let mut keys = vec![key(r), companion(r, ":readers"), companion(r, ":writers")];
                let wait = ["1", "50", "500"]
                    .choose(self.rng)
                    .copied()
                    .unwrap_or("1")
                    .to_owned();
                let mut args = vec![self.token(), self.ttl(), self.waiter().to_owned(), wait];
                if fencing {
                    keys.push(companion(r, ":fence"));
                    args.push(lasts);
                }
                self.script("acquire_write", keys, args)
            }
            58..=59 => {
                let r = self.resource();
                let args = vec![self.token(), self.ttl()];
                self.script("extend_read", vec![companion(r, ":readers")], args)
            }
            60..=61 => {
                let r = self.resource();
                let keys = vec![companion(r, ":readers"), companion(r, ":writers")];
                let args = vec![self.token(), companion(r, ":rw:drained")];
                self.script("release_read", keys, args)
            }
            62..=63 => {
                let r = self.resource();
                let keys = vec![key(r), companion(r, ":writers")];
                let args = vec![self.token(), companion(r, ":rw"), self.waiter().to_owned()];
                self.script("release_write", keys, args)
            }
            64..=65 => {
                let rs = self.resources();
                let mut keys: Vec<String> = rs.iter().map(|r| key(r)).collect();
                keys.extend(Self::fences(&rs));
                let mut args = vec![self.token(), lasts];
                for _ in &rs {
                    args.push(
                        (1_795_000_000_000_000u64 + self.rng.random_range(0..3_000_000_000u64))
                            .to_string(),
                    );
                }
                self.script("raise_fence", keys, args)
            }
            66..=67 => {
                let r = self.resource();
                let args = vec![self.token(), companion(r, ":elected")];
                self.script("confirm_leader", vec![key(r)], args)
            }
            68..=69 => {
                let r = self.resource();
                self.script("read_leader", vec![key(r), companion(r, ":held")], vec![])
            }
            70..=72 => {
                let r = self.resource();
                let keys = vec![
                    key(r),
                    companion(r, ":queue"),
                    companion(r, ":leases"),
                    companion(r, ":readers"),
                    companion(r, ":writers"),
                    companion(r, ":held"),
                ];
                self.script("inspect", keys, vec![])
            }
            // Plain commands: the library's bare attempt, and what a foreign client may send.
            73..=78 => {
                let r = self.resource();
                let (token, ttl) = (self.token(), self.ttl());
                self.plain(vec![
                    "SET".into(),
                    key(r),
                    token,
                    "NX".into(),
                    "PX".into(),
                    ttl,
                ])
            }
            79..=80 => {
                let r = self.resource();
                let (token, ttl) = (self.token(), self.ttl());
                self.plain(vec![
                    "SET".into(),
                    key(r),
                    token,
                    "PX".into(),
                    ttl,
                    "GET".into(),
                ])
            }
            81..=82 => {
                let r = self.resource();
                let ttl = self.ttl();
                let gt = if self.rng.random_bool(0.5) {
                    "GT"
                } else {
                    "LT"
                };
                self.plain(vec!["PEXPIRE".into(), key(r), ttl, gt.into()])
            }
            83 => {
                let r = self.resource();
                self.plain(vec!["PERSIST".into(), key(r)])
            }
            84..=85 => {
                let r = self.resource();
                let what = ["GET", "PTTL", "PEXPIRETIME", "TYPE", "EXISTS"]
                    .choose(self.rng)
                    .copied()
                    .unwrap_or("GET");
                self.plain(vec![what.into(), key(r)])
            }
            86 => {
                let r = self.resource();
                let suffix = ["", ":queue", ":leases", ":held", ":fence", ":took"]
                    .choose(self.rng)
                    .copied()
                    .unwrap_or("");
                let target = if suffix.is_empty() {
                    key(r)
                } else {
                    companion(r, suffix)
                };
                self.plain(vec!["DEL".into(), target])
            }
            87..=88 => {
                let r = self.resource();
                let score = ["1", "2.5", "-inf", "+inf", "1795920000000"]
                    .choose(self.rng)
                    .copied()
                    .unwrap_or("1")
                    .to_owned();
                let options: &[&str] = [&[][..], &["NX"], &["XX", "GT"], &["CH"], &["LT", "CH"]]
                    .choose(self.rng)
                    .copied()
                    .unwrap_or(&[]);
                let mut args = vec!["ZADD".to_owned(), companion(r, ":queue")];
                args.extend(options.iter().map(|o| (*o).to_owned()));
                args.push(score);
                args.push(self.waiter().to_owned());
                self.plain(args)
            }
            89..=90 => {
                let r = self.resource();
                let set = companion(
                    r,
                    if self.rng.random_bool(0.5) {
                        ":queue"
                    } else {
                        ":leases"
                    },
                );
                let (min, max) = [("-inf", "+inf"), ("(1", "3"), ("-inf", "(2.5"), ("0", "(0")]
                    .choose(self.rng)
                    .copied()
                    .unwrap_or(("-inf", "+inf"));
                match self.rng.random_range(0..5) {
                    0 => self.plain(vec![
                        "ZRANGE".into(),
                        set,
                        "0".into(),
                        "-1".into(),
                        "WITHSCORES".into(),
                    ]),
                    1 => self.plain(vec![
                        "ZRANGE".into(),
                        set,
                        min.into(),
                        max.into(),
                        "BYSCORE".into(),
                    ]),
                    2 => self.plain(vec![
                        "ZRANGE".into(),
                        set,
                        max.into(),
                        min.into(),
                        "BYSCORE".into(),
                        "REV".into(),
                        "LIMIT".into(),
                        "0".into(),
                        "1".into(),
                    ]),
                    3 => self.plain(vec!["ZCOUNT".into(), set, min.into(), max.into()]),
                    _ => self.plain(vec!["ZREMRANGEBYSCORE".into(), set, min.into(), max.into()]),
                }
            }
            91 => {
                let r = self.resource();
                let member = self.waiter().to_owned();
                let what = ["ZSCORE", "ZREM"]
                    .choose(self.rng)
                    .copied()
                    .unwrap_or("ZSCORE");
                self.plain(vec![what.into(), companion(r, ":queue"), member])
            }
            92 => {
                let r = self.resource();
                let token = self.token();
                let value = if self.rng.random_bool(0.5) {
                    String::new()
                } else {
                    self.token()
                };
                self.plain(vec!["HSET".into(), companion(r, ":took"), token, value])
            }
            93 => {
                let r = self.resource();
                self.plain(vec!["HGETALL".into(), companion(r, ":took")])
            }
            94 => {
                // A foreign value of another type on a lock key: the scripts then meet WRONGTYPE.
                // (Now and then: a key of the wrong type stays until deleted, and fails every
                // script that meets it meanwhile.)
                let r = self.resource();
                match self.rng.random_range(0..6) {
                    0 => self.plain(vec!["ZADD".into(), key(r), "1".into(), "x".into()]),
                    1 => self.plain(vec![
                        "HSET".into(),
                        companion(r, ":queue"),
                        "f".into(),
                        "v".into(),
                    ]),
                    _ => self.plain(vec!["DEL".into(), key(r), companion(r, ":queue")]),
                }
            }
            95 => {
                let r = self.resource();
                let ttl = self.ttl();
                self.plain(vec![
                    "SET".into(),
                    key(r),
                    "t1".into(),
                    "PXAT".into(),
                    format!("{}", 1_795_000_000_000u64 + ttl.parse::<u64>().unwrap_or(0)),
                    "NX".into(),
                ])
            }
            96 => {
                let r = self.resource();
                let ttl = self.ttl();
                let opt = ["NX", "XX"].choose(self.rng).copied().unwrap_or("NX");
                self.plain(vec![
                    "PEXPIRE".into(),
                    companion(r, ":queue"),
                    ttl,
                    opt.into(),
                ])
            }
            97 => self.plain(vec!["KEYS".into(), "*".into()]),
            98 => {
                let r = self.resource();
                self.plain(vec![
                    "SET".into(),
                    companion(r, ":held"),
                    "t1|1795920000000|1795920001000".into(),
                    "KEEPTTL".into(),
                ])
            }
            _ => {
                let r = self.resource();
                self.plain(vec!["INCR".into(), companion(r, ":fence")])
            }
        }
    }
}
