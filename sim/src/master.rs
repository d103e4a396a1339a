//! One simulated master: its keyspace, its clock, its script cache, its connections, and the
//! faults a master suffers (a crash that keeps or loses its data, a restart from an earlier
//! state).
//!
//! Connection commands are answered here (`HELLO`, `AUTH`, `CLIENT`, `SELECT`, subscriptions,
//! `EVAL`/`EVALSHA`/`SCRIPT`); the data commands in `commands`.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;

use tokio::sync::mpsc::UnboundedSender;

use crate::clock::Clock;
use crate::commands::{self, Ctx};
use crate::data::Data;
pub use crate::data::{Config, DEFAULT_VERSION};
use crate::keyspace::{Entry, Keyspace};
use crate::lua::Engine;
use crate::pubsub::{ClientId, Outbox, PubSub};
use crate::reply::{errors, Reply};

/// The protocol a connection speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Protocol {
    /// RESP2, the default.
    Resp2,
    /// RESP3, after `HELLO 3`.
    Resp3,
}

/// Masters made so far in this process: each gets a `run_id` of its own.
static INSTANCES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The `run_id` of master number `instance` after `restarts` restarts.
fn run_id(instance: u64, restarts: u64) -> String {
    sha1_smol::Sha1::from(format!("quorumlock-sim {instance} {restarts}"))
        .digest()
        .to_string()
}

/// One connection's state.
#[derive(Debug)]
struct Client {
    protocol: Protocol,
    authenticated: bool,
    name: Option<Vec<u8>>,
}

/// A master's data at one moment, to restart from later (a failover to a replica that missed
/// the writes since).
#[derive(Debug, Clone)]
pub struct Snapshot {
    keyspace: Keyspace,
}

/// A command a client sent, as a [`Monitor`] sees it: once before it runs (`replies` is
/// `None`), once after (every reply it wrote).
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Monitored<'a> {
    /// The command and its arguments.
    pub argv: &'a [Vec<u8>],
    /// Its replies, once it ran.
    pub replies: Option<&'a [Reply]>,
}

/// Sees every command a master runs, its connections' and [`Master::run`]'s (the scripts' own
/// calls are part of their `EVAL`), before and after it runs, with the master as it stands
/// then: Redis's `MONITOR`, with the keyspace to read too. Set with [`Master::set_monitor`].
pub type Monitor = Box<dyn FnMut(&Master, Monitored<'_>) + Send>;

/// The error of a master that could not be set up.
#[derive(Debug)]
pub struct Error(String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "simulated master not set up: {}", self.0)
    }
}

impl std::error::Error for Error {}

/// A simulated Redis master: commands in (argv), replies out, on a clock of its own.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use quorumlock_sim::{Clock, Master, Reply, VirtualTime};
///
/// let time = VirtualTime::new(Duration::from_secs(1_700_000_000));
/// let mut master = Master::new(Clock::following(&time))?;
/// assert_eq!(master.run(&["SET", "k", "v", "NX", "PX", "100"]), Reply::ok());
/// time.advance(Duration::from_millis(101));
/// assert_eq!(master.run(&["GET", "k"]), Reply::Nil);
/// # Ok::<(), quorumlock_sim::MasterError>(())
/// ```
pub struct Master {
    clock: Clock,
    data: Data,
    /// Scripts by SHA1 (lower-case hex).
    scripts: BTreeMap<String, Vec<u8>>,
    engine: Engine,
    clients: BTreeMap<ClientId, Client>,
    next_client: u64,
    restarts: u64,
    instance: u64,
    monitor: Option<Monitor>,
}

impl fmt::Debug for Master {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Master")
            .field("clock", &self.clock)
            .field(
                "keys",
                &self.data.keyspace.live(self.clock.now_ms()).count(),
            )
            .field("scripts", &self.scripts.len())
            .field("clients", &self.clients.len())
            .field("restarts", &self.restarts)
            .finish()
    }
}

/// The connection [`Master::run`] uses: always there, always logged in.
const CONSOLE: ClientId = ClientId(0);

impl Master {
    /// An empty master with the default [`Config`], reading `clock`.
    ///
    /// # Errors
    ///
    /// If the embedded Lua cannot be set up.
    pub fn new(clock: Clock) -> Result<Master, Error> {
        Master::with_config(clock, Config::default())
    }

    /// An empty master set up as `config` says, reading `clock`.
    ///
    /// # Errors
    ///
    /// If the embedded Lua cannot be set up.
    pub fn with_config(clock: Clock, config: Config) -> Result<Master, Error> {
        let instance = INSTANCES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut master = Master {
            clock,
            data: Data {
                keyspace: Keyspace::default(),
                pubsub: PubSub::default(),
                config,
                run_id: run_id(instance, 0),
            },
            scripts: BTreeMap::new(),
            engine: Engine::new().map_err(Error)?,
            clients: BTreeMap::new(),
            next_client: 1,
            restarts: 0,
            instance,
            monitor: None,
        };
        master.open_console();
        Ok(master)
    }

    fn open_console(&mut self) {
        let console = Client {
            protocol: Protocol::Resp2,
            authenticated: true,
            name: None,
        };
        self.clients.insert(CONSOLE, console);
        self.data
            .pubsub
            .connect(CONSOLE, Outbox::Queue(VecDeque::new()));
    }

    /// The master's clock.
    pub fn clock(&self) -> &Clock {
        &self.clock
    }

    /// The master's clock, to skew, step or slow down.
    pub fn clock_mut(&mut self) -> &mut Clock {
        &mut self.clock
    }

    /// How it is set up.
    pub fn config(&self) -> &Config {
        &self.data.config
    }

    /// How many times it restarted (crashes and restores).
    pub fn restarts(&self) -> u64 {
        self.restarts
    }

    /// Opens a connection whose messages are queued for [`take_messages`](Self::take_messages).
    pub fn connect(&mut self) -> ClientId {
        self.open(Outbox::Queue(VecDeque::new()))
    }

    /// Opens a connection whose messages are sent to `outbox`. When the master forgets the
    /// connection (a crash, a restore), `outbox` is dropped: its receiver learns the connection
    /// is gone.
    pub fn connect_with(&mut self, outbox: UnboundedSender<Reply>) -> ClientId {
        self.open(Outbox::Channel(outbox))
    }

    fn open(&mut self, outbox: Outbox) -> ClientId {
        let id = ClientId(self.next_client);
        self.next_client += 1;
        let client = Client {
            protocol: Protocol::Resp2,
            authenticated: self.data.config.password.is_none(),
            name: None,
        };
        self.clients.insert(id, client);
        self.data.pubsub.connect(id, outbox);
        id
    }

    /// Closes a connection: its subscriptions go.
    pub fn disconnect(&mut self, client: ClientId) {
        if client != CONSOLE {
            self.clients.remove(&client);
            self.data.pubsub.disconnect(client);
        }
    }

    /// Whether the master still knows the connection (a crash forgets every one).
    pub fn is_connected(&self, client: ClientId) -> bool {
        self.clients.contains_key(&client)
    }

    /// The protocol the connection speaks (RESP2 until `HELLO 3`).
    pub fn protocol(&self, client: ClientId) -> Protocol {
        self.clients
            .get(&client)
            .map_or(Protocol::Resp2, |c| c.protocol)
    }

    /// The messages queued for a connection opened with [`connect`](Self::connect).
    pub fn take_messages(&mut self, client: ClientId) -> Vec<Reply> {
        self.data.pubsub.take_queued(client)
    }

    /// Runs `args` on the master's own connection: a shorthand for tests.
    pub fn run(&mut self, args: &[&str]) -> Reply {
        let argv: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        self.execute(CONSOLE, &argv)
    }

    /// Runs the command `argv` for `client`; its reply (for a subscription command with several
    /// channels, the first confirmation: see [`execute_frames`](Self::execute_frames)).
    pub fn execute(&mut self, client: ClientId, argv: &[Vec<u8>]) -> Reply {
        self.execute_frames(client, argv)
            .into_iter()
            .next()
            .unwrap_or(Reply::Nil)
    }

    /// Runs the command `argv` for `client`; every reply it writes, in order (one, except for
    /// a subscription command, which confirms each channel).
    pub fn execute_frames(&mut self, client: ClientId, argv: &[Vec<u8>]) -> Vec<Reply> {
        let Some(mut monitor) = self.monitor.take() else {
            return self.run_frames(client, argv);
        };
        let replies = None;
        monitor(self, Monitored { argv, replies });
        let frames = self.run_frames(client, argv);
        let replies = Some(frames.as_slice());
        monitor(self, Monitored { argv, replies });
        self.monitor = Some(monitor);
        frames
    }

    /// Sets what sees every command from now on (see [`Monitor`]); `None` takes it away.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::sync::{Arc, Mutex};
    /// use std::time::Duration;
    /// use quorumlock_sim::{Clock, Master, Monitored, VirtualTime};
    ///
    /// let time = VirtualTime::new(Duration::from_secs(1_700_000_000));
    /// let mut master = Master::new(Clock::following(&time))?;
    /// // What the key held before and after each command.
    /// let seen = Arc::new(Mutex::new(Vec::new()));
    /// let log = seen.clone();
    /// master.set_monitor(Some(Box::new(move |m: &Master, c: Monitored<'_>| {
    ///     let value = m.peek(b"k").map(|e| e.value.clone());
    ///     log.lock().unwrap().push((c.replies.is_some(), value));
    /// })));
    /// master.run(&["SET", "k", "v"]);
    /// let seen = seen.lock().unwrap();
    /// assert_eq!(seen.len(), 2);
    /// assert_eq!(seen[0], (false, None));
    /// assert!(seen[1].0 && seen[1].1.is_some());
    /// # Ok::<(), quorumlock_sim::MasterError>(())
    /// ```
    pub fn set_monitor(&mut self, monitor: Option<Monitor>) {
        self.monitor = monitor;
    }

    /// [`execute_frames`](Self::execute_frames) unmonitored.
    fn run_frames(&mut self, client: ClientId, argv: &[Vec<u8>]) -> Vec<Reply> {
        let Some(first) = argv.first() else {
            return vec![Reply::error("ERR empty command")];
        };
        if !self.clients.contains_key(&client) {
            return vec![Reply::error("ERR connection closed by the master")];
        }
        let name = String::from_utf8_lossy(first).to_ascii_lowercase();
        let authenticated = self.clients.get(&client).is_some_and(|c| c.authenticated);
        if !authenticated && !matches!(name.as_str(), "auth" | "hello" | "quit") {
            return vec![Reply::error("NOAUTH Authentication required.")];
        }
        let args = &argv[1..];
        let one = match name.as_str() {
            "hello" => self.hello(client, args),
            "auth" => self.auth(client, args),
            "client" => self.client(client, args),
            "select" => match args {
                [db] if commands::parse_i64(db) == Some(0) => Reply::ok(),
                [db] if commands::parse_i64(db).is_some() => {
                    Reply::error("ERR DB index is out of range")
                }
                [_] => Reply::error(errors::NOT_INTEGER),
                _ => commands::wrong_arity("select"),
            },
            "quit" => Reply::ok(),
            "eval" => self.eval(args, false),
            "evalsha" => self.eval(args, true),
            "script" => self.script(args),
            "ssubscribe" | "subscribe" | "sunsubscribe" | "unsubscribe" => {
                return self.subscription(client, &name, args);
            }
            _ => {
                let now = self.clock.now();
                let mut ctx = Ctx {
                    data: &mut self.data,
                    now,
                };
                commands::dispatch(&mut ctx, argv)
            }
        };
        vec![one]
    }

    /// `HELLO [protover [AUTH user pass] [SETNAME name]]`.
    fn hello(&mut self, client: ClientId, args: &[Vec<u8>]) -> Reply {
        let mut protocol = None;
        if let Some(version) = args.first() {
            protocol = match commands::parse_i64(version) {
                Some(2) => Some(Protocol::Resp2),
                Some(3) => Some(Protocol::Resp3),
                Some(_) => return Reply::error("NOPROTO unsupported protocol version"),
                None => {
                    return Reply::error("ERR Protocol version is not an integer or out of range")
                }
            };
        }
        let mut i = 1;
        let mut name = None;
        while i < args.len() {
            match String::from_utf8_lossy(&args[i])
                .to_ascii_uppercase()
                .as_str()
            {
                "AUTH" if i + 2 < args.len() => {
                    if let Err(e) = self.login(client, &args[i + 1], &args[i + 2]) {
                        return e;
                    }
                    i += 3;
                }
                "SETNAME" if i + 1 < args.len() => {
                    name = Some(args[i + 1].clone());
                    i += 2;
                }
                other => {
                    return Reply::error(format!("ERR Syntax error in HELLO option '{other}'"))
                }
            }
        }
        let Some(state) = self.clients.get_mut(&client) else {
            return Reply::error("ERR connection closed by the master");
        };
        if !state.authenticated {
            return Reply::error(
                "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time",
            );
        }
        if let Some(protocol) = protocol {
            state.protocol = protocol;
        }
        if name.is_some() {
            state.name = name;
        }
        let proto = if state.protocol == Protocol::Resp3 {
            3
        } else {
            2
        };
        let field = |k: &str, v: Reply| (Reply::bulk(k), v);
        Reply::Map(vec![
            field("server", Reply::bulk("redis")),
            field("version", Reply::bulk(&self.data.config.version)),
            field("proto", Reply::Int(proto)),
            field("id", Reply::Int(client.0 as i64)),
            field("mode", Reply::bulk("standalone")),
            field("role", Reply::bulk("master")),
            field("modules", Reply::Array(Vec::new())),
        ])
    }

    /// `AUTH [user] password`.
    fn auth(&mut self, client: ClientId, args: &[Vec<u8>]) -> Reply {
        let (user, password) = match args {
            [password] => (&b"default"[..], password),
            [user, password] => (user.as_slice(), password),
            _ => return commands::wrong_arity("auth"),
        };
        if self.data.config.password.is_none() && args.len() == 1 {
            return Reply::error(
                "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
            );
        }
        match self.login(client, user, password) {
            Ok(()) => Reply::ok(),
            Err(e) => e,
        }
    }

    fn login(&mut self, client: ClientId, user: &[u8], password: &[u8]) -> Result<(), Reply> {
        let expected = self.data.config.password.as_deref();
        let good = user == b"default" && expected.is_none_or(|p| p.as_bytes() == password);
        if !good {
            return Err(Reply::error(
                "WRONGPASS invalid username-password pair or user is disabled.",
            ));
        }
        if let Some(state) = self.clients.get_mut(&client) {
            state.authenticated = true;
        }
        Ok(())
    }

    /// `CLIENT SETINFO`, `SETNAME`, `GETNAME`, `ID` (anything else: OK).
    fn client(&mut self, client: ClientId, args: &[Vec<u8>]) -> Reply {
        let Some(sub) = args.first() else {
            return commands::wrong_arity("client");
        };
        match String::from_utf8_lossy(sub).to_ascii_uppercase().as_str() {
            "SETNAME" => match (args.get(1), self.clients.get_mut(&client)) {
                (Some(name), Some(state)) => {
                    state.name = Some(name.clone());
                    Reply::ok()
                }
                _ => commands::wrong_arity("client|setname"),
            },
            "GETNAME" => match self.clients.get(&client).and_then(|c| c.name.clone()) {
                Some(name) => Reply::Bulk(name),
                None => Reply::Nil,
            },
            "ID" => Reply::Int(client.0 as i64),
            _ => Reply::ok(),
        }
    }

    /// `EVAL script numkeys key... arg...`, or `EVALSHA sha1 ...`.
    fn eval(&mut self, args: &[Vec<u8>], by_sha: bool) -> Reply {
        let name = if by_sha { "evalsha" } else { "eval" };
        if args.len() < 2 {
            return commands::wrong_arity(name);
        }
        let Some(numkeys) = commands::parse_i64(&args[1]) else {
            return Reply::error(errors::NOT_INTEGER);
        };
        if numkeys < 0 {
            return Reply::error("ERR Number of keys can't be negative");
        }
        let rest = &args[2..];
        let Some(numkeys) = usize::try_from(numkeys).ok().filter(|n| *n <= rest.len()) else {
            return Reply::error("ERR Number of keys can't be greater than number of args");
        };
        let sha = if by_sha {
            let sha = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
            if !self.scripts.contains_key(&sha) {
                return Reply::error("NOSCRIPT No matching script. Please use EVAL.");
            }
            sha
        } else {
            match self.load(&args[0]) {
                Ok(sha) => sha,
                Err(e) => return e,
            }
        };
        if let Some(body) = self.scripts.get(&sha) {
            if let Err(e) = self.engine.compile(&sha, body) {
                return e;
            }
        }
        let (keys, argv) = rest.split_at(numkeys);
        // One reading of the clock for the whole script: time stands still while it runs.
        let now = self.clock.now();
        let data = &mut self.data;
        let mut exec = |argv: &[Vec<u8>]| {
            let name = String::from_utf8_lossy(&argv[0]).to_ascii_lowercase();
            if commands::knows(&name) {
                if !commands::arity_fits(&name, argv.len()) {
                    return Reply::error(
                        "ERR Wrong number of args calling Redis command from script",
                    );
                }
                let mut ctx = Ctx {
                    data: &mut *data,
                    now,
                };
                commands::dispatch(&mut ctx, argv)
            } else if CONNECTION_COMMANDS.contains(&name.as_str()) {
                Reply::error("ERR This Redis command is not allowed from script")
            } else {
                Reply::error("ERR Unknown Redis command called from script")
            }
        };
        self.engine.run(&sha, keys, argv, &mut exec)
    }

    /// Caches `body`, compiled; its SHA1.
    fn load(&mut self, body: &[u8]) -> Result<String, Reply> {
        let sha = crate::lua::sha1_of(body);
        self.engine.compile(&sha, body)?;
        self.scripts.insert(sha.clone(), body.to_vec());
        Ok(sha)
    }

    /// `SCRIPT LOAD body`, `SCRIPT EXISTS sha...`, `SCRIPT FLUSH [ASYNC|SYNC]`.
    fn script(&mut self, args: &[Vec<u8>]) -> Reply {
        let Some(sub) = args.first() else {
            return commands::wrong_arity("script");
        };
        match (
            String::from_utf8_lossy(sub).to_ascii_uppercase().as_str(),
            &args[1..],
        ) {
            ("LOAD", [body]) => match self.load(body) {
                Ok(sha) => Reply::bulk(sha),
                Err(e) => e,
            },
            ("EXISTS", shas) if !shas.is_empty() => Reply::Array(
                shas.iter()
                    .map(|s| {
                        let sha = String::from_utf8_lossy(s).to_ascii_lowercase();
                        Reply::Int(i64::from(self.scripts.contains_key(&sha)))
                    })
                    .collect(),
            ),
            ("FLUSH", _) => {
                self.scripts.clear();
                self.engine.flush();
                Reply::ok()
            }
            (sub, _) => Reply::error(format!(
                "ERR unknown subcommand or wrong number of arguments for '{sub}'"
            )),
        }
    }

    /// `SSUBSCRIBE`, `SUBSCRIBE`, `SUNSUBSCRIBE`, `UNSUBSCRIBE`: one confirmation per channel.
    fn subscription(&mut self, client: ClientId, name: &str, channels: &[Vec<u8>]) -> Vec<Reply> {
        let sharded = name.starts_with("ss") || name.starts_with("sun");
        let subscribe = !name.contains("unsubscribe");
        if subscribe && channels.is_empty() {
            return vec![commands::wrong_arity(name)];
        }
        let pubsub = &mut self.data.pubsub;
        let channels: Vec<Vec<u8>> = if channels.is_empty() {
            pubsub.subscriptions(client, sharded)
        } else {
            channels.to_vec()
        };
        if channels.is_empty() {
            return vec![Reply::Push(vec![
                Reply::bulk(name),
                Reply::Nil,
                Reply::Int(0),
            ])];
        }
        channels
            .iter()
            .map(|channel| {
                let count = if subscribe {
                    pubsub.subscribe(client, sharded, channel)
                } else {
                    pubsub.unsubscribe(client, sharded, channel)
                };
                Reply::Push(vec![
                    Reply::bulk(name),
                    Reply::Bulk(channel.clone()),
                    Reply::Int(count),
                ])
            })
            .collect()
    }

    /// The master crashes and restarts at once: every connection is dropped and the script
    /// cache is empty. With `keep_data` (an append-only file that had every write) the keyspace
    /// is as it was; without, the master restarts empty.
    pub fn crash(&mut self, keep_data: bool) {
        let keyspace = if keep_data {
            std::mem::take(&mut self.data.keyspace)
        } else {
            Keyspace::default()
        };
        self.restart(keyspace);
    }

    /// The data as it is now, to [`restore_from`](Self::restore_from) later.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            keyspace: self.data.keyspace.clone(),
        }
    }

    /// The master restarts from `snapshot` (a lossy failover: the writes since are lost):
    /// every connection is dropped and the script cache is empty.
    pub fn restore_from(&mut self, snapshot: &Snapshot) {
        self.restart(snapshot.keyspace.clone());
    }

    /// Puts the keyspace back as `snapshot` holds it, keeping the connections and the scripts:
    /// not a fault, a way for a test to run a command again from the same state.
    pub fn rewind(&mut self, snapshot: &Snapshot) {
        self.data.keyspace = snapshot.keyspace.clone();
    }

    fn restart(&mut self, keyspace: Keyspace) {
        self.data.keyspace = keyspace;
        self.data.pubsub.disconnect_all();
        self.clients.clear();
        self.scripts.clear();
        self.engine.flush();
        self.restarts += 1;
        self.data.run_id = run_id(self.instance, self.restarts);
        self.open_console();
    }

    /// Writes `key` as `entry` says, value and expiry, replacing whatever it held, whatever the
    /// clock says (an expiry already past leaves a key nobody sees): to put a master in a given
    /// state.
    pub fn put(&mut self, key: &[u8], entry: Entry) {
        self.data.keyspace.insert(key, entry);
    }

    /// `key`'s value and expiry if it is live on the master's clock now: an observer's read,
    /// which changes nothing (no expiry is carried out, no command counted).
    pub fn peek(&self, key: &[u8]) -> Option<&Entry> {
        self.data.keyspace.peek(key, self.clock.now_ms())
    }

    /// Every key live on the master's clock now, in byte order, with its value and expiry.
    pub fn keyspace(&self) -> BTreeMap<Vec<u8>, Entry> {
        let now = self.clock.now_ms();
        self.data
            .keyspace
            .live(now)
            .map(|(k, e)| (k.to_vec(), e.clone()))
            .collect()
    }
}

/// The commands answered here, which a script may not run.
const CONNECTION_COMMANDS: [&str; 13] = [
    "hello",
    "auth",
    "client",
    "select",
    "quit",
    "eval",
    "evalsha",
    "script",
    "ssubscribe",
    "subscribe",
    "sunsubscribe",
    "unsubscribe",
    "multi",
];

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::VirtualTime;

    const START: Duration = Duration::from_secs(1_700_000_000);

    fn master() -> (VirtualTime, Master) {
        let time = VirtualTime::new(START);
        let master = Master::new(Clock::following(&time)).unwrap();
        (time, master)
    }

    fn bulk(text: &str) -> Reply {
        Reply::bulk(text)
    }

    fn eval(master: &mut Master, script: &str, keys: &[&str], args: &[&str]) -> Reply {
        let numkeys = keys.len().to_string();
        let mut argv = vec!["EVAL", script, &numkeys];
        argv.extend_from_slice(keys);
        argv.extend_from_slice(args);
        master.run(&argv)
    }

    #[test]
    fn a_key_expires_on_its_own_masters_clock() {
        let time = VirtualTime::new(START);
        let mut on_time = Master::new(Clock::following(&time)).unwrap();
        let mut ahead = Master::new(Clock::following(&time)).unwrap();
        ahead.clock_mut().step(50_000_000);
        for m in [&mut on_time, &mut ahead] {
            assert_eq!(m.run(&["SET", "k", "v", "PX", "100"]), Reply::ok());
        }
        // Both set it 100 ms ahead of their own clock: the same remaining life.
        assert_eq!(on_time.run(&["PTTL", "k"]), Reply::Int(100));
        assert_eq!(ahead.run(&["PTTL", "k"]), Reply::Int(100));
        time.advance(Duration::from_millis(100));
        assert_eq!(on_time.run(&["GET", "k"]), bulk("v"));
        assert_eq!(on_time.run(&["PTTL", "k"]), Reply::Int(0));
        // The clock stepped 50 ms ahead earlier has no effect on when its key expires...
        assert_eq!(ahead.run(&["GET", "k"]), bulk("v"));
        // ...but a step now does: the key is judged by the master's reading.
        ahead.clock_mut().step(1_000_000);
        assert_eq!(ahead.run(&["GET", "k"]), Reply::Nil);
        assert_eq!(ahead.run(&["EXISTS", "k"]), Reply::Int(0));
        time.advance(Duration::from_millis(1));
        assert_eq!(on_time.run(&["KEYS", "*"]), Reply::Array(vec![]));
        assert_eq!(on_time.run(&["DBSIZE"]), Reply::Int(0));
    }

    #[test]
    fn a_slow_clock_lets_a_key_outlive_its_ttl_in_virtual_time() {
        let (time, mut m) = master();
        m.clock_mut().set_rate(0.5);
        m.run(&["SET", "k", "v", "PX", "100"]);
        time.advance(Duration::from_millis(150));
        assert_eq!(m.run(&["PTTL", "k"]), Reply::Int(25));
    }

    #[test]
    fn pexpire_gt_never_touches_a_key_without_an_expiry_and_lt_always_does() {
        let (_, mut m) = master();
        m.run(&["SET", "k", "v"]);
        assert_eq!(m.run(&["PEXPIRE", "k", "1000", "GT"]), Reply::Int(0));
        assert_eq!(m.run(&["PTTL", "k"]), Reply::Int(-1));
        assert_eq!(m.run(&["PEXPIRE", "k", "1000", "LT"]), Reply::Int(1));
        assert_eq!(m.run(&["PEXPIRE", "k", "500", "GT"]), Reply::Int(0));
        assert_eq!(m.run(&["PEXPIRE", "k", "2000", "GT"]), Reply::Int(1));
        assert_eq!(m.run(&["PEXPIRE", "k", "10", "NX"]), Reply::Int(0));
        assert_eq!(m.run(&["PTTL", "k"]), Reply::Int(2000));
        assert_eq!(m.run(&["PEXPIRE", "nope", "10"]), Reply::Int(0));
        assert_eq!(
            m.run(&["PEXPIRE", "k", "10", "GT", "LT"]),
            Reply::error("ERR GT and LT options at the same time are not compatible")
        );
    }

    #[test]
    fn a_non_positive_pexpire_deletes_the_key() {
        let (_, mut m) = master();
        m.run(&["SET", "k", "v"]);
        assert_eq!(m.run(&["PEXPIRE", "k", "0"]), Reply::Int(1));
        assert_eq!(m.run(&["EXISTS", "k"]), Reply::Int(0));
        m.run(&["SET", "k", "v"]);
        assert_eq!(m.run(&["PEXPIREAT", "k", "1"]), Reply::Int(1));
        assert_eq!(m.run(&["TYPE", "k"]), Reply::Status("none".to_owned()));
    }

    #[test]
    fn pexpiretime_and_pttl_say_minus_two_for_a_missing_key_and_minus_one_for_no_expiry() {
        let (_, mut m) = master();
        assert_eq!(m.run(&["PEXPIRETIME", "k"]), Reply::Int(-2));
        assert_eq!(m.run(&["PTTL", "k"]), Reply::Int(-2));
        m.run(&["SET", "k", "v"]);
        assert_eq!(m.run(&["PEXPIRETIME", "k"]), Reply::Int(-1));
        m.run(&["SET", "k", "v", "PXAT", "1700000000500"]);
        assert_eq!(m.run(&["PEXPIRETIME", "k"]), Reply::Int(1_700_000_000_500));
        m.run(&["SET", "k", "w", "KEEPTTL"]);
        assert_eq!(m.run(&["PTTL", "k"]), Reply::Int(500));
        m.run(&["SET", "k", "x"]);
        assert_eq!(m.run(&["PTTL", "k"]), Reply::Int(-1));
    }

    #[test]
    fn set_options_behave_as_in_redis() {
        let (_, mut m) = master();
        assert_eq!(m.run(&["SET", "k", "1", "XX"]), Reply::Nil);
        assert_eq!(m.run(&["SET", "k", "1", "NX", "GET"]), Reply::Nil);
        assert_eq!(m.run(&["SET", "k", "2", "NX", "GET"]), bulk("1"));
        assert_eq!(m.run(&["SET", "k", "3", "XX", "GET", "EX", "5"]), bulk("1"));
        assert_eq!(m.run(&["PTTL", "k"]), Reply::Int(5000));
        let invalid = Reply::error("ERR invalid expire time in 'set' command");
        assert_eq!(m.run(&["SET", "k", "v", "PX", "0"]), invalid);
        assert_eq!(m.run(&["SET", "k", "v", "PX", "-5"]), invalid);
        assert_eq!(
            m.run(&["SET", "k", "v", "PX", "5", "EX", "5"]),
            Reply::error(errors::SYNTAX)
        );
        assert_eq!(
            m.run(&["SET", "k", "v", "NX", "XX"]),
            Reply::error(errors::SYNTAX)
        );
        assert_eq!(
            m.run(&["SET", "k", "v", "KEEPTTL", "PX", "5"]),
            Reply::error(errors::SYNTAX)
        );
        m.run(&["ZADD", "z", "1", "a"]);
        assert_eq!(
            m.run(&["SET", "z", "v", "GET"]),
            Reply::error(errors::WRONGTYPE)
        );
        assert_eq!(m.run(&["SET", "z", "v"]), Reply::ok());
        assert_eq!(m.run(&["GET", "z"]), bulk("v"));
    }

    #[test]
    fn zrange_byscore_reads_infinite_and_exclusive_bounds() {
        let (_, mut m) = master();
        m.run(&["ZADD", "z", "1", "a", "2", "b", "3", "c", "3", "d"]);
        let members = |items: &[&str]| Reply::Array(items.iter().map(|i| bulk(i)).collect());
        assert_eq!(
            m.run(&["ZRANGE", "z", "-inf", "(3", "BYSCORE"]),
            members(&["a", "b"])
        );
        assert_eq!(
            m.run(&["ZRANGE", "z", "(1", "+inf", "BYSCORE"]),
            members(&["b", "c", "d"])
        );
        assert_eq!(
            m.run(&["ZRANGE", "z", "+inf", "(1", "BYSCORE", "REV", "LIMIT", "1", "2"]),
            members(&["c", "b"])
        );
        assert_eq!(m.run(&["ZRANGE", "z", "0", "1"]), members(&["a", "b"]));
        assert_eq!(m.run(&["ZRANGE", "z", "-2", "-1"]), members(&["c", "d"]));
        assert_eq!(m.run(&["ZRANGE", "z", "5", "10"]), members(&[]));
        assert_eq!(
            m.run(&["ZRANGE", "z", "0", "0", "WITHSCORES"]),
            Reply::Pairs(vec![(bulk("a"), Reply::Double(1.0))])
        );
        assert_eq!(m.run(&["ZCOUNT", "z", "(1", "3"]), Reply::Int(3));
        assert_eq!(
            m.run(&["ZREMRANGEBYSCORE", "z", "-inf", "(3"]),
            Reply::Int(2)
        );
        assert_eq!(m.run(&["ZCARD", "z"]), Reply::Int(2));
        assert_eq!(
            m.run(&["ZRANGE", "z", "x", "1", "BYSCORE"]),
            Reply::error(errors::RANGE_NOT_FLOAT)
        );
    }

    #[test]
    fn zadd_gt_xx_only_raises_an_existing_score() {
        let (_, mut m) = master();
        assert_eq!(m.run(&["ZADD", "z", "XX", "GT", "5", "a"]), Reply::Int(0));
        assert_eq!(m.run(&["EXISTS", "z"]), Reply::Int(0));
        m.run(&["ZADD", "z", "5", "a"]);
        assert_eq!(
            m.run(&["ZADD", "z", "XX", "GT", "CH", "4", "a"]),
            Reply::Int(0)
        );
        assert_eq!(
            m.run(&["ZADD", "z", "XX", "GT", "CH", "6", "a", "7", "b"]),
            Reply::Int(1)
        );
        assert_eq!(m.run(&["ZSCORE", "z", "a"]), Reply::Double(6.0));
        assert_eq!(m.run(&["ZSCORE", "z", "b"]), Reply::Nil);
        assert_eq!(m.run(&["ZREM", "z", "a"]), Reply::Int(1));
        assert_eq!(m.run(&["EXISTS", "z"]), Reply::Int(0));
    }

    #[test]
    fn scores_reach_lua_as_redis_writes_them() {
        let (_, mut m) = master();
        m.run(&["ZADD", "z", "1.5", "a", "3", "b"]);
        let script =
            "return {redis.call('ZSCORE', KEYS[1], 'a'), redis.call('ZSCORE', KEYS[1], 'b')}";
        assert_eq!(
            eval(&mut m, script, &["z"], &[]),
            Reply::Array(vec![bulk("1.5"), bulk("3")])
        );
        // A number argument is written with %.17g.
        let script = "redis.call('ZADD', KEYS[1], 2.5, 'c', 1764383000123, 'd') return redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')";
        let reply = eval(&mut m, script, &["z"], &[]);
        let expected: Vec<Reply> = ["a", "1.5", "c", "2.5", "b", "3", "d", "1764383000123"]
            .iter()
            .map(|s| bulk(s))
            .collect();
        assert_eq!(reply, Reply::Array(expected));
    }

    #[test]
    fn lua_values_become_replies_as_redis_converts_them() {
        let (_, mut m) = master();
        assert_eq!(eval(&mut m, "return 3.7", &[], &[]), Reply::Int(3));
        assert_eq!(eval(&mut m, "return -3.7", &[], &[]), Reply::Int(-3));
        assert_eq!(eval(&mut m, "return true", &[], &[]), Reply::Int(1));
        assert_eq!(eval(&mut m, "return false", &[], &[]), Reply::Nil);
        assert_eq!(eval(&mut m, "return nil", &[], &[]), Reply::Nil);
        assert_eq!(
            eval(&mut m, "return {1, 'two', false, {3}, nil, 5}", &[], &[]),
            Reply::Array(vec![
                Reply::Int(1),
                bulk("two"),
                Reply::Nil,
                Reply::Array(vec![Reply::Int(3)])
            ])
        );
        assert_eq!(
            eval(&mut m, "return redis.status_reply('FINE')", &[], &[]),
            Reply::Status("FINE".to_owned())
        );
        assert_eq!(
            eval(&mut m, "return redis.error_reply('MYERR boom')", &[], &[]),
            Reply::error("MYERR boom")
        );
        assert_eq!(
            eval(&mut m, "return redis.error_reply('boom')", &[], &[]),
            Reply::error("ERR boom")
        );
        assert_eq!(
            eval(
                &mut m,
                "return {KEYS[1], ARGV[1], #ARGV}",
                &["k"],
                &["a", "b"]
            ),
            Reply::Array(vec![bulk("k"), bulk("a"), Reply::Int(2)])
        );
    }

    #[test]
    fn replies_become_lua_values_as_redis_converts_them() {
        let (_, mut m) = master();
        m.run(&["SET", "s", "v"]);
        let script = "
            local missing = redis.call('GET', 'nope')
            local status = redis.call('SET', 'x', '1')
            local n = redis.call('EXISTS', 's')
            local err = redis.pcall('ZADD', 's', 1, 'a')
            return {tostring(missing), status.ok, type(n), n + 1, err.err}";
        assert_eq!(
            eval(&mut m, script, &[], &[]),
            Reply::Array(vec![
                bulk("false"),
                bulk("OK"),
                bulk("number"),
                Reply::Int(2),
                bulk(errors::WRONGTYPE)
            ])
        );
    }

    #[test]
    fn an_error_raised_by_redis_call_aborts_the_script_with_redis_shape() {
        let (_, mut m) = master();
        m.run(&["SET", "s", "v"]);
        let script = "redis.call('SET', 'before', '1')\nredis.call('ZADD', 's', 1, 'a')\nredis.call('SET', 'after', '1')";
        let sha = sha1_smol::Sha1::from(script).digest().to_string();
        let reply = eval(&mut m, script, &[], &[]);
        assert_eq!(
            reply,
            Reply::error(format!(
                "{} script: {sha}, on @user_script:2.",
                errors::WRONGTYPE
            ))
        );
        // Redis does not roll back what the script wrote before the error.
        assert_eq!(m.run(&["EXISTS", "before", "after"]), Reply::Int(1));
        let reply = eval(&mut m, "local x = nil\nreturn x + 1", &[], &[]);
        let Reply::Error(text) = reply else {
            panic!("{reply:?}")
        };
        assert!(
            text.starts_with("ERR user_script:2: attempt to perform arithmetic on local 'x'"),
            "{text}"
        );
        assert!(text.ends_with("on @user_script:2."), "{text}");
    }

    #[test]
    fn a_scripts_functions_and_globals_do_not_leak_into_the_next() {
        let (_, mut m) = master();
        eval(
            &mut m,
            "leaked = 1 local function f() return 1 end g = f",
            &[],
            &[],
        );
        assert_eq!(
            eval(&mut m, "return {type(leaked), type(g), type(f)}", &[], &[]),
            Reply::Array(vec![bulk("nil"), bulk("nil"), bulk("nil")])
        );
    }

    #[test]
    fn time_stands_still_while_a_script_runs() {
        let (time, mut m) = master();
        time.advance(Duration::from_micros(1_234));
        assert_eq!(
            m.run(&["TIME"]),
            Reply::Array(vec![bulk("1700000000"), bulk("1234")])
        );
        m.run(&["SET", "k", "v", "PX", "5"]);
        time.advance(Duration::from_millis(5));
        let script = "local t1 = redis.call('TIME') local v = redis.call('GET', 'k') local t2 = redis.call('TIME') return {t1[2] == t2[2], v}";
        assert_eq!(
            eval(&mut m, script, &[], &[]),
            Reply::Array(vec![Reply::Int(1), bulk("v")])
        );
    }

    #[test]
    fn evalsha_knows_a_script_until_a_restart_forgets_it() {
        let (_, mut m) = master();
        let script = "return 7";
        let sha = sha1_smol::Sha1::from(script).digest().to_string();
        let noscript = Reply::error("NOSCRIPT No matching script. Please use EVAL.");
        assert_eq!(m.run(&["EVALSHA", &sha, "0"]), noscript);
        assert_eq!(m.run(&["SCRIPT", "LOAD", script]), bulk(&sha));
        assert_eq!(m.run(&["EVALSHA", &sha.to_uppercase(), "0"]), Reply::Int(7));
        assert_eq!(
            m.run(&["SCRIPT", "EXISTS", &sha, "0000"]),
            Reply::Array(vec![Reply::Int(1), Reply::Int(0)])
        );
        m.run(&["SET", "k", "v"]);
        m.crash(true);
        assert_eq!(m.run(&["EVALSHA", &sha, "0"]), noscript);
        assert_eq!(m.run(&["GET", "k"]), bulk("v"));
        m.crash(false);
        assert_eq!(m.run(&["GET", "k"]), Reply::Nil);
        assert_eq!(m.restarts(), 2);
    }

    #[test]
    fn a_restore_loses_the_writes_after_the_snapshot() {
        let (_, mut m) = master();
        m.run(&["SET", "a", "1"]);
        let snapshot = m.snapshot();
        m.run(&["SET", "b", "2"]);
        let client = m.connect();
        m.restore_from(&snapshot);
        assert!(!m.is_connected(client));
        assert_eq!(m.run(&["EXISTS", "a", "b"]), Reply::Int(1));
    }

    #[test]
    fn spublish_reaches_the_sharded_subscribers_only() {
        let (_, mut m) = master();
        let sharded = m.connect();
        let plain = m.connect();
        let channel = |s: &str| vec![b"SSUBSCRIBE".to_vec(), s.as_bytes().to_vec()];
        assert_eq!(
            m.execute(sharded, &channel("ch")),
            Reply::Push(vec![bulk("ssubscribe"), bulk("ch"), Reply::Int(1)])
        );
        m.execute(plain, &[b"SUBSCRIBE".to_vec(), b"ch".to_vec()]);
        let script = "return redis.call('SPUBLISH', ARGV[1], ARGV[2])";
        assert_eq!(eval(&mut m, script, &[], &["ch", "hi"]), Reply::Int(1));
        assert_eq!(
            m.take_messages(sharded),
            [Reply::Push(vec![bulk("smessage"), bulk("ch"), bulk("hi")])]
        );
        assert!(m.take_messages(plain).is_empty());
        m.execute(sharded, &[b"SUNSUBSCRIBE".to_vec()]);
        assert_eq!(m.run(&["SPUBLISH", "ch", "again"]), Reply::Int(0));
    }

    #[test]
    fn a_password_is_asked_before_anything_else() {
        let time = VirtualTime::new(START);
        let config = Config::default().password("secret");
        let mut m = Master::with_config(Clock::following(&time), config).unwrap();
        let c = m.connect();
        let argv = |args: &[&str]| {
            args.iter()
                .map(|a| a.as_bytes().to_vec())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            m.execute(c, &argv(&["GET", "k"])),
            Reply::error("NOAUTH Authentication required.")
        );
        assert!(m.execute(c, &argv(&["AUTH", "wrong"])).is_error());
        let hello = m.execute(c, &argv(&["HELLO", "3", "AUTH", "default", "secret"]));
        assert!(matches!(hello, Reply::Map(_)), "{hello:?}");
        assert_eq!(m.protocol(c), Protocol::Resp3);
        assert_eq!(m.execute(c, &argv(&["GET", "k"])), Reply::Nil);
    }

    #[test]
    fn info_and_waitaof_follow_the_append_only_setting() {
        let time = VirtualTime::new(START);
        let mut m =
            Master::with_config(Clock::following(&time), Config::default().aof(true)).unwrap();
        let Reply::Verbatim(info) = m.run(&["INFO", "replication", "persistence", "server"]) else {
            panic!("INFO is text")
        };
        assert!(info.contains("aof_enabled:1\r\n"), "{info}");
        assert!(info.contains("connected_slaves:0\r\n"), "{info}");
        assert!(info.contains("redis_version:7.2.4\r\n"), "{info}");
        assert!(!info.contains("cluster_enabled"), "{info}");
        assert_eq!(
            m.run(&["WAITAOF", "1", "0", "100"]),
            Reply::Array(vec![Reply::Int(1), Reply::Int(0)])
        );
        assert_eq!(m.run(&["WAIT", "1", "100"]), Reply::Int(0));
        let (_, mut plain) = master();
        assert!(plain.run(&["WAITAOF", "1", "0", "100"]).is_error());
    }

    #[test]
    fn hashes_keep_field_order_and_vanish_when_emptied() {
        let (_, mut m) = master();
        assert_eq!(m.run(&["HSET", "h", "b", "1", "a", "2"]), Reply::Int(2));
        assert_eq!(m.run(&["HSET", "h", "b", "3"]), Reply::Int(0));
        assert_eq!(
            eval(&mut m, "return redis.call('HGETALL', KEYS[1])", &["h"], &[]),
            Reply::Array(vec![bulk("b"), bulk("3"), bulk("a"), bulk("2")])
        );
        assert_eq!(m.run(&["HDEL", "h", "a", "b", "c"]), Reply::Int(2));
        assert_eq!(m.run(&["TYPE", "h"]), Reply::Status("none".to_owned()));
        assert_eq!(m.run(&["HGET", "h", "a"]), Reply::Nil);
    }

    #[test]
    fn two_masters_given_the_same_requests_at_the_same_instants_answer_alike() {
        let script = "redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1]) \
            local t = redis.call('TIME') \
            redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) \
            return {t[1], t[2], redis.call('PTTL', KEYS[1]), redis.call('ZRANGE', KEYS[2], 0, -1)}";
        let run = || {
            let (time, mut m) = master();
            let mut replies = Vec::new();
            for i in 0..50u64 {
                time.advance(Duration::from_micros(i * 777));
                let ttl = (i % 7 + 1).to_string();
                let key = format!("k{}", i % 3);
                replies.push(eval(&mut m, script, &[&key, "z"], &[&i.to_string(), &ttl]));
                replies.push(m.run(&["KEYS", "*"]));
            }
            (replies, m.keyspace())
        };
        assert_eq!(run(), run());
    }
}
