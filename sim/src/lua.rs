//! Scripts: the library's Lua runs unchanged on an embedded Lua 5.1, with Redis's `redis`
//! table (`call`, `pcall`, `error_reply`, `status_reply`, `log`), `KEYS`, `ARGV`, and Redis's
//! conversions between Lua values and replies.
//!
//! Each script runs in an environment of its own (a table whose misses fall through to the
//! shared globals), so that nothing it defines is seen by the next. A script is compiled once
//! per SHA1 and kept until the script cache is flushed.
//!
//! Conversions, as Redis makes them:
//!
//! * reply to Lua: integer → number; bulk → string; nil → `false`; array → table (its nils as
//!   `false`); status → `{ok = ...}`; error → `{err = ...}`, which `redis.pcall` returns and
//!   `redis.call` raises (as an error object of its own, not that table: a script that catches
//!   it with Lua's `pcall` cannot read `.err` from it, as it could on Redis).
//! * Lua to reply: number → integer (truncated toward zero); string → bulk; `true` → 1;
//!   `false` and `nil` → nil; `{err = ...}` → error; `{ok = ...}` → status; other tables →
//!   arrays, up to their first `nil`.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};

use mlua::{Function, Lua, MultiValue, Table, Value};

use crate::reply::{format_double, format_g17, Reply};

/// The Lua state of one master and its compiled scripts.
pub(crate) struct Engine {
    lua: Lua,
    compiled: BTreeMap<String, Function>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("compiled", &self.compiled.len())
            .finish()
    }
}

/// The `redis` table's Lua side; `call` and `pcall` are set for each script (see `run`).
const PRELUDE: &str = r#"
redis = {}
function redis.error_reply(message) return { err = message } end
function redis.status_reply(message) return { ok = message } end
function redis.log(...) end
redis.LOG_DEBUG, redis.LOG_VERBOSE, redis.LOG_NOTICE, redis.LOG_WARNING = 0, 1, 2, 3
"#;

/// The chunk name, as Redis names a script (errors read `user_script:3: ...`).
const CHUNK_NAME: &str = "@user_script";

/// How many scripts a thread's caches ([`SHAS`], [`BYTECODE`]) keep before they start afresh.
const SCRIPTS_KEPT: usize = 256;

thread_local! {
    /// The SHA1s of the script bodies loaded on this thread: every connection of the library
    /// loads every script, so the same few bodies come again and again.
    static SHAS: RefCell<HashMap<Vec<u8>, String>> = RefCell::new(HashMap::new());
    /// The bytecode of the scripts compiled on this thread, by SHA1, with its line numbers and
    /// chunk name: a master compiles its scripts again after every restart, and every master
    /// that starts compiles them anew; loading bytecode skips Lua's parser, the costliest part.
    static BYTECODE: RefCell<HashMap<String, Vec<u8>>> = RefCell::new(HashMap::new());
}

/// Puts `key` in one of the caches above, emptied first when it is full.
fn remember<K: std::hash::Hash + Eq, V>(cache: &mut HashMap<K, V>, key: K, value: V) {
    if cache.len() >= SCRIPTS_KEPT {
        cache.clear();
    }
    cache.insert(key, value);
}

/// The SHA1 of a script's `body`, in hex.
pub(crate) fn sha1_of(body: &[u8]) -> String {
    SHAS.with(|shas| {
        if let Some(sha) = shas.borrow().get(body) {
            return sha.clone();
        }
        let sha = sha1_smol::Sha1::from(body).digest().to_string();
        remember(&mut shas.borrow_mut(), body.to_vec(), sha.clone());
        sha
    })
}

impl Engine {
    /// A fresh Lua state with the `redis` table.
    ///
    /// # Errors
    ///
    /// Lua's, if the prelude does not load (it does).
    pub(crate) fn new() -> Result<Engine, String> {
        let lua = Lua::new();
        lua.load(PRELUDE)
            .set_name("=prelude")
            .exec()
            .map_err(|e| e.to_string())?;
        Ok(Engine {
            lua,
            compiled: BTreeMap::new(),
        })
    }

    /// Forgets every compiled script (`SCRIPT FLUSH`, a restart).
    pub(crate) fn flush(&mut self) {
        self.compiled.clear();
    }

    /// Checks that `body` compiles, and keeps it compiled under `sha`.
    ///
    /// # Errors
    ///
    /// The compile error, as Redis words it (`ERR Error compiling script ...`).
    pub(crate) fn compile(&mut self, sha: &str, body: &[u8]) -> Result<(), Reply> {
        if self.compiled.contains_key(sha) {
            return Ok(());
        }
        let cached = BYTECODE.with(|b| {
            let bytecode = b.borrow();
            let bytecode = bytecode.get(sha)?;
            let chunk = self.lua.load(bytecode.as_slice()).set_name(CHUNK_NAME);
            chunk.set_mode(mlua::ChunkMode::Binary).into_function().ok()
        });
        if let Some(function) = cached {
            self.compiled.insert(sha.to_owned(), function);
            return Ok(());
        }
        let function = self
            .lua
            .load(body)
            .set_name(CHUNK_NAME)
            .set_mode(mlua::ChunkMode::Text)
            .into_function()
            .map_err(|e| {
                let message = match e {
                    mlua::Error::SyntaxError { message, .. } => message,
                    other => other.to_string(),
                };
                Reply::error(format!(
                    "ERR Error compiling script (new function): {}",
                    one_line(&message)
                ))
            })?;
        BYTECODE.with(|b| remember(&mut b.borrow_mut(), sha.to_owned(), function.dump(false)));
        self.compiled.insert(sha.to_owned(), function);
        Ok(())
    }

    /// Runs the compiled script `sha` with `keys` and `args`, each `redis.call` going to `exec`.
    /// The script must have been compiled (see [`compile`](Self::compile)).
    pub(crate) fn run(
        &mut self,
        sha: &str,
        keys: &[Vec<u8>],
        args: &[Vec<u8>],
        exec: &mut dyn FnMut(&[Vec<u8>]) -> Reply,
    ) -> Reply {
        let Some(function) = self.compiled.get(sha) else {
            return Reply::error("NOSCRIPT No matching script. Please use EVAL.");
        };
        // The error the last failing `redis.call` raised, and where the script called it.
        let raised: Cell<Option<(String, Option<usize>)>> = Cell::new(None);
        // `redis.call` and `redis.pcall` are functions of Rust, as Redis's are of C: the
        // script's own frame is the caller even of `return redis.call(...)` (a tail call to a
        // Lua function would replace it, and the error could not say its line).
        let exec = std::cell::RefCell::new(exec);
        let run = |argv: MultiValue| match command_args(argv) {
            Ok(argv) => match exec.try_borrow_mut() {
                Ok(mut exec) => (*exec)(&argv),
                Err(_) => Reply::error("ERR a script's command ran inside another"),
            },
            Err(e) => e,
        };
        let outcome = self.lua.scope(|scope| {
            let call = scope.create_function(|lua, argv: MultiValue| {
                let reply = run(argv);
                if let Reply::Error(message) = &reply {
                    let line = lua.inspect_stack(1, |d| d.current_line()).flatten();
                    raised.set(Some((message.clone(), line)));
                    return Err(mlua::Error::RuntimeError(message.clone()));
                }
                to_lua(lua, &reply)
            })?;
            let pcall = scope.create_function(|lua, argv: MultiValue| to_lua(lua, &run(argv)))?;
            let globals = self.lua.globals();
            let redis: Table = globals.get("redis")?;
            redis.raw_set("call", call)?;
            redis.raw_set("pcall", pcall)?;
            let env = self.lua.create_table()?;
            let meta = self.lua.create_table()?;
            meta.raw_set("__index", globals.clone())?;
            env.set_metatable(Some(meta))?;
            env.raw_set("KEYS", strings(&self.lua, keys)?)?;
            env.raw_set("ARGV", strings(&self.lua, args)?)?;
            function.set_environment(env)?;
            let pcall: Function = globals.get("pcall")?;
            let results: MultiValue = pcall.call(function.clone())?;
            redis.raw_set("call", Value::Nil)?;
            redis.raw_set("pcall", Value::Nil)?;
            let mut results = results.into_iter();
            let ok = matches!(results.next(), Some(Value::Boolean(true)));
            let value = results.next().unwrap_or(Value::Nil);
            Ok((ok, from_lua(&value), error_text(&value)))
        });
        let suffix = |line: Option<usize>| {
            let line = line.map_or_else(|| "?".to_owned(), |l| l.to_string());
            format!(" script: {sha}, on @user_script:{line}.")
        };
        match outcome {
            Ok((true, reply, _)) => reply,
            Ok((false, Reply::Error(message), _)) => {
                Reply::Error(format!("{message}{}", suffix(None)))
            }
            // The error `redis.call` raised, uncaught.
            Ok((false, _, text)) if raised_here(&raised, &text).is_some() => {
                let (message, line) = raised_here(&raised, &text).unwrap_or_default();
                Reply::Error(format!("{message}{}", suffix(line)))
            }
            Ok((false, _, text)) => {
                let text = one_line(&text);
                let line = text
                    .strip_prefix("user_script:")
                    .and_then(|rest| rest.split(':').next())
                    .and_then(|n| n.parse().ok());
                Reply::Error(format!("ERR {text}{}", suffix(line)))
            }
            Err(e) => Reply::Error(format!("ERR {}{}", one_line(&e.to_string()), suffix(None))),
        }
    }
}

/// The error `redis.call` raised last, when `text` (the script's uncaught error) is that one.
fn raised_here(
    raised: &Cell<Option<(String, Option<usize>)>>,
    text: &str,
) -> Option<(String, Option<usize>)> {
    let last = raised.take();
    raised.set(last.clone());
    last.filter(|(message, _)| text.contains(message.as_str()))
}

/// The first line of an error's text (mlua appends a traceback).
fn one_line(text: &str) -> String {
    text.lines().next().unwrap_or("").trim().to_owned()
}

/// A Lua error value's text: a string's, or a Rust error's.
fn error_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.to_string_lossy(),
        Value::Error(e) => e.to_string(),
        other => format!("{other:?}"),
    }
}

/// A table `{ "a", "b", ... }` of `items`.
fn strings(lua: &Lua, items: &[Vec<u8>]) -> mlua::Result<Table> {
    let table = lua.create_table_with_capacity(items.len(), 0)?;
    for (i, item) in items.iter().enumerate() {
        table.raw_set(i + 1, lua.create_string(item)?)?;
    }
    Ok(table)
}

/// A `redis.call`'s arguments as a command: strings as they are, numbers as Redis 7.0 writes
/// them (`%.17g`); anything else is refused.
fn command_args(argv: MultiValue) -> Result<Vec<Vec<u8>>, Reply> {
    let mut out = Vec::with_capacity(argv.len());
    for value in argv {
        match value {
            Value::String(s) => out.push(s.as_bytes().to_vec()),
            Value::Integer(i) => out.push(i.to_string().into_bytes()),
            Value::Number(n) => out.push(number_arg(n).into_bytes()),
            _ => {
                return Err(Reply::error(
                    "ERR Lua redis lib command arguments must be strings or integers",
                ))
            }
        }
    }
    if out.is_empty() {
        return Err(Reply::error(
            "ERR Please specify at least one argument for this redis lib call",
        ));
    }
    Ok(out)
}

/// A Lua number as a command argument: C's `%.17g`.
fn number_arg(n: f64) -> String {
    if n == 0.0 {
        return "0".to_owned();
    }
    if !n.is_finite() {
        return format_double(n);
    }
    format_g17(n)
}

/// A reply as Lua sees it.
fn to_lua(lua: &Lua, reply: &Reply) -> mlua::Result<Value> {
    Ok(match reply {
        Reply::Status(s) => {
            let t = lua.create_table()?;
            t.raw_set("ok", lua.create_string(s)?)?;
            Value::Table(t)
        }
        Reply::Error(e) => {
            let t = lua.create_table()?;
            t.raw_set("err", lua.create_string(e)?)?;
            Value::Table(t)
        }
        Reply::Int(i) => Value::Number(*i as f64),
        Reply::Bulk(b) => Value::String(lua.create_string(b)?),
        Reply::Verbatim(s) => Value::String(lua.create_string(s)?),
        Reply::Double(d) => Value::String(lua.create_string(format_double(*d))?),
        Reply::Nil => Value::Boolean(false),
        Reply::Array(items) | Reply::Push(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.iter().enumerate() {
                t.raw_set(i + 1, to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
        Reply::Map(pairs) | Reply::Pairs(pairs) => {
            let t = lua.create_table_with_capacity(pairs.len() * 2, 0)?;
            for (i, (a, b)) in pairs.iter().enumerate() {
                t.raw_set(2 * i + 1, to_lua(lua, a)?)?;
                t.raw_set(2 * i + 2, to_lua(lua, b)?)?;
            }
            Value::Table(t)
        }
    })
}

/// A Lua value as the reply Redis makes of it.
fn from_lua(value: &Value) -> Reply {
    match value {
        Value::Nil | Value::Boolean(false) => Reply::Nil,
        Value::Boolean(true) => Reply::Int(1),
        Value::Integer(i) => Reply::Int(*i),
        // Truncated toward zero, as C's cast does.
        Value::Number(n) => Reply::Int(*n as i64),
        Value::String(s) => Reply::Bulk(s.as_bytes().to_vec()),
        Value::Table(t) => {
            if let Ok(Value::String(e)) = t.raw_get::<Value>("err") {
                return Reply::Error(error_reply_text(&e.to_string_lossy()));
            }
            if let Ok(Value::String(s)) = t.raw_get::<Value>("ok") {
                return Reply::Status(s.to_string_lossy());
            }
            let mut items = Vec::new();
            for i in 1.. {
                match t.raw_get::<Value>(i) {
                    Ok(Value::Nil) | Err(_) => break,
                    Ok(v) => items.push(from_lua(&v)),
                }
            }
            Reply::Array(items)
        }
        _ => Reply::Nil,
    }
}

/// A script's `{err = ...}` as the error Redis replies: a message without an error code of its
/// own (an upper-case first word) gets `ERR`.
fn error_reply_text(message: &str) -> String {
    let message = message.strip_prefix('-').unwrap_or(message);
    let code = message.split(' ').next().unwrap_or("");
    let has_code = message.contains(' ')
        && !code.is_empty()
        && code.bytes().all(|b| b.is_ascii_uppercase() || b == b'_');
    if has_code {
        message.to_owned()
    } else {
        format!("ERR {message}")
    }
}
