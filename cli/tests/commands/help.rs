//! What the binary says about itself: completions for the usual shells, and the exit codes in
//! `--help`.

use std::process::Command;

fn quorumlock(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_quorumlock"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn completions_are_printed_for_bash_zsh_and_fish() {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef quorumlock"),
        ("fish", "complete -c quorumlock"),
    ] {
        let out = quorumlock(&["completions", shell]);
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{shell}: {out:?}");
        assert!(script.contains(marker), "{shell}: {script}");
        assert!(
            script.contains("exec") && script.contains("unlock"),
            "{shell}"
        );
        assert!(
            !script.contains("watchdog"),
            "the watchdog is not a command"
        );
    }
    let unknown = quorumlock(&["completions", "cmd.exe"]);
    assert_eq!(unknown.status.code(), Some(2));
}

#[test]
fn help_lists_every_exit_code() {
    let out = quorumlock(&["--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    for code in ["0 ", "1 ", "2 ", "69 ", "75 ", "76 ", "127 ", "128+N "] {
        assert!(
            help.lines().any(|l| l.trim_start().starts_with(code)),
            "{code}: {help}"
        );
    }
}

#[test]
fn help_never_shows_the_passwords_in_quorumlock_nodes() {
    let out = Command::new(env!("CARGO_BIN_EXE_quorumlock"))
        .env("QUORUMLOCK_NODES", "redis://:hunter2@10.0.0.1:6379")
        .args(["exec", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(help.contains("QUORUMLOCK_NODES"), "{help}");
    assert!(!help.contains("hunter2"), "{help}");
}

#[test]
fn every_command_on_the_masters_documents_the_three_spellings_of_a_voter() {
    for command in ["exec", "elect", "bench", "status", "list", "unlock"] {
        let out = quorumlock(&[command, "--help"]);
        let help = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{command}: {out:?}");
        for spelling in [
            "redis://[user:pass@]host:port[/db]",
            "redis+cluster://host:port[,host:port...]",
            "redis+sentinel://host[:26379][,host...]/<master-name>[/db]",
        ] {
            assert!(help.contains(spelling), "{command}: no {spelling}: {help}");
        }
        assert!(help.contains("QUORUMLOCK_NODES"), "{command}: {help}");
    }
}

/// The exit codes `--help` lists, as written in its first column ("75", "128+N").
fn codes_in_help() -> Vec<String> {
    let out = quorumlock(&["--help"]);
    let help = String::from_utf8_lossy(&out.stdout).into_owned();
    help.lines()
        .skip_while(|l| !l.starts_with("Exit codes:"))
        .skip(1)
        .filter_map(|l| l.split_whitespace().next())
        .filter(|first| first.starts_with(|c: char| c.is_ascii_digit()))
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_guide_lists_the_same_exit_codes_as_help() {
    // The command's page of the guide (the README links to it).
    let guide =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/cli.md")).unwrap();
    let table: Vec<String> = guide
        .lines()
        .skip_while(|l| !l.starts_with("| exit code |"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .filter_map(|l| l.split('|').nth(1))
        .map(|code| code.replace(' ', ""))
        .collect();
    assert!(
        table.contains(&"69".to_owned()) && table.contains(&"128+N".to_owned()),
        "{table:?}"
    );
    assert_eq!(table, codes_in_help());
}
