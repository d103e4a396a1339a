//! The demo, run as a user runs it: the real binary against its own local masters.

use std::process::Command;

#[test]
fn demo_reports_zero_overlaps_while_masters_fail() {
    let out = Command::new(env!("CARGO_BIN_EXE_quorumlock"))
        .args([
            "demo",
            "--workers",
            "4",
            "--duration",
            "3s",
            "--ttl",
            "500ms",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(stdout.contains("master 3 killed"), "{stdout}");
    assert!(stdout.contains("master 3 restarted"), "{stdout}");
    assert!(stdout.lines().any(|l| l == "overlaps: 0"), "{stdout}");
    let acquisitions: u64 = stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("acquisitions"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    assert!(acquisitions > 0, "{stdout}");
}

#[test]
fn failover_demo_shows_the_single_master_losing_the_lock_and_five_masters_keeping_it() {
    let out = Command::new(env!("CARGO_BIN_EXE_quorumlock"))
        .args(["demo", "--failover"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("every case as the rule predicts: yes"),
        "{stdout}"
    );
    let cases: Vec<&str> = stdout.lines().filter(|l| l.starts_with("* ")).collect();
    assert_eq!(cases.len(), 4, "{stdout}");
    assert!(cases[0].contains("second holder: YES"), "{stdout}");
    assert!(cases[1].contains("second holder: no"), "{stdout}");
    assert!(cases[2].contains("second holder: no"), "{stdout}");
    assert!(cases[3].contains("second holder: YES"), "{stdout}");
}

#[test]
fn demo_into_a_pipe_closed_early_ends_quietly() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    // `quorumlock demo | head -2`.
    let mut demo = Command::new(env!("CARGO_BIN_EXE_quorumlock"))
        .args(["demo", "--duration", "1s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(demo.stdout.take().unwrap());
    let mut first_two = String::new();
    for _ in 0..2 {
        stdout.read_line(&mut first_two).unwrap();
    }
    drop(stdout);
    let out = demo.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(first_two.starts_with("Starting 5"), "{first_two}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
