//! The Markdown report of a comparison run: one section per case, then the targets, each
//! figure a median over runs and each ratio computed within a run.

use std::fmt::Write as _;
use std::time::Duration;

use quorumlock_testkit::figures::group_digits;
use quorumlock_testkit::RedisNodes;

use crate::config::{Case, Config, Key, Setup, CONTENDED_PAUSE, CONTENDED_WORKERS, NODES, SCALING};
use crate::measure::{Measurement, Ratio, Results, SPREAD_SAMPLES};
use crate::support::{median, Kind};

/// Where and when the run happened, for the report's header.
pub struct Machine {
    pub load_before: String,
    pub load_after: String,
    pub redis_version: String,
    pub elapsed: Duration,
}

/// The 1, 5 and 15 minute load averages.
pub fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("model name")
                    .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
            })
        })
        .unwrap_or_else(|| "unknown".into())
}

/// The version of the first of `nodes`, as it reports it.
pub fn redis_version(nodes: &RedisNodes) -> String {
    let mut connection = redis::Client::open(nodes[0].url())
        .unwrap()
        .get_connection()
        .unwrap();
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut connection)
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("unknown")
        .trim()
        .to_owned()
}

fn today() -> String {
    std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// Microseconds, shown as µs below 10 ms and as ms above.
pub fn us(v: f64) -> String {
    if v.is_nan() {
        "–".into()
    } else if v < 10_000.0 {
        format!("{v:.0} µs")
    } else {
        format!("{:.1} ms", v / 1000.0)
    }
}

/// A rate or a count: one decimal below 10, whole and grouped by thousands above.
fn rate(v: f64) -> String {
    if v.is_nan() {
        "–".into()
    } else if v < 10.0 {
        format!("{v:.1}")
    } else {
        group_digits(v.round() as u64)
    }
}

fn x(v: f64) -> String {
    if v.is_nan() || v.is_infinite() {
        "–".into()
    } else {
        format!("{v:.2}×")
    }
}

fn runs_list(values: &[f64]) -> String {
    values
        .iter()
        .map(|v| {
            if v.is_finite() {
                format!("{v:.2}")
            } else {
                "–".into()
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn rate_of(m: &Measurement) -> f64 {
    m.rate()
}

fn p50(m: &Measurement) -> f64 {
    m.acquire_p(0.5)
}

/// The whole report.
pub fn report(r: &Results, cfg: &Config, machine: &Machine) -> String {
    let mut out = String::new();
    header(&mut out, cfg, machine);
    for case in [Case::Uncontended, Case::SlowMaster, Case::PausedMaster] {
        fault_case(&mut out, r, cfg, case);
    }
    contended(&mut out, r);
    if cfg.has(Case::Scaling) {
        scaling(&mut out, r, cfg);
    }
    if cfg.has(Case::Uncontended) || cfg.has(Case::ClientCpu) {
        client_cpu(&mut out, r, cfg);
    }
    for case in [Case::SeparateClients, Case::ManyClients] {
        separate(&mut out, r, cfg, case);
    }
    targets(&mut out, r, cfg);
    separate_targets(&mut out, r, cfg);
    out
}

fn header(out: &mut String, cfg: &Config, machine: &Machine) {
    let _ = writeln!(out, "## quorumlock vs rslock vs the raw floor\n");
    let _ = writeln!(
        out,
        "{} × {}, redis-server {}, loopback; load average {} before, {} after; {} ({:.0} s)",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        cpu_model(),
        machine.redis_version,
        machine.load_before,
        machine.load_after,
        today(),
        machine.elapsed.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "Medians of {} interleaved run(s), {} s windows after {} s warm-up; ratios computed within each run (per-run values in brackets). TTL 10 s, every client with its default settings.\n",
        cfg.runs, cfg.secs, cfg.warmup
    );
}

/// Cases 1 to 3: five masters, each worker on a resource of its own, with or without a fault.
fn fault_case(out: &mut String, r: &Results, cfg: &Config, case: Case) {
    let (setup, title) = match case {
        Case::Uncontended => (Setup::Healthy, "Uncontended, five healthy masters"),
        Case::SlowMaster => (
            Setup::Slow,
            "One of five masters slowed by 20 ms per round trip (testkit proxy)",
        ),
        Case::PausedMaster => (
            Setup::Paused,
            "One of five masters paused (SIGSTOP) for the whole window",
        ),
        _ => return,
    };
    let key = |workers, kind| Key::new(setup, NODES, workers, kind);
    let healthy = |workers, kind| Key::new(Setup::Healthy, NODES, workers, kind);
    if r.runs(key(1, Kind::Quorumlock)).is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "### {}. {title}\n\n| workers | client | cycles/s | acquire p50 | acquire p99 | release p50 | release p99 | CPU/cycle | failed acq. | stalled |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        case.number()
    );
    for workers in cfg.distinct_worker_counts() {
        for kind in Kind::WITH_BARE {
            let k = key(workers, kind);
            if r.runs(k).is_empty() {
                continue;
            }
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                k.workers,
                k.kind,
                rate(r.med(k, rate_of)),
                us(r.med(k, p50)),
                us(r.med(k, |m| m.acquire_p(0.99))),
                us(r.med(k, |m| m.release_p(0.5))),
                us(r.med(k, |m| m.release_p(0.99))),
                if setup == Setup::Healthy {
                    us(r.med(k, Measurement::cpu_us))
                } else {
                    "–".into()
                },
                rate(r.med(k, |m| m.failed_acquires as f64)),
                rate(r.med(k, |m| m.stalled as f64)),
            );
        }
    }
    let _ = writeln!(out);
    if case == Case::Uncontended && !r.reply_spreads.is_empty() {
        let kth = |k: usize| median(&r.reply_spreads.iter().map(|s| s[k]).collect::<Vec<_>>());
        let _ = writeln!(
            out,
            "Time from sending one `SET` to its k-th reply from the five masters (raw connections, one fan-out at a time, median of {SPREAD_SAMPLES} per run): {} — the third reply comes at {:.0} % of the fifth's time; that is all deciding early can save here.\n",
            (0..5)
                .map(|k| format!("{} {}", ["1st", "2nd", "3rd", "4th", "5th"][k], us(kth(k))))
                .collect::<Vec<_>>()
                .join(", "),
            100.0 * kth(2) / kth(4),
        );
    }
    for workers in cfg.distinct_worker_counts() {
        let q = key(workers, Kind::Quorumlock);
        let vs_rs = r.ratio(q, key(workers, Kind::Rslock), rate_of);
        let vs_raw = r.ratio(q, key(workers, Kind::Raw), rate_of);
        let _ = write!(
            out,
            "* {workers} worker(s): quorumlock cycles/s = {} rslock [{}], {} raw floor [{}]",
            x(vs_rs.median),
            runs_list(&vs_rs.per_run),
            x(vs_raw.median),
            runs_list(&vs_raw.per_run)
        );
        let rs = key(workers, Kind::Rslock);
        match case {
            Case::SlowMaster => {
                let own = r.ratio(q, healthy(workers, Kind::Quorumlock), p50);
                let rs_own = r.ratio(rs, healthy(workers, Kind::Rslock), p50);
                let _ = write!(
                    out,
                    "; acquire p50 = {} its own no-fault p50 [{}] (rslock: {} [{}])",
                    x(own.median),
                    runs_list(&own.per_run),
                    x(rs_own.median),
                    runs_list(&rs_own.per_run)
                );
            }
            Case::PausedMaster => {
                let own = r.ratio(q, healthy(workers, Kind::Quorumlock), rate_of);
                let rs_own = r.ratio(rs, healthy(workers, Kind::Rslock), rate_of);
                let _ = write!(
                    out,
                    "; throughput = {:.0} % of its own no-fault [{}] (rslock: {:.1} % [{}])",
                    own.median * 100.0,
                    runs_list(&own.per_run),
                    rs_own.median * 100.0,
                    runs_list(&rs_own.per_run)
                );
            }
            Case::Uncontended => {
                let bare = key(workers, Kind::Bare);
                let rate = r.ratio(q, bare, rate_of);
                let acquire = r.ratio(q, bare, p50);
                let _ = write!(
                    out,
                    "; = {} the bare early-quorum client [{}], acquire p50 = {} its p50 [{}]",
                    x(rate.median),
                    runs_list(&rate.per_run),
                    x(acquire.median),
                    runs_list(&acquire.per_run)
                );
            }
            _ => {}
        }
        let _ = writeln!(out);
    }
    let _ = writeln!(out);
}

/// The keys of the contended case: quorumlock's and rslock's.
fn contended_keys() -> (Key, Key) {
    let key = |kind| Key::new(Setup::Contended, NODES, CONTENDED_WORKERS, kind);
    (key(Kind::Quorumlock), key(Kind::Rslock))
}

/// Case 4: every worker on one resource.
fn contended(out: &mut String, r: &Results) {
    let (qc, rc) = contended_keys();
    if r.runs(qc).is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "### {}. Contended: {CONTENDED_WORKERS} workers on one resource, {CONTENDED_PAUSE:?} pause after each release\n",
        Case::Contended.number()
    );
    let _ = writeln!(out, "| client | critical sections/s | gap p50 | gap p99 | acquire p50 | acquire p99 | per-worker min/max | failed acquires/s | overlaps |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for k in [qc, rc] {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {:.2} | {} | {} |",
            k.kind,
            rate(r.med(k, rate_of)),
            us(r.med(k, |m| m.gap_p(0.5))),
            us(r.med(k, |m| m.gap_p(0.99))),
            us(r.med(k, p50)),
            us(r.med(k, |m| m.acquire_p(0.99))),
            r.med(k, Measurement::fairness),
            rate(r.med(k, |m| m.failed_acquires as f64 / m.secs)),
            r.runs(k).iter().map(|m| m.overlaps).sum::<usize>(),
        );
    }
    let vs = r.ratio(qc, rc, rate_of);
    let _ = writeln!(
        out,
        "\n* quorumlock critical sections/s = {} rslock [{}]. Gap: from the holder's call to release to the next holder's acquire returning.\n",
        x(vs.median),
        runs_list(&vs.per_run)
    );
}

/// Case 5: the uncontended cycle over each master count.
fn scaling(out: &mut String, r: &Results, cfg: &Config) {
    let _ = writeln!(
        out,
        "### {}. Scaling with the number of masters\n",
        Case::Scaling.number()
    );
    let _ = writeln!(out, "| masters | workers | quorumlock cycles/s | rslock | raw floor | quorumlock acquire p50 | rslock | raw floor | quorumlock / rslock | quorumlock / raw |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for workers in cfg.distinct_worker_counts() {
        for n in SCALING {
            let k = |kind| Key::new(Setup::Healthy, n, workers, kind);
            let _ = writeln!(
                out,
                "| {n} | {workers} | {} | {} | {} | {} | {} | {} | {} | {} |",
                rate(r.med(k(Kind::Quorumlock), rate_of)),
                rate(r.med(k(Kind::Rslock), rate_of)),
                rate(r.med(k(Kind::Raw), rate_of)),
                us(r.med(k(Kind::Quorumlock), p50)),
                us(r.med(k(Kind::Rslock), p50)),
                us(r.med(k(Kind::Raw), p50)),
                x(r.ratio(k(Kind::Quorumlock), k(Kind::Rslock), rate_of)
                    .median),
                x(r.ratio(k(Kind::Quorumlock), k(Kind::Raw), rate_of).median),
            );
        }
    }
    let _ = writeln!(out);
}

/// Case 6: client and masters' CPU per cycle, from the measurements of case 1.
fn client_cpu(out: &mut String, r: &Results, cfg: &Config) {
    let _ = writeln!(
        out,
        "### {}. Client CPU per cycle (process user + system time / cycles, five healthy masters)\n",
        Case::ClientCpu.number()
    );
    let _ = writeln!(out, "| workers | quorumlock | rslock | raw floor | quorumlock / raw | masters' CPU/cycle: quorumlock | rslock | raw floor | quorumlock / raw |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for workers in cfg.distinct_worker_counts() {
        let k = |kind| Key::new(Setup::Healthy, NODES, workers, kind);
        let client = r.ratio(k(Kind::Quorumlock), k(Kind::Raw), Measurement::cpu_us);
        let masters = r.ratio(
            k(Kind::Quorumlock),
            k(Kind::Raw),
            Measurement::server_cpu_us,
        );
        let _ = writeln!(
            out,
            "| {workers} | {} | {} | {} | {} [{}] | {} | {} | {} | {} [{}] |",
            us(r.med(k(Kind::Quorumlock), Measurement::cpu_us)),
            us(r.med(k(Kind::Rslock), Measurement::cpu_us)),
            us(r.med(k(Kind::Raw), Measurement::cpu_us)),
            x(client.median),
            runs_list(&client.per_run),
            us(r.med(k(Kind::Quorumlock), Measurement::server_cpu_us)),
            us(r.med(k(Kind::Rslock), Measurement::server_cpu_us)),
            us(r.med(k(Kind::Raw), Measurement::server_cpu_us)),
            x(masters.median),
            runs_list(&masters.per_run)
        );
    }
    let _ = writeln!(
        out,
        "\nThe masters' CPU comes from `/proc/PID/stat` (10 ms ticks). On this 2-core box client and masters share the cores, so at 32 workers throughput ≈ 2 cores / (client + masters' CPU per cycle).\n"
    );
    let _ = writeln!(
        out,
        "The masters' commands per uncontended cycle, all five together, median over runs (`INFO commandstats` over the window; commands that scripts run count too, so `exists`, `set`, `get`, `del` under `evalsha` ran inside the scripts):\n"
    );
    for workers in cfg.distinct_worker_counts() {
        for kind in [Kind::Quorumlock, Kind::Rslock, Kind::Raw] {
            let k = Key::new(Setup::Healthy, NODES, workers, kind);
            if !r.runs(k).is_empty() {
                let _ = writeln!(
                    out,
                    "* {workers} worker(s), {kind}: {}",
                    commands_listed(r, k)
                );
            }
        }
    }
    let _ = writeln!(out);
}

/// The masters' commands per cycle of `k`, every master together, median over its runs:
/// `name calls`, by name (`INFO` itself left out).
fn commands_listed(r: &Results, k: Key) -> String {
    let mut names: Vec<&String> = r.runs(k).iter().flat_map(|m| m.commands.keys()).collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter(|name| *name != "info")
        .map(|name| {
            let calls = r.med(k, |m| m.commands.get(name).map_or(0.0, |c| c.0));
            format!("{name} {calls:.1}")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// One row of the targets table: a ratio, and whether it meets `ok`.
fn target(out: &mut String, name: &str, ratio: Ratio, ok: fn(f64) -> bool) {
    if ratio.median.is_nan() {
        // Not measured in this run (its case was not chosen).
        return;
    }
    let met = if ok(ratio.median) { "yes" } else { "**no**" };
    let _ = writeln!(
        out,
        "| {name} | {} [{}] | {met} |",
        x(ratio.median),
        runs_list(&ratio.per_run)
    );
}

/// The targets of the performance issue, each as a ratio inside one run.
fn targets(out: &mut String, r: &Results, cfg: &Config) {
    let w = cfg.workers;
    let old = [
        Case::Uncontended,
        Case::SlowMaster,
        Case::PausedMaster,
        Case::Contended,
        Case::ClientCpu,
    ];
    if !old.into_iter().any(|c| cfg.has(c)) {
        return;
    }
    let _ = writeln!(
        out,
        "### Targets\n\n| target | measured: median [per run] | met |\n|---|---|---|"
    );
    let q = |setup, workers| Key::new(setup, NODES, workers, Kind::Quorumlock);
    let rs = |setup, workers| Key::new(setup, NODES, workers, Kind::Rslock);
    let raw = |setup, workers| Key::new(setup, NODES, workers, Kind::Raw);
    target(
        out,
        "1 worker: cycles/s ≥ 1.3× rslock",
        r.ratio(q(Setup::Healthy, 1), rs(Setup::Healthy, 1), rate_of),
        |v| v >= 1.3,
    );
    let bare = Key::new(Setup::Healthy, NODES, 1, Kind::Bare);
    target(
        out,
        "1 worker: acquire p50 ≤ 1.1× the bare early-quorum client's",
        r.ratio(q(Setup::Healthy, 1), bare, p50),
        |v| v <= 1.1,
    );
    target(
        out,
        &format!("{w} workers: cycles/s ≥ 1.15× rslock"),
        r.ratio(q(Setup::Healthy, w), rs(Setup::Healthy, w), rate_of),
        |v| v >= 1.15,
    );
    target(
        out,
        &format!("{w} workers: cycles/s ≥ 0.9× raw floor"),
        r.ratio(q(Setup::Healthy, w), raw(Setup::Healthy, w), rate_of),
        |v| v >= 0.9,
    );
    target(
        out,
        &format!("{w} workers: masters' CPU/cycle ≤ 1.1× raw floor"),
        r.ratio(
            q(Setup::Healthy, w),
            raw(Setup::Healthy, w),
            Measurement::server_cpu_us,
        ),
        |v| v <= 1.1,
    );
    target(
        out,
        &format!("stretch: {w} workers: client CPU/cycle ≤ raw floor's"),
        r.ratio(
            q(Setup::Healthy, w),
            raw(Setup::Healthy, w),
            Measurement::cpu_us,
        ),
        |v| v <= 1.0,
    );
    for workers in cfg.distinct_worker_counts() {
        target(
            out,
            &format!("slowed master, {workers} worker(s): acquire p50 ≤ 1.25× own no-fault"),
            r.ratio(q(Setup::Slow, workers), q(Setup::Healthy, workers), p50),
            |v| v <= 1.25,
        );
    }
    for workers in cfg.distinct_worker_counts() {
        target(
            out,
            &format!("paused master, {workers} worker(s): cycles/s ≥ 0.80× own no-fault"),
            r.ratio(
                q(Setup::Paused, workers),
                q(Setup::Healthy, workers),
                rate_of,
            ),
            |v| v >= 0.8,
        );
    }
    let (qc, rc) = contended_keys();
    let gap = r.med(qc, |m| m.gap_p(0.5));
    if !gap.is_nan() {
        let _ = writeln!(
            out,
            "| contended: gap p50 ≤ 5 ms (with wake-up) | {} [{}] | {} |",
            us(gap),
            r.runs(qc)
                .iter()
                .map(|m| us(m.gap_p(0.5)))
                .collect::<Vec<_>>()
                .join(", "),
            if gap.is_nan() {
                "–"
            } else if gap <= 5000.0 {
                "yes"
            } else {
                "**no**"
            }
        );
    }
    target(
        out,
        "contended, 8 workers sharing one client: critical sections/s ≥ 0.8× rslock",
        r.ratio(qc, rc, rate_of),
        |v| v >= 0.8,
    );
    let fair = r.med(qc, Measurement::fairness);
    if !fair.is_nan() {
        let _ = writeln!(
            out,
            "| contended, 8 workers sharing one client: per-worker min/max ≥ 0.9 | {fair:.2} [{}] | {} |",
            r.runs(qc)
                .iter()
                .map(|m| format!("{:.2}", m.fairness()))
                .collect::<Vec<_>>()
                .join(", "),
            if fair >= 0.9 { "yes" } else { "**no**" }
        );
    }
}

/// The name of a separate-clients variant: its processes and its critical section.
fn variant(setup: Setup, workers: usize) -> String {
    let Setup::Separate { processes, work_us } = setup else {
        return format!("{setup:?}");
    };
    let layout = if processes == 1 {
        format!("1 process × {workers}")
    } else {
        format!("{processes} processes × {}", workers / processes)
    };
    let work = if work_us == 0 {
        "empty".to_owned()
    } else {
        format!("{} ms asleep", f64::from(work_us) / 1000.0)
    };
    format!("{layout}, {work}")
}

/// Values of each run, in run order.
fn per_run(r: &Results, k: Key, f: impl Fn(&Measurement) -> String) -> String {
    r.runs(k).iter().map(f).collect::<Vec<_>>().join(", ")
}

/// Cases 7 and 8: every worker on one resource with a client of its own.
fn separate(out: &mut String, r: &Results, cfg: &Config, case: Case) {
    let Some(workers) = case.separate_workers() else {
        return;
    };
    if !cfg.has(case) {
        return;
    }
    let key = |setup, kind| Key::new(setup, NODES, workers, kind);
    let _ = writeln!(
        out,
        "### {}. Separate clients: {workers} workers on one resource, each with a client of its own
",
        case.number()
    );
    let _ = writeln!(
        out,
        "Each worker loops acquire → critical section → release with no pause, its client built with the defaults (quorumlock: a `Redlock` each; rslock: a `LockManager` each). The processes are children of the bench binary; times come from `CLOCK_MONOTONIC`, shared by the processes. Gap: from one holder's call to release to the next holder's acquire returning, over all workers' events in time order. Failed: `acquire` calls that returned an error inside the window (quorumlock: `NotAcquired` within the default policy; rslock: its retries used up), and their share of all `acquire` calls that returned inside it. Overlaps: an `O_EXCL` marker file found already there on entering the critical section (summed over runs).\n"
    );
    let _ = writeln!(out, "| processes × workers, critical section | client | critical sections/s | failed acquires | failed % | gap p50 | gap p99 | acquire p50 | acquire p99 | held p50 | per-worker min/max | overlaps | stalled | masters' CPU/cycle |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for setup in Setup::separate_variants() {
        for kind in setup.kinds() {
            let k = key(setup, *kind);
            if r.runs(k).is_empty() {
                continue;
            }
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {:.2} % | {} | {} | {} | {} | {} | {:.2} | {} | {} | {} |",
                variant(setup, workers),
                kind,
                rate(r.med(k, rate_of)),
                rate(r.med(k, |m| m.failed_acquires as f64)),
                r.med(k, Measurement::failed_pct),
                us(r.med(k, |m| m.gap_p(0.5))),
                us(r.med(k, |m| m.gap_p(0.99))),
                us(r.med(k, p50)),
                us(r.med(k, |m| m.acquire_p(0.99))),
                us(r.med(k, |m| m.hold_p(0.5))),
                r.med(k, Measurement::fairness),
                r.runs(k).iter().map(|m| m.overlaps).sum::<usize>(),
                r.runs(k).iter().map(|m| m.stalled).sum::<usize>(),
                us(r.med(k, Measurement::server_cpu_us)),
            );
        }
    }
    let _ = writeln!(out, "\nPer run, in run order:\n");
    let _ = writeln!(out, "| processes × workers, critical section | client | critical sections/s | failed % | gap p50 | gap p99 | per-worker min/max |\n|---|---|---|---|---|---|---|");
    for setup in Setup::separate_variants() {
        for kind in setup.kinds() {
            let k = key(setup, *kind);
            if r.runs(k).is_empty() {
                continue;
            }
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} |",
                variant(setup, workers),
                kind,
                per_run(r, k, |m| rate(m.rate())),
                per_run(r, k, |m| format!("{:.2}", m.failed_pct())),
                per_run(r, k, |m| us(m.gap_p(0.5))),
                per_run(r, k, |m| us(m.gap_p(0.99))),
                per_run(r, k, |m| format!("{:.2}", m.fairness())),
            );
        }
    }
    let _ = writeln!(
        out,
        "\nThe masters' commands per critical section, all masters together, median over runs (`INFO commandstats` over the window; commands that scripts run count too, so `get`, `zadd`, `time`, … under quorumlock are mostly inside its scripts):\n"
    );
    for setup in Setup::separate_variants() {
        for kind in setup.kinds() {
            let k = key(setup, *kind);
            if r.runs(k).is_empty() {
                continue;
            }
            let listed = commands_listed(r, k);
            let counted = if *kind == Kind::Quorumlock {
                let per = |i: usize| r.med(k, |m| m.per_acquired()[i]);
                format!(
                    " — per lock acquired: {:.2} attempts, {:.2} of them contended, {:.2} wake-ups by a hand-off (its own counters)",
                    per(0),
                    per(1),
                    per(2)
                )
            } else {
                String::new()
            };
            let _ = writeln!(
                out,
                "* {}, {kind}: {listed}{counted}",
                variant(setup, workers),
            );
        }
    }
    let _ = writeln!(out);
    for setup in Setup::separate_variants() {
        let vs = r.ratio(
            key(setup, Kind::Quorumlock),
            key(setup, Kind::Rslock),
            rate_of,
        );
        if vs.per_run.is_empty() {
            continue;
        }
        let _ = writeln!(
            out,
            "* {}: quorumlock critical sections/s = {} rslock [{}]",
            variant(setup, workers),
            x(vs.median),
            runs_list(&vs.per_run)
        );
    }
    let _ = writeln!(out);
}

/// One cell of the separate-clients targets: the median, per-run values, and whether it meets
/// the target.
fn cell(median: f64, runs: &[f64], shown: fn(f64) -> String, ok: bool) -> String {
    if median.is_nan() {
        return "–".into();
    }
    format!(
        "{} [{}] {}",
        shown(median),
        runs.iter()
            .map(|&v| shown(v))
            .collect::<Vec<_>>()
            .join(", "),
        if ok { "yes" } else { "**no**" }
    )
}

/// The targets of the separate-clients issue, for quorumlock in every measured variant.
fn separate_targets(out: &mut String, r: &Results, cfg: &Config) {
    let cases: Vec<Case> = [Case::SeparateClients, Case::ManyClients]
        .into_iter()
        .filter(|&c| cfg.has(c))
        .collect();
    if cases.is_empty() {
        return;
    }
    let _ = writeln!(
        out,
        "### Targets, separate clients (quorumlock; median [per run], met)\n\n| case | failed acquires: none | critical sections/s ≥ 0.8× rslock empty, ≥ 1.0× with work | gap p50 ≤ 0.5 ms | gap p99 ≤ 2 ms | per-worker min/max ≥ 0.9 | overlaps 0 |\n|---|---|---|---|---|---|---|"
    );
    let pct = |v: f64| format!("{v:.2} %");
    let two = |v: f64| format!("{v:.2}");
    let times = |v: f64| x(v);
    for case in cases {
        let Some(workers) = case.separate_workers() else {
            continue;
        };
        for setup in Setup::separate_variants() {
            let q = Key::new(setup, NODES, workers, Kind::Quorumlock);
            let rs = Key::new(setup, NODES, workers, Kind::Rslock);
            if r.runs(q).is_empty() {
                continue;
            }
            let values = |f: fn(&Measurement) -> f64| -> (f64, Vec<f64>) {
                let runs: Vec<f64> = r.runs(q).iter().map(f).collect();
                (median(&runs), runs)
            };
            let (failed, failed_runs) = values(Measurement::failed_pct);
            let vs = r.ratio(q, rs, rate_of);
            let (g50, g50_runs) = values(|m| m.gap_p(0.5));
            let (g99, g99_runs) = values(|m| m.gap_p(0.99));
            let (fair, fair_runs) = values(Measurement::fairness);
            let overlaps: usize = r.runs(q).iter().map(|m| m.overlaps).sum();
            let wanted = match setup {
                Setup::Separate { work_us: 0, .. } => 0.8,
                _ => 1.0,
            };
            let _ = writeln!(
                out,
                "| {workers} clients, {} | {} | {} | {} | {} | {} | {} {} |",
                variant(setup, workers),
                cell(failed, &failed_runs, pct, failed == 0.0),
                cell(vs.median, &vs.per_run, times, vs.median >= wanted),
                cell(g50, &g50_runs, us, g50 <= 500.0),
                cell(g99, &g99_runs, us, g99 <= 2000.0),
                cell(fair, &fair_runs, two, fair >= 0.9),
                overlaps,
                if overlaps == 0 { "yes" } else { "**no**" },
            );
        }
    }
    let _ = writeln!(out);
}
