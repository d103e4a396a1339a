//! `make sim`: runs fresh seeds for `--minutes` (or one `--seed` again, exactly), each run
//! `--seconds` of simulated time; prints every run's seed and digest, and on a violation the
//! history around it and a smaller plan that still fails. Exits 1 on a violation.
//!
//! `--until-violation --limit-secs N` (for `make mutants`): stops at the first violation and
//! prints `FOUND seed=<seed> after=<secs>`, or `MISSED after=<secs>` once N seconds passed.
//!
//! `--jobs N` runs N seeds side by side, one thread each (default: one per core). Each run is
//! the same function of its seed whatever the number of jobs; which seed is found first may
//! differ.

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use quorumlock_verify::mutex;
use quorumlock_verify::sim::{run, shrink::shrink, Plan, RunReport};

struct Args {
    minutes: f64,
    seed: Option<u64>,
    first: u64,
    seconds: u64,
    until_violation: bool,
    limit_secs: Option<u64>,
    quiet: bool,
    verbose: bool,
    jobs: usize,
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
        jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
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
            "--jobs" => {
                args.jobs = value()?
                    .parse::<usize>()
                    .map_err(|e| format!("{e}"))?
                    .max(1)
            }
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
    if let Some(seed) = args.seed {
        let plan = Plan::from_seed(seed, duration);
        let report = run(&plan);
        print_run(&args, &plan, &report);
        return match conclude(&args, &plan, &report, wall, 1) {
            Some(code) => code,
            None => {
                print_totals(&args, 1, report.acquisitions, report.simulated, wall);
                ExitCode::SUCCESS
            }
        };
    }
    let budget = match args.limit_secs {
        Some(secs) => Duration::from_secs(secs),
        None => Duration::from_secs_f64(args.minutes * 60.0),
    };
    let next = AtomicU64::new(args.first);
    let stop = AtomicBool::new(false);
    let totals = Mutex::new((0u64, 0usize, Duration::ZERO));
    let failed: Mutex<Option<(Plan, RunReport, u64)>> = Mutex::new(None);
    std::thread::scope(|scope| {
        for _ in 0..args.jobs {
            scope.spawn(|| {
                while !stop.load(Ordering::SeqCst) && wall.elapsed() < budget {
                    let plan = Plan::from_seed(next.fetch_add(1, Ordering::SeqCst), duration);
                    let report = run(&plan);
                    let runs = {
                        let mut t = mutex::lock(&totals);
                        t.0 += 1;
                        t.1 += report.acquisitions;
                        t.2 += report.simulated;
                        t.0
                    };
                    print_run(&args, &plan, &report);
                    if !report.is_clean() {
                        if !stop.swap(true, Ordering::SeqCst) {
                            *mutex::lock(&failed) = Some((plan, report, runs));
                        }
                        break;
                    }
                }
            });
        }
    });
    if let Some((plan, report, runs)) = failed.into_inner().unwrap_or_else(PoisonError::into_inner)
    {
        if let Some(code) = conclude(&args, &plan, &report, wall, runs) {
            return code;
        }
    }
    let (runs, acquisitions, simulated) =
        totals.into_inner().unwrap_or_else(PoisonError::into_inner);
    print_totals(&args, runs, acquisitions, simulated, wall);
    if args.until_violation {
        println!(
            "MISSED after={:.1}s runs={runs}",
            wall.elapsed().as_secs_f64()
        );
    }
    ExitCode::SUCCESS
}

/// One run's line (every run unless `--quiet`; a run that failed always), and with `--verbose`
/// its plan and history.
fn print_run(args: &Args, plan: &Plan, report: &RunReport) {
    if !args.quiet || !report.is_clean() {
        println!(
            "seed {:#x}: {} acquisitions, {} faults, {} violation(s), digest {:016x}{}",
            plan.seed,
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
}

/// What a failed run ends with: the violation, the history around it, and (unless
/// `--until-violation`) a smaller plan that still fails; `None` for a clean run.
fn conclude(
    args: &Args,
    plan: &Plan,
    report: &RunReport,
    wall: Instant,
    runs: u64,
) -> Option<ExitCode> {
    if !report.violated() {
        return report.error.is_some().then_some(ExitCode::from(1));
    }
    println!("{}", report.first_violation().unwrap_or_default());
    println!("history around it:\n{}", report.around_first_violation());
    if args.until_violation {
        println!(
            "FOUND seed={:#x} after={:.1}s runs={runs}",
            plan.seed,
            wall.elapsed().as_secs_f64()
        );
        return Some(ExitCode::from(1));
    }
    let (smaller, shrink_runs) = shrink(plan, 60);
    println!(
        "shrunk in {shrink_runs} runs: {} faults, {} clients, {:?}: {smaller:#?}",
        smaller.faults.len(),
        smaller.workers.len(),
        smaller.duration
    );
    println!(
        "replay: make sim SEED={:#x} SIM_SECONDS={}",
        plan.seed, args.seconds
    );
    Some(ExitCode::from(1))
}

fn print_totals(args: &Args, runs: u64, acquisitions: usize, simulated: Duration, wall: Instant) {
    let secs = wall.elapsed().as_secs_f64();
    println!(
        "{runs} runs ({} at a time), {acquisitions} acquisitions in {simulated:.1?} simulated, \
         {secs:.1} s of wall clock: {:.0} acquisitions per second, 0 violations",
        args.jobs,
        acquisitions as f64 / secs.max(1e-9)
    );
}
