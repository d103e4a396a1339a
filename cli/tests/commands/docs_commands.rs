//! Every shell command in the README and the guide (`docs/*.md`) runs, as a user would type it,
//! against local servers set up the way its page describes: the command line's own masters for
//! most, valkey-server masters with AOF and a replica each for durable votes, a Redis Cluster, a
//! Sentinel group and a master for the voters page. A command may only stay unrun if it is in
//! `NOT_RUN`, with the reason; a command added to the docs is run, or this test fails.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use quorumlock_testkit::{RedisCluster, RedisNodes, RedisServerBuilder, SentinelGroupBuilder};

/// Commands the docs show that this test does not run, and why.
const NOT_RUN: [(&str, &str); 3] = [
    ("make demo", "cli/tests/commands/demo.rs runs the demo"),
    ("make test", "it is the run this test is part of"),
    (
        "cargo install --locked --path cli",
        "it installs the binary this test runs from target/",
    ),
];

/// The placeholder masters of the docs, which each page's servers stand in for.
const PLACEHOLDER_EXPORT: &str = "export QUORUMLOCK_NODES=redis://10.0.0.1:6379";

/// One shell block: the page, its first line, its logical commands (continued lines joined,
/// comments dropped) and its text.
struct Block {
    page: String,
    line: usize,
    commands: Vec<String>,
    text: String,
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn pages() -> Vec<PathBuf> {
    let mut pages = vec![repo().join("README.md")];
    let mut guide: Vec<PathBuf> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    guide.sort();
    pages.extend(guide);
    pages
}

/// A shell line without its comment (a `#` after whitespace, outside quotes).
fn without_comment(line: &str) -> &str {
    let (mut single, mut double, mut previous) = (false, false, ' ');
    for (i, c) in line.char_indices() {
        match c {
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single && !double && previous.is_whitespace() => return line[..i].trim_end(),
            _ => {}
        }
        previous = c;
    }
    line.trim_end()
}

fn blocks() -> Vec<Block> {
    let mut blocks = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).unwrap();
        let name = page
            .strip_prefix(repo())
            .unwrap_or(&page)
            .display()
            .to_string();
        let mut lines = text.lines().enumerate();
        while let Some((n, line)) = lines.next() {
            if !matches!(line.trim(), "```sh" | "```bash" | "```shell") {
                continue;
            }
            let body: Vec<&str> = lines
                .by_ref()
                .map(|(_, l)| l)
                .take_while(|l| !l.starts_with("```"))
                .collect();
            let mut commands = Vec::new();
            let mut current = String::new();
            for line in &body {
                let code = without_comment(line);
                if let Some(continued) = code.strip_suffix('\\') {
                    current.push_str(continued);
                    current.push(' ');
                    continue;
                }
                current.push_str(code);
                let command = current.split_whitespace().collect::<Vec<_>>().join(" ");
                if !command.is_empty() {
                    commands.push(command);
                }
                current.clear();
            }
            blocks.push(Block {
                page: name.clone(),
                line: n + 1,
                commands,
                text: body.join("\n"),
            });
        }
    }
    blocks
}

/// A directory with what the docs' commands run: `./report.sh`, `./settle.sh`,
/// `./run-scheduler`, and `migrate` on the PATH; a HOME with the completions directory.
fn workdir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let stub = |path: &Path| {
        std::fs::write(path, "#!/bin/sh\necho \"$0 $*\" >> ran.log\nexit 0\n").unwrap();
        Command::new("chmod").arg("+x").arg(path).status().unwrap();
    };
    for script in ["report.sh", "settle.sh", "run-scheduler"] {
        stub(&dir.path().join(script));
    }
    std::fs::create_dir_all(dir.path().join("bin")).unwrap();
    stub(&dir.path().join("bin/migrate"));
    std::fs::create_dir_all(dir.path().join(".local/share/bash-completion/completions")).unwrap();
    dir
}

/// Runs `script` with bash in `dir`, the masters `nodes`, the built `quorumlock` first on the
/// PATH; panics with its output unless it exits 0.
fn run(script: &str, dir: &Path, nodes: &str, what: &str) {
    let bin = Path::new(env!("CARGO_BIN_EXE_quorumlock"))
        .parent()
        .unwrap();
    let path = format!(
        "{}:{}:{}",
        bin.display(),
        dir.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("bash")
        .arg("-c")
        .arg(script)
        .current_dir(dir)
        .env("PATH", path)
        .env("HOME", dir)
        .env("QUORUMLOCK_NODES", nodes)
        .env_remove("QUORUMLOCK_KEY_PREFIX")
        .env_remove("QUORUMLOCK_DURABLE")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{what}: `{script}` exited {:?}\n{}",
        out.status.code(),
        common::text(&out)
    );
}

/// The shell for one command: as it is, or, for a hold sent to the background (`… &`), held
/// until it says it holds, then ended with SIGTERM as the docs say (exit 143).
fn as_script(command: &str) -> String {
    match command.strip_suffix('&') {
        Some(held) => format!(
            "{held} & pid=$!; for _ in $(seq 100); do grep -q locked locked.txt 2>/dev/null && break; \
             sleep 0.1; done; grep -q locked locked.txt || exit 3; kill -TERM $pid; wait $pid; \
             code=$?; [ $code -eq 143 ] || {{ echo \"exit $code\"; exit 4; }}"
        ),
        None => command.to_owned(),
    }
}

/// Runs the commands of `block` against `nodes`, one by one; returns how many ran.
fn run_commands(block: &Block, nodes: &str) -> usize {
    let dir = workdir();
    let mut ran = 0;
    for command in &block.commands {
        if command.starts_with(PLACEHOLDER_EXPORT) {
            continue;
        }
        if NOT_RUN.iter().any(|(c, _)| command.starts_with(c)) {
            continue;
        }
        let what = format!("{}:{}", block.page, block.line);
        run(&as_script(command), dir.path(), nodes, &what);
        ran += 1;
    }
    ran
}

fn valkey() -> PathBuf {
    let path = std::env::var_os("QUORUMLOCK_VALKEY_SERVER")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join("target/valkey/valkey-server"));
    assert!(
        path.is_file(),
        "no valkey-server at {}: run scripts/ensure-valkey-server.sh (make test does)",
        path.display()
    );
    path
}

/// `n` distinct free ports: each listener stays open until all are picked, so that the system
/// cannot hand the same port out twice.
fn free_ports(n: usize) -> Vec<u16> {
    let listeners: Vec<std::net::TcpListener> = (0..n)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    listeners
        .iter()
        .map(|listener| listener.local_addr().unwrap().port())
        .collect()
}

#[test]
fn every_shell_command_of_the_readme_and_the_guide_runs() {
    let blocks = blocks();
    let mut ran = 0;
    let mut unrun = Vec::new();
    for block in &blocks {
        for command in &block.commands {
            if let Some((c, why)) = NOT_RUN.iter().find(|(c, _)| command.starts_with(c)) {
                unrun.push(format!("{}:{}: {c} ({why})", block.page, block.line));
            }
        }
        if block.text.contains("for port in") {
            ran += masters_without_docker(block);
        } else if block.page == "docs/durable-votes.md" {
            ran += durable_votes(block);
        } else if block.page == "docs/voters.md" {
            ran += voters(block);
        } else {
            let nodes = RedisNodes::spawn(3).unwrap();
            ran += run_commands(block, &nodes.urls().join(","));
        }
    }
    println!(
        "ran {ran} commands of {} shell blocks; not run:",
        blocks.len()
    );
    for line in &unrun {
        println!("  {line}");
    }
    assert!(ran >= 15, "only {ran} commands ran");
    // Each page with shell blocks contributes: a page whose commands all went unrun would mean
    // the parser lost them.
    for page in [
        "README.md",
        "docs/cli.md",
        "docs/durable-votes.md",
        "docs/voters.md",
    ] {
        assert!(
            blocks.iter().any(|b| b.page == page),
            "no shell block in {page}"
        );
    }
}

/// The guide's five local masters, on five free ports instead of 7001–7005 and in a
/// temporary directory, then a command against them, then each shut down.
fn masters_without_docker(block: &Block) -> usize {
    let dir = workdir();
    let ports = free_ports(5);
    let mut script = block.text.replace(
        "/tmp/quorumlock/",
        &format!("{}/masters/", dir.path().display()),
    );
    for (i, port) in ports.iter().enumerate() {
        script = script.replace(&format!("700{}", i + 1), &port.to_string());
    }
    let shutdown: Vec<String> = ports
        .iter()
        .map(|p| format!("redis-cli -p {p} shutdown nosave >/dev/null 2>&1"))
        .collect();
    // `--daemonize yes` returns before the server listens: wait (up to 10 s each) until each
    // answers.
    let ready: Vec<String> = ports
        .iter()
        .map(|p| {
            format!(
                "for _ in $(seq 100); do [ \"$(redis-cli -p {p} ping 2>/dev/null)\" = PONG ] \
                 && break; sleep 0.1; done"
            )
        })
        .collect();
    let script = format!(
        "{script}\n{}\nquorumlock status masters-without-docker; code=$?\n{}\nexit $code",
        ready.join("\n"),
        shutdown.join("\n")
    );
    run(
        &script,
        dir.path(),
        "",
        &format!("{}:{}", block.page, block.line),
    );
    1
}

/// Three valkey-server masters (`WAITAOF`) with AOF, each with one replica with AOF.
fn durable_votes(block: &Block) -> usize {
    let builder = RedisServerBuilder::new().binary(valkey()).aof(true);
    let nodes = RedisNodes::spawn_with(3, &builder).unwrap();
    let replicas: Vec<_> = nodes
        .iter()
        .map(|m| m.spawn_replica(builder.clone()).unwrap())
        .collect();
    let ran = run_commands(block, &nodes.urls().join(","));
    drop(replicas);
    ran
}

/// A Redis Cluster, a Sentinel group naming its master `locks`, and a master, in place of the
/// page's addresses.
fn voters(block: &Block) -> usize {
    let cluster = RedisCluster::spawn(3, 0).unwrap();
    let sentinels = SentinelGroupBuilder::new()
        .master_name("locks")
        .spawn()
        .unwrap();
    let master = RedisNodes::spawn(1).unwrap();
    let local: Vec<String> = block
        .commands
        .iter()
        .map(|c| {
            c.replace("redis+cluster://10.0.1.1:6379", &cluster.url())
                .replace("redis+sentinel://10.0.2.1/locks", &sentinels.url())
                .replace("redis://10.0.3.1", &master.urls()[0])
        })
        .collect();
    let local = Block {
        page: block.page.clone(),
        line: block.line,
        commands: local,
        text: String::new(),
    };
    run_commands(&local, &master.urls().join(","))
}
