//! The explorer (`make explore`): chaos runs whose configuration and fault schedule are drawn
//! from fresh seeds, one after the other for a while, each printing its seed and its drawn
//! plan first, then a table: seed, configuration, acquisitions, faults by kind, violations,
//! verdict. A run whose faults stay within the README's bounds must end with 0 violations; a
//! negative control (one run in four: a clock jump beyond the TTL, a skew beyond the fencing
//! grace) must be caught. A run that found a violation is re-run with one kind of fault taken
//! away at a time, and the smallest set of kinds that still fails is printed.
//!
//! ```text
//! cargo run --release --example explore                        # 10 minutes of fresh seeds
//! cargo run --release --example explore -- --minutes 30
//! cargo run --release --example explore -- --seed 0x1f2e3d4c   # replays one seed
//! cargo run --release --example explore -- --until-failure     # stops at the first defect
//! cargo run --release --example explore -- --control jump      # every plan a clock-jump control
//! cargo run --release --example explore -- --no-shrink --seconds 20
//! cargo run --release --example explore -- --seed 0x1f2e3d4c --without pause,delay
//! cargo run --release --example explore -- --seed 0x1f2e3d4c --plan-only  # the plan, no run
//! ```
//!
//! The masters run `valkey-server` under libfaketime: `scripts/ensure-valkey-server.sh` and
//! `scripts/ensure-redis-server.sh --faketime` install them (`make explore` does).
//!
//! Exits with status 1 if a run within bounds found a violation, or a control found none; 2 if
//! a run could not be made at all.

use std::collections::BTreeSet;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use quorumlock_verify::chaos::explore::{
    self, Control, Explored, FaultKind, Options, Plan, Verdict,
};

/// What the command line asks for.
struct Args {
    minutes: f64,
    seed: Option<u64>,
    shrink: bool,
    until_failure: bool,
    plan_only: bool,
    without: BTreeSet<FaultKind>,
    options: Options,
}

fn parse_seed(s: &str) -> Option<u64> {
    let s = s.trim();
    match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => s.parse().ok(),
    }
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        minutes: 10.0,
        seed: None,
        shrink: true,
        until_failure: false,
        plan_only: false,
        without: BTreeSet::new(),
        options: Options::default(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match arg.as_str() {
            "--minutes" => {
                let v = value("--minutes")?;
                args.minutes = v.parse().map_err(|_| format!("--minutes {v}?"))?;
            }
            "--seed" => {
                let v = value("--seed")?;
                // An empty seed (make explore SEED=) means none.
                if !v.trim().is_empty() {
                    args.seed = Some(parse_seed(&v).ok_or(format!("--seed {v}?"))?);
                }
            }
            "--seconds" => {
                let v = value("--seconds")?;
                let s: f64 = v.parse().map_err(|_| format!("--seconds {v}?"))?;
                args.options.duration = Duration::from_secs_f64(s);
            }
            "--control" => {
                let v = value("--control")?;
                args.options.control = Some(match v.as_str() {
                    "jump" => Control::ClockJump,
                    "skew" => Control::SkewBeyondGrace,
                    _ => return Err(format!("--control {v}? (jump or skew)")),
                });
            }
            "--without" => {
                let v = value("--without")?;
                for name in v.split(',').filter(|n| !n.is_empty()) {
                    let kind = FaultKind::ALL
                        .into_iter()
                        .find(|k| k.name() == name)
                        .ok_or(format!("--without {name}? (kinds: kill, restart-empty, pause, partition, delay, skew, bump, strobe, rate)"))?;
                    args.without.insert(kind);
                }
            }
            "--no-controls" => args.options.controls = false,
            "--no-shrink" => args.shrink = false,
            "--until-failure" => args.until_failure = true,
            "--plan-only" => args.plan_only = true,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

#[tokio::main(flavor = "multi_thread")]
async fn main() -> ExitCode {
    let args = match parse() {
        Ok(args) => args,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let server = match explore::valkey_server() {
        Ok(server) => server,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let began = Instant::now();
    let budget = Duration::from_secs_f64(args.minutes * 60.0);
    let mut rows: Vec<Explored> = Vec::new();
    let mut shrunk_lines: Vec<String> = Vec::new();
    let mut first_failure: Option<(u64, Duration)> = None;
    loop {
        let seed = args.seed.unwrap_or_else(explore::fresh_seed);
        let plan = Plan::draw(seed, &args.options).without(&args.without);
        println!(
            "=== run {} at {:.0}s: seed {seed:#x} (replay: make explore SEED={seed:#x})",
            rows.len() + 1,
            began.elapsed().as_secs_f64()
        );
        print!("{plan}");
        if args.plan_only {
            println!("{}", plan.summary());
            return ExitCode::SUCCESS;
        }
        let explored = match explore::run(&plan, &server).await {
            Ok(explored) => explored,
            Err(e) => {
                eprintln!("seed {seed:#x}: the run could not be made: {e}");
                return ExitCode::from(2);
            }
        };
        println!("{}\n{}", Explored::header(), explored.row());
        if let Some(line) = explored.liveness.first() {
            println!("  {line}");
        }
        for (guarantee, why) in explored.beyond() {
            println!("  beyond the bounds of {guarantee}: {why}");
        }
        if explored.violation_count() > 0 || args.seed.is_some() {
            println!("{}", explored.report);
        }
        if explored.verdict == Verdict::Failed && first_failure.is_none() {
            first_failure = Some((seed, began.elapsed()));
            println!(
                "first defect found after {:.0}s, seed {seed:#x}",
                began.elapsed().as_secs_f64()
            );
        }
        let failed = explored.verdict == Verdict::Failed;
        let shrink = args.shrink && explored.violation_count() > 0 && explored.control.is_none();
        rows.push(explored);
        if shrink {
            println!("shrinking seed {seed:#x}: one kind of fault taken away at a time");
            let shrunk = explore::shrink(
                &plan,
                &server,
                |e| e.violation_count() > 0,
                |step| {
                    let removed: Vec<&str> = step.removed.iter().map(|k| k.name()).collect();
                    println!(
                        "  without {:<40} {} violations: {}",
                        removed.join(", "),
                        step.explored.violation_count(),
                        if step.still_fails {
                            "still fails"
                        } else {
                            "passes"
                        }
                    );
                },
            )
            .await;
            match shrunk {
                Ok(shrunk) => {
                    let smallest: Vec<&str> = shrunk.smallest.iter().map(|k| k.name()).collect();
                    let line = format!(
                        "seed {seed:#x}: the smallest set of fault kinds that still fails: {{{}}}",
                        smallest.join(", ")
                    );
                    println!("{line}");
                    shrunk_lines.push(line);
                }
                Err(e) => eprintln!("seed {seed:#x}: shrinking stopped: {e}"),
            }
        }
        let done =
            args.seed.is_some() || began.elapsed() >= budget || (args.until_failure && failed);
        if done {
            break;
        }
    }

    println!(
        "\n{} runs in {:.0}s",
        rows.len(),
        began.elapsed().as_secs_f64()
    );
    println!("{}", Explored::header());
    for row in &rows {
        println!("{}", row.row());
    }
    for line in &shrunk_lines {
        println!("{line}");
    }
    let count = |v: Verdict| rows.iter().filter(|r| r.verdict == v).count();
    let within = rows.iter().filter(|r| r.control.is_none()).count();
    let controls = rows.len() - within;
    println!(
        "within bounds: {within} runs, {} with 0 violations, {} FAILED; negative controls: \
         {controls}, {} caught, {} missed; {} acquisitions in all",
        count(Verdict::Clean),
        count(Verdict::Failed),
        count(Verdict::Caught),
        count(Verdict::Missed),
        rows.iter().map(|r| r.acquisitions).sum::<usize>()
    );
    if let Some((seed, after)) = first_failure {
        println!(
            "first defect: seed {seed:#x}, found {:.0}s into the exploration",
            after.as_secs_f64()
        );
    }
    if rows.iter().all(|r| r.verdict.ok()) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
