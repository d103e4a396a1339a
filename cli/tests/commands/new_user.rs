//! What a new user's trial of the CLI ran into, each against real masters: secrets in `--help`,
//! `list` under the README's ACL, `bench` on a closed pipe, a full disk and SIGTERM, `status`
//! whose reader has gone, a semaphore's name, names that fake rows, `NO_COLOR`, and the
//! messages and exit codes of `unlock` and `status`.

use crate::common;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::Duration;

use common::{
    every_master, exec, json_status, quorumlock, text, wait_for_file, wait_for_report, wait_until,
    Witness,
};
use quorumlock_testkit::RedisNodes;

const PASSWORD: &str = "s3cret-readme-acl";

/// `exec <extra> -- <Witness::until_done(mark)>`, returned once its command runs.
fn hold(nodes: &RedisNodes, witness: &Witness, mark: &str, extra: &[&str]) -> Child {
    let child = exec(nodes, extra, &witness.until_done(mark))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    assert!(
        wait_for_file(&witness.path(mark), Duration::from_secs(10)),
        "{mark} never started"
    );
    child
}

/// Ends every holder (their commands see `done`) and checks they exited 0.
fn finish(witness: &Witness, holders: Vec<Child>) {
    std::fs::write(witness.path("done"), "").unwrap();
    for holder in holders {
        let out = holder.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", text(&out));
    }
}

/// Runs `cmd` with its stdout a pipe whose reader has already gone (`cmd | true`).
fn with_reader_gone(cmd: &mut Command) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    cmd.stdout(writer).stderr(Stdio::piped());
    cmd.spawn().unwrap().wait_with_output().unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().unwrap()
}

/// The ACL the guide gives the `quorumlock` command (docs/voters.md): its rule for every
/// primitive (the last `ACL SETUSER quorumlock reset ...` line), then `+scan` for `list`, with
/// the password filled in.
fn readme_acl() -> Vec<Vec<String>> {
    let guide =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/voters.md")).unwrap();
    let rule = |l: &str| -> Vec<String> {
        l.split_whitespace()
            .skip(2)
            .map(|w| w.replace("PASSWORD", PASSWORD))
            .collect()
    };
    let every = guide
        .lines()
        .rfind(|l| l.starts_with("ACL SETUSER quorumlock reset "))
        .expect("the guide shows no ACL rule");
    let scan = guide
        .lines()
        .find(|l| l.trim() == "ACL SETUSER quorumlock +scan")
        .expect("the guide shows no +scan rule for list");
    vec![rule(every), rule(scan)]
}

/// Gives every master the user `quorumlock` with `rules` (each an `ACL SETUSER` after the
/// command name).
fn set_acl(nodes: &RedisNodes, rules: &[Vec<String>]) {
    for server in nodes.iter() {
        let mut conn = redis::Client::open(server.url())
            .unwrap()
            .get_connection()
            .unwrap();
        for rule in rules {
            let mut cmd = redis::cmd("ACL");
            cmd.arg("SETUSER");
            for part in rule {
                cmd.arg(part);
            }
            let () = cmd.query(&mut conn).unwrap();
        }
    }
}

/// The masters' URLs as the ACL user `quorumlock`.
fn acl_urls(nodes: &RedisNodes) -> String {
    nodes
        .iter()
        .map(|s| format!("redis://quorumlock:{PASSWORD}@127.0.0.1:{}", s.port()))
        .collect::<Vec<_>>()
        .join(",")
}

// -------------------------------------------------------------------------------------------
// 4. `bench --help` showed the password in QUORUMLOCK_NODES.

#[test]
fn no_help_shows_the_password_in_quorumlock_nodes() {
    let nodes = RedisNodes::spawn(1).unwrap();
    let url = format!("redis://:hunter2-in-env@127.0.0.1:{}", nodes[0].port());
    for subcommand in ["bench", "exec", "elect", "status", "list", "unlock"] {
        let out = quorumlock(&nodes)
            .env("QUORUMLOCK_NODES", &url)
            .args([subcommand, "--help"])
            .output()
            .unwrap();
        let shown = text(&out);
        assert!(out.status.success(), "{subcommand}: {shown}");
        assert!(shown.contains("QUORUMLOCK_NODES"), "{subcommand}: {shown}");
        assert!(!shown.contains("hunter2"), "{subcommand} shows it: {shown}");
    }
}

// -------------------------------------------------------------------------------------------
// 5. `list` under the README's ACL: NoPerm warnings, then "no locks" and exit 0; read holds
//    never listed.

#[test]
fn list_under_the_readme_acl_shows_a_held_and_a_read_held_lock() {
    let nodes = RedisNodes::spawn(3).unwrap();
    set_acl(&nodes, &readme_acl());
    let witness = Witness::new();
    let prefix = ["--key-prefix", "locks:"];
    let holders = vec![
        hold(
            &nodes,
            &witness,
            "job",
            &[&prefix[..], &["--resource", "job"]].concat(),
        ),
        hold(
            &nodes,
            &witness,
            "catalog",
            &[&prefix[..], &["--resource", "catalog", "--read"]].concat(),
        ),
    ];
    // The read hold returned at a quorum: the last master gets it just after.
    wait_for_report(
        || {
            let mut cmd = json_status(&nodes, "catalog");
            cmd.args(prefix);
            cmd
        },
        "the reader on every master",
        |r| every_master(r, |n| n["readers"] == 1),
    );
    let out = run(quorumlock(&nodes)
        .env("QUORUMLOCK_NODES", acl_urls(&nodes))
        .arg("list")
        .args(prefix));
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert!(!shown.contains("NOPERM"), "{shown}");
    let row = |name: &str| {
        stdout(&out)
            .lines()
            .find(|l| l.starts_with(&format!("{name:?} ")))
            .map(str::to_owned)
            .unwrap_or_else(|| panic!("no row for {name}: {shown}"))
    };
    assert!(row("job").contains(" held "), "{shown}");
    assert!(row("catalog").contains(" reading "), "{shown}");
    assert!(row("catalog").contains(" 3/3 "), "{shown}");

    let json = run(quorumlock(&nodes)
        .env("QUORUMLOCK_NODES", acl_urls(&nodes))
        .args(["list", "--json"])
        .args(prefix));
    assert_eq!(json.status.code(), Some(0), "{}", text(&json));
    let listed: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let states: Vec<(&str, &str)> = listed
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            (
                l["resource"].as_str().unwrap(),
                l["state"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        states,
        [("catalog", "reading"), ("job", "held")],
        "{listed:#}"
    );
    finish(&witness, holders);
}

#[test]
fn list_fails_when_the_masters_refuse_scan_instead_of_saying_no_locks() {
    let nodes = RedisNodes::spawn(3).unwrap();
    // The library's rule alone: everything but SCAN.
    let mut rules = readme_acl();
    rules.truncate(1);
    assert!(!rules[0].iter().any(|c| c == "+scan"), "{rules:?}");
    set_acl(&nodes, &rules);
    let witness = Witness::new();
    let holders = vec![hold(
        &nodes,
        &witness,
        "job",
        &["--key-prefix", "locks:", "--resource", "job"],
    )];
    for format in [&[][..], &["--json"][..]] {
        let out = run(quorumlock(&nodes)
            .env("QUORUMLOCK_NODES", acl_urls(&nodes))
            .args(["list", "--key-prefix", "locks:"])
            .args(format));
        let shown = text(&out);
        assert_eq!(out.status.code(), Some(1), "{shown}");
        assert!(stdout(&out).is_empty(), "{shown}");
        assert!(shown.contains("+scan"), "{shown}");
    }
    finish(&witness, holders);
}

// -------------------------------------------------------------------------------------------
// 6. `exec --write -n` left a waiting-writer note that kept new readers out.

#[test]
fn a_refused_exec_write_without_waiting_keeps_no_reader_out() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let reader = hold(
        &nodes,
        &witness,
        "reader",
        &["--resource", "feed", "--read"],
    );
    let writer = run(&mut exec(
        &nodes,
        &["--resource", "feed", "--write", "-n"],
        "true",
    ));
    assert_eq!(writer.status.code(), Some(75), "{}", text(&writer));
    let second = run(&mut exec(
        &nodes,
        &["--resource", "feed", "--read", "-n"],
        "true",
    ));
    assert_eq!(second.status.code(), Some(0), "{}", text(&second));
    finish(&witness, vec![reader]);
}

// -------------------------------------------------------------------------------------------
// 7. `bench`: a panic on a closed pipe or a full disk, exit 1 for a URL without a scheme, no
//    --key-prefix, no summary on SIGTERM.

#[test]
fn bench_ends_quietly_when_its_reader_has_gone_and_fails_cleanly_on_a_full_disk() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let bench = || {
        let mut cmd = quorumlock(&nodes);
        cmd.args(["bench", "--duration", "300ms"]);
        cmd
    };
    let gone = with_reader_gone(&mut bench());
    assert_eq!(gone.status.code(), Some(0), "{}", text(&gone));
    assert!(!text(&gone).contains("panicked"), "{}", text(&gone));

    let full = run(bench().stdout(std::fs::File::create("/dev/full").unwrap()));
    let shown = text(&full);
    assert_eq!(full.status.code(), Some(1), "{shown}");
    assert!(!shown.contains("panicked"), "{shown}");
    assert!(shown.contains("No space left on device"), "{shown}");
}

#[test]
fn bench_takes_a_key_prefix_and_explains_a_url_without_a_scheme() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let bare = format!("127.0.0.1:{}", nodes[0].port());
    let out = run(quorumlock(&nodes).env("QUORUMLOCK_NODES", &bare).args([
        "bench",
        "--duration",
        "100ms",
    ]));
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(2), "{shown}");
    assert!(shown.contains(&format!("redis://{bare}")), "{shown}");

    // Under the README's ACL, whose keys are locks:*.
    set_acl(&nodes, &readme_acl());
    let out = run(quorumlock(&nodes)
        .env("QUORUMLOCK_NODES", acl_urls(&nodes))
        .args(["bench", "--duration", "300ms", "--key-prefix", "locks:"]));
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert!(stdout(&out).contains("cycles"), "{shown}");
    assert!(stdout(&out).contains("failed                 0"), "{shown}");
}

#[test]
fn bench_prints_its_summary_when_terminated() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let child = quorumlock(&nodes)
        .args(["bench", "--duration", "60s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Cycles run once the three masters are connected. The first acquire and release (the
    // bench's probe) are two scripts on each master, each cycle two more: six on every master
    // means a cycle has run (its release answered) on a quorum, and is counted.
    let cycled = wait_until(Duration::from_secs(10), || {
        nodes.iter().all(|s| {
            let info: String = redis::cmd("INFO")
                .arg("commandstats")
                .query(
                    &mut redis::Client::open(s.url())
                        .unwrap()
                        .get_connection()
                        .unwrap(),
                )
                .unwrap();
            let calls = info
                .lines()
                .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
                .and_then(|rest| rest.split(',').next())
                .map_or(0, |n| n.parse::<u64>().unwrap());
            calls >= 6
        })
    });
    assert!(cycled, "the bench never ran a cycle");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    assert!(stdout(&out).contains("(interrupted)"), "{shown}");
    assert!(stdout(&out).contains("acquire"), "{shown}");
}

// -------------------------------------------------------------------------------------------
// 8. `status` said free (exit 0) for a held lock when its reader closed early.

#[test]
fn status_exits_with_its_verdict_even_when_its_reader_has_gone() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let holders = vec![
        hold(&nodes, &witness, "job", &["--resource", "job"]),
        hold(
            &nodes,
            &witness,
            "exports",
            &["--resource", "exports", "--permits", "1"],
        ),
    ];
    for args in [
        &["job"][..],
        &["--json", "job"],
        &["--permits", "1", "exports"],
        &["--permits", "1", "--json", "exports"],
    ] {
        let out = with_reader_gone(quorumlock(&nodes).arg("status").args(args));
        assert_eq!(out.status.code(), Some(75), "{args:?}: {}", text(&out));
    }
    let free = with_reader_gone(quorumlock(&nodes).args(["status", "other"]));
    assert_eq!(free.status.code(), Some(0), "{}", text(&free));
    finish(&witness, holders);
}

// -------------------------------------------------------------------------------------------
// 9. `status R` on a semaphore's resource without --permits said free.

#[test]
fn status_of_a_semaphore_without_permits_shows_the_permits_held() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let permits = ["--resource", "exports", "--permits", "2"];
    let holders = vec![
        hold(&nodes, &witness, "first", &permits),
        hold(&nodes, &witness, "second", &permits),
    ];
    let out = run(quorumlock(&nodes).args(["status", "exports"]));
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(75), "{shown}");
    assert!(!stdout(&out).contains("\"exports\": free"), "{shown}");
    for slot in 0..2 {
        assert!(
            stdout(&out).contains(&format!("\"exports:permit:{slot}\": held by ")),
            "{shown}"
        );
    }
    assert!(stdout(&out).contains("--permits K"), "{shown}");
    let json = run(quorumlock(&nodes).args(["status", "--json", "exports"]));
    assert_eq!(json.status.code(), Some(75), "{}", text(&json));
    let report: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(report["verdict"], "semaphore", "{report:#}");
    assert_eq!(report["held"], 2, "{report:#}");
    finish(&witness, holders);
}

// -------------------------------------------------------------------------------------------
// 10. `list` printed resource names raw: a newline faked a row.

#[test]
fn list_quotes_resource_names_so_a_newline_cannot_fake_a_row() {
    let nodes = RedisNodes::spawn(3).unwrap();
    let witness = Witness::new();
    let name = "evil\nfake                     held         3/3      9.9s        pid 1";
    let holders = vec![hold(&nodes, &witness, "evil", &["--resource", name])];
    let out = run(quorumlock(&nodes).arg("list"));
    let shown = text(&out);
    assert_eq!(out.status.code(), Some(0), "{shown}");
    let listed = stdout(&out);
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 2, "a header and one row: {shown}");
    assert!(lines[1].starts_with(r#""evil\nfake "#), "{shown}");
    finish(&witness, holders);
}

// -------------------------------------------------------------------------------------------
// 11. NO_COLOR was ignored for log lines at a terminal.

/// Runs the binary under `script`, which gives it a terminal; returns what it wrote there.
fn at_a_terminal(nodes: &RedisNodes, no_color: Option<&str>, args: &str) -> String {
    let bin = env!("CARGO_BIN_EXE_quorumlock");
    assert!(Path::new(bin).exists());
    let mut cmd = Command::new("script");
    cmd.args(["-q", "-e", "-c", &format!("'{bin}' {args}"), "/dev/null"])
        .env("QUORUMLOCK_NODES", nodes.urls().join(","))
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .stdin(Stdio::null());
    if let Some(value) = no_color {
        cmd.env("NO_COLOR", value);
    }
    let out = cmd
        .output()
        .expect("`script` (util-linux) runs a command at a terminal");
    text(&out)
}

#[test]
fn no_color_turns_colours_off_in_log_lines_at_a_terminal() {
    // One master: `status` warns that a single master is as safe as that one server.
    let nodes = RedisNodes::spawn(1).unwrap();
    let coloured = at_a_terminal(&nodes, None, "status job");
    assert!(coloured.contains("single master"), "{coloured}");
    assert!(
        coloured.contains("\x1b["),
        "colours at a terminal: {coloured:?}"
    );
    for value in ["1", "true"] {
        let plain = at_a_terminal(&nodes, Some(value), "status job");
        assert!(plain.contains("single master"), "{plain}");
        assert!(!plain.contains("\x1b["), "NO_COLOR={value}: {plain:?}");
    }
}

// -------------------------------------------------------------------------------------------
// `make demo` installed openssl, which only the TLS tests need.

/// Runs `scripts/ensure-redis-server.sh <args>` with a PATH holding only redis-server.
fn ensure_redis_server(args: &[&str]) -> Output {
    let found = run(Command::new("sh").args(["-c", "command -v redis-server"]));
    let server = String::from_utf8(found.stdout).unwrap();
    assert!(
        found.status.success(),
        "redis-server is on PATH (make redis-server)"
    );
    let bin = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(server.trim(), bin.path().join("redis-server")).unwrap();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../scripts/ensure-redis-server.sh"
    );
    run(Command::new("/bin/bash")
        .arg(script)
        .args(args)
        .env("PATH", bin.path())
        .env_remove("QUORUMLOCK_REDIS_SERVER"))
}

#[test]
fn the_demo_needs_no_openssl_and_only_the_test_run_asks_for_it() {
    let demo = ensure_redis_server(&[]);
    assert_eq!(demo.status.code(), Some(0), "{}", text(&demo));
    assert!(!text(&demo).contains("openssl"), "{}", text(&demo));
    // Without openssl, and without apt-get to install it, the TLS tests' setup says so.
    let tls = ensure_redis_server(&["--tls"]);
    assert_ne!(tls.status.code(), Some(0), "{}", text(&tls));
    assert!(text(&tls).contains("openssl"), "{}", text(&tls));

    let makefile = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let plan = |target: &str| {
        let out = run(Command::new("make").args(["-n", "-C", makefile, target]));
        assert!(out.status.success(), "{}", text(&out));
        stdout(&out)
    };
    let demo = plan("demo");
    assert!(demo.contains("ensure-redis-server.sh"), "{demo}");
    assert!(!demo.contains("--tls"), "{demo}");
    assert!(plan("test").contains("ensure-redis-server.sh --tls"));
}
