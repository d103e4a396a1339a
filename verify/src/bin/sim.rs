//! `make sim`: runs fresh seeds for `--minutes` (or one `--seed` again, exactly), each run
//! `--seconds` of simulated time; prints every run's seed and digest, and on a violation the
//! history around it and a smaller plan that still fails. Exits 1 on a violation.
//!
//! `--until-violation --limit-secs N` (for `make mutants`): stops at the first violation and
//! prints `FOUND seed=<seed> after=<secs>`, or `MISSED after=<secs>` once N seconds passed.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use quorumlock_verify::sim::{run, shrink::shrink, Plan};

struct Args {
    minutes: f64,
    seed: Option<u64>,
    first: u64,
    seconds: u64,
    until_violation: bool,
    limit_secs: Option<u64>,
    quiet: bool,
    verbose: bool,
}

fn parse() -> Result<Args, String> {
    let mut args = Args {
        minutes: 10.0,
        seed: None,
        first: 0,
        seconds: 20,
        until_violation: false,
        limit_secs: None,
        quiet: false,
        verbose: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--minutes" => args.minutes = value()?.parse().map_err(|e| format!("{e}"))?,
            "--seed" => args.seed = Some(parse_seed(&value()?)?),
            "--first" => args.first = parse_seed(&value()?)?,
            "--seconds" => args.seconds = value()?.parse().map_err(|e| format!("{e}"))?,
            "--limit-secs" => args.limit_secs = Some(value()?.parse().map_err(|e| format!("{e}"))?),
            "--until-violation" => args.until_violation = true,
            "--quiet" => args.quiet = true,
            "--verbose" => args.verbose = true,
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

fn parse_seed(s: &str) -> Result<u64, String> {
    let parsed = match s.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => s.parse(),
    };
    parsed.map_err(|e| format!("bad seed {s}: {e}"))
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("sim: {e}");
            return ExitCode::from(2);
        }
    };
    let duration = Duration::from_secs(args.seconds);
    let wall = Instant::now();
    let budget = match (args.limit_secs, args.seed) {
        (_, Some(_)) => Duration::ZERO,
        (Some(secs), None) => Duration::from_secs(secs),
        (None, None) => Duration::from_secs_f64(args.minutes * 60.0),
    };
    let (mut runs, mut acquisitions, mut simulated) = (0u64, 0usize, Duration::ZERO);
    let mut seed = args.seed.unwrap_or(args.first);
    loop {
        let plan = Plan::from_seed(seed, duration);
        let report = run(&plan);
        runs += 1;
        acquisitions += report.acquisitions;
        simulated += report.simulated;
        if !args.quiet || !report.is_clean() {
            println!(
                "seed {seed:#x}: {} acquisitions, {} faults, {} violation(s), digest {:016x}{}",
                report.acquisitions,
                report.faults,
                report.violation_count(),
                report.digest,
                report
                    .error
                    .as_ref()
                    .map(|e| format!(", simulation error: {e}"))
                    .unwrap_or_default()
            );
        }
        if args.verbose {
            println!("{plan:#?}");
            for op in &report.ops {
                println!("  {op:?}");
            }
        }
        if report.violated() {
            println!("{}", report.first_violation().unwrap_or_default());
            println!("history around it:\n{}", report.around_first_violation());
            if args.until_violation {
                println!(
                    "FOUND seed={seed:#x} after={:.1}s runs={runs}",
                    wall.elapsed().as_secs_f64()
                );
                return ExitCode::from(1);
            }
            let (smaller, shrink_runs) = shrink(&plan, 60);
            println!(
                "shrunk in {shrink_runs} runs: {} faults, {} clients, {:?}: {smaller:#?}",
                smaller.faults.len(),
                smaller.workers.len(),
                smaller.duration
            );
            println!(
                "replay: make sim SEED={seed:#x} SIM_SECONDS={}",
                args.seconds
            );
            return ExitCode::from(1);
        }
        if report.error.is_some() {
            return ExitCode::from(1);
        }
        if args.seed.is_some() || wall.elapsed() >= budget {
            break;
        }
        seed = seed.wrapping_add(1);
    }
    let secs = wall.elapsed().as_secs_f64();
    println!(
        "{runs} runs, {acquisitions} acquisitions in {simulated:.1?} simulated, {secs:.1} s of wall clock: {:.0} acquisitions per second, 0 violations",
        acquisitions as f64 / secs.max(1e-9)
    );
    if args.until_violation {
        println!("MISSED after={secs:.1}s runs={runs}");
    }
    ExitCode::SUCCESS
}
