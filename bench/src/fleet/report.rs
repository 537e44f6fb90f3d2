//! The fleet benchmark's report: every figure next to its goal, as a ratio.

use std::fmt;
use std::time::Duration;

use super::control_plane::Backend;
use super::phases::BackendReport;

/// Goal: the one-component rollout's Plans created, gated and seen within this.
pub const ROLLOUT_GOAL: Duration = Duration::from_secs(10);
/// Goal: store writes per Plan lifecycle at most this.
pub const WRITES_PER_PLAN_GOAL: f64 = 5.0;
/// Goal: the API server's memory at most this.
pub const APISERVER_RSS_GOAL: u64 = 1 << 30;
/// Goal: dispatch latency p99 at most this, with every runner watching.
pub const DISPATCH_P99_GOAL: Duration = Duration::from_millis(10);
/// Goal: the whole fleet admitted (every install Active) within this.
pub const ADMISSION_GOAL: Duration = Duration::from_secs(120);
/// Goal: CPU per Plan, the API server's, the controllers' and the runners' together, at
/// most this many milliseconds.
pub const CPU_MS_PER_PLAN_GOAL: f64 = 2.0;
/// Goal: the controllers' memory at most this.
pub const CONTROLLERS_RSS_GOAL: u64 = 1 << 30;

/// Every backend's figures and the raw etcd baseline.
#[derive(Clone, Debug)]
pub struct FleetReport {
    /// Installs.
    pub installs: usize,
    /// Components per install.
    pub components: usize,
    /// One per store.
    pub backends: Vec<BackendReport>,
    /// Raw etcd create-if-absent transactions per second (etcd-client, concurrency 64).
    pub raw_etcd_txn_per_second: f64,
}

/// The `q` quantile (nearest rank) of sorted durations.
fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

impl fmt::Display for FleetReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "fleet: {} installs x {} components, one simulated runner (own token, client and watch) per install",
            self.installs, self.components
        )?;
        for b in &self.backends {
            let r = &b.rollout;
            let plans = r.plans.max(1) as f64;
            let writes_per_plan = r.total_writes() as f64 / plans;
            let plan_writes = r.writes_to("plans") as f64 / plans;
            let writes_per_second = r.total_writes() as f64 / r.writing.as_secs_f64().max(1e-3);
            let p50 = quantile(&b.dispatch, 0.50);
            let p99 = quantile(&b.dispatch, 0.99);
            let ratio = |value: f64, goal: f64| value / goal;
            writeln!(f, "\n[{} store]", b.backend.name())?;
            writeln!(f, "admission")?;
            writeln!(
                f,
                "  installs created                {:>9.2} s",
                b.installs_created.as_secs_f64()
            )?;
            writeln!(
                f,
                "  runners watching                {:>9.2} s   (tokens minted, Plans listed, watches open)",
                b.runners_watching.as_secs_f64()
            )?;
            writeln!(
                f,
                "  every install Active            {:>9.2} s   ({} plans)   goal <= {} s: ratio {:.2}",
                b.admitted.as_secs_f64(),
                b.admission_plans,
                ADMISSION_GOAL.as_secs(),
                ratio(b.admitted.as_secs_f64(), ADMISSION_GOAL.as_secs_f64())
            )?;
            writeln!(f, "one-component rollout ({} plans)", r.plans)?;
            writeln!(
                f,
                "  created, seen by runners        {:>9.2} s",
                r.created.as_secs_f64()
            )?;
            writeln!(
                f,
                "  created, gated, seen by runners {:>9.2} s   goal <= {} s: ratio {:.2}",
                r.gated.as_secs_f64(),
                ROLLOUT_GOAL.as_secs(),
                ratio(r.gated.as_secs_f64(), ROLLOUT_GOAL.as_secs_f64())
            )?;
            writeln!(
                f,
                "  every install on the release    {:>9.2} s",
                r.rolled_out.as_secs_f64()
            )?;
            writeln!(
                f,
                "  store writes per plan           {:>9.2}     goal <= {WRITES_PER_PLAN_GOAL}: ratio {:.2}  (on the Plan itself: {plan_writes:.2})",
                writes_per_plan,
                ratio(writes_per_plan, WRITES_PER_PLAN_GOAL)
            )?;
            let by: Vec<String> = r
                .writes
                .iter()
                .map(|((op, resource), n)| format!("{op} {resource} {n}"))
                .collect();
            writeln!(f, "    {}", by.join(", "))?;
            writeln!(
                f,
                "  store writes per second         {:>9.0}     raw etcd create txn/s {:.0}: ratio {:.2}",
                writes_per_second,
                self.raw_etcd_txn_per_second,
                writes_per_second / self.raw_etcd_txn_per_second.max(1.0)
            )?;
            let per_plan = |d: Duration| d.as_secs_f64() * 1e3 / plans;
            let cpu = per_plan(r.cpu.apiserver + r.cpu.controllers + r.cpu.runners);
            writeln!(
                f,
                "  CPU ms per plan                 {cpu:>9.2}     goal <= {CPU_MS_PER_PLAN_GOAL}: ratio {:.2}  (apiserver {:.2}, controllers {:.2}, runners {:.2}, until the writes stopped)",
                ratio(cpu, CPU_MS_PER_PLAN_GOAL),
                per_plan(r.cpu.apiserver),
                per_plan(r.cpu.controllers),
                per_plan(r.cpu.runners)
            )?;
            if b.backend == Backend::Etcd {
                writeln!(
                    f,
                    "    etcd itself                   {:>9.2}     (not in the figure, which counts what the embedded store's apiserver does; with it {:.2})",
                    per_plan(r.cpu.etcd),
                    cpu + per_plan(r.cpu.etcd)
                )?;
            }
            writeln!(
                f,
                "dispatch ({} approvals, {} runners watching)",
                b.dispatch.len(),
                self.installs
            )?;
            writeln!(
                f,
                "  p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms   p99 goal <= {} ms: ratio {:.2}",
                p50.as_secs_f64() * 1e3,
                p99.as_secs_f64() * 1e3,
                b.dispatch.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
                DISPATCH_P99_GOAL.as_millis(),
                ratio(p99.as_secs_f64(), DISPATCH_P99_GOAL.as_secs_f64())
            )?;
            writeln!(
                f,
                "  the approval's write alone, until answered: p50 {:.1} ms, p99 {:.1} ms   (its store commit is on the dispatch path)",
                quantile(&b.dispatch_written, 0.50).as_secs_f64() * 1e3,
                quantile(&b.dispatch_written, 0.99).as_secs_f64() * 1e3,
            )?;
            writeln!(f, "memory")?;
            writeln!(
                f,
                "  apiserver RSS {:.0} MiB, peak {:.0} MiB   goal <= 1024 MiB: ratio {:.2}",
                mib(b.apiserver.rss),
                mib(b.apiserver.peak),
                ratio(b.apiserver.peak as f64, APISERVER_RSS_GOAL as f64)
            )?;
            let top = |bytes: &std::collections::BTreeMap<String, u64>| {
                let mut by: Vec<(&String, &u64)> = bytes.iter().filter(|(_, n)| **n > 0).collect();
                by.sort_by(|a, b| b.1.cmp(a.1));
                by.iter()
                    .take(4)
                    .map(|(r, n)| format!("{r} {:.0}", mib(**n)))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            writeln!(
                f,
                "    of which watch caches: objects {:.0} MiB ({}), windows {:.0} MiB ({})",
                mib(b.caches.objects.values().sum()),
                top(&b.caches.objects),
                mib(b.caches.windows.values().sum()),
                top(&b.caches.windows)
            )?;
            writeln!(
                f,
                "  controllers RSS {:.0} MiB, peak {:.0} MiB   goal <= 1024 MiB: ratio {:.2}",
                mib(b.controllers.rss),
                mib(b.controllers.peak),
                ratio(b.controllers.peak as f64, CONTROLLERS_RSS_GOAL as f64)
            )?;
            writeln!(
                f,
                "runner watch errors (410s that made a runner relist)   {}   goal 0: {}",
                b.watch_errors,
                if b.watch_errors == 0 {
                    "met"
                } else {
                    "not met"
                }
            )?;
            writeln!(
                f,
                "checks: plans applied twice {}, claims lost {}, runner call failures {}",
                b.applied_twice, b.claims_lost, b.runner_errors
            )?;
        }
        if self.backends.len() > 1 {
            self.side_by_side(f)?;
        }
        Ok(())
    }
}

impl FleetReport {
    /// Every goal's figure on each store, in one table: value (ratio to the goal).
    fn side_by_side(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const LABEL: usize = 48;
        const COLUMN: usize = 18;
        writeln!(f, "\nside by side: value (ratio to the goal)")?;
        write!(f, "  {:<LABEL$}", "figure (goal)")?;
        for b in &self.backends {
            write!(f, "{:>COLUMN$}", b.backend.name())?;
        }
        writeln!(f)?;
        let rows = self.backends.iter().map(figures).collect::<Vec<_>>();
        for (i, (label, _)) in rows[0].iter().enumerate() {
            write!(f, "  {label:<LABEL$}")?;
            for figures in &rows {
                write!(f, "{:>COLUMN$}", figures[i].1)?;
            }
            writeln!(f)?;
        }
        Ok(())
    }
}

/// One store's figure per goal, labelled with the goal: `(label, "value (ratio)")`.
fn figures(b: &BackendReport) -> Vec<(String, String)> {
    let r = &b.rollout;
    let plans = r.plans.max(1) as f64;
    let per_plan = |d: Duration| d.as_secs_f64() * 1e3 / plans;
    let cpu = per_plan(r.cpu.apiserver + r.cpu.controllers + r.cpu.runners);
    let writes = r.total_writes() as f64 / plans;
    let p99 = quantile(&b.dispatch, 0.99);
    let seconds = |d: Duration, goal: Duration| {
        format!(
            "{:.1} s ({:.2})",
            d.as_secs_f64(),
            d.as_secs_f64() / goal.as_secs_f64()
        )
    };
    let memory = |bytes: u64, goal: u64| {
        format!("{:.0} MiB ({:.2})", mib(bytes), bytes as f64 / goal as f64)
    };
    let zero = |n: u64| format!("{n} ({})", if n == 0 { "met" } else { "not met" });
    vec![
        (
            format!("every install Active (<= {} s)", ADMISSION_GOAL.as_secs()),
            seconds(b.admitted, ADMISSION_GOAL),
        ),
        (
            format!(
                "rollout: created, gated, seen (<= {} s)",
                ROLLOUT_GOAL.as_secs()
            ),
            seconds(r.gated, ROLLOUT_GOAL),
        ),
        (
            format!("CPU ms per plan (<= {CPU_MS_PER_PLAN_GOAL})"),
            format!("{cpu:.2} ({:.2})", cpu / CPU_MS_PER_PLAN_GOAL),
        ),
        (
            "  and etcd's own, not in the goal".to_owned(),
            if b.backend == Backend::Etcd {
                format!("{:.2}", per_plan(r.cpu.etcd))
            } else {
                "-".to_owned()
            },
        ),
        (
            "apiserver RSS peak (<= 1024 MiB)".to_owned(),
            memory(b.apiserver.peak, APISERVER_RSS_GOAL),
        ),
        (
            "controllers RSS peak (<= 1024 MiB)".to_owned(),
            memory(b.controllers.peak, CONTROLLERS_RSS_GOAL),
        ),
        (
            format!("store writes per plan (<= {WRITES_PER_PLAN_GOAL})"),
            format!("{writes:.2} ({:.2})", writes / WRITES_PER_PLAN_GOAL),
        ),
        ("runner watch errors (0)".to_owned(), zero(b.watch_errors)),
        (
            format!("dispatch p99 (<= {} ms)", DISPATCH_P99_GOAL.as_millis()),
            format!(
                "{:.1} ms ({:.2})",
                p99.as_secs_f64() * 1e3,
                p99.as_secs_f64() / DISPATCH_P99_GOAL.as_secs_f64()
            ),
        ),
        ("plans applied twice (0)".to_owned(), zero(b.applied_twice)),
        ("claims lost (0)".to_owned(), zero(b.claims_lost)),
    ]
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::fleet::control_plane::{CacheBytes, CpuTimes, Memory};
    use crate::fleet::phases::Rollout;

    fn backend(backend: Backend, gated: u64, peak_mib: u64, claims_lost: u64) -> BackendReport {
        BackendReport {
            backend,
            installs_created: Duration::from_secs(1),
            runners_watching: Duration::from_secs(2),
            admitted: Duration::from_secs(240),
            admission_plans: 110,
            rollout: Rollout {
                plans: 10,
                created: Duration::from_secs(gated),
                gated: Duration::from_secs(gated),
                rolled_out: Duration::from_secs(gated + 1),
                writes: BTreeMap::from([(("create".to_owned(), "plans".to_owned()), 50)]),
                writing: Duration::from_secs(gated),
                cpu: CpuTimes {
                    apiserver: Duration::from_millis(30),
                    controllers: Duration::from_millis(10),
                    runners: Duration::ZERO,
                    etcd: Duration::from_millis(if backend == Backend::Etcd { 20 } else { 0 }),
                },
            },
            dispatch: vec![Duration::from_millis(4); 100],
            dispatch_written: vec![Duration::from_millis(3); 100],
            apiserver: Memory {
                rss: peak_mib << 20,
                peak: peak_mib << 20,
            },
            controllers: Memory {
                rss: 100 << 20,
                peak: 100 << 20,
            },
            caches: CacheBytes::default(),
            claims_lost,
            applied_twice: 0,
            watch_errors: 0,
            runner_errors: 0,
        }
    }

    fn report(backends: Vec<BackendReport>) -> String {
        FleetReport {
            installs: 10,
            components: 10,
            backends,
            raw_etcd_txn_per_second: 1000.0,
        }
        .to_string()
    }

    /// With two stores, the report ends with one row per goal holding each store's value
    /// and ratio, in the stores' order; with one store it has no such table.
    #[test]
    fn two_stores_are_reported_side_by_side() {
        let text = report(vec![
            backend(Backend::Embedded, 20, 512, 0),
            backend(Backend::Etcd, 40, 2048, 3),
        ]);
        let table = &text[text.find("side by side").expect("a side-by-side table")..];
        let row = |label: &str| {
            table
                .lines()
                .find(|l| l.trim_start().starts_with(label))
                .unwrap_or_else(|| panic!("no row {label} in\n{table}"))
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert!(
            table
                .lines()
                .nth(1)
                .unwrap()
                .ends_with("embedded              etcd")
        );
        assert!(
            row("rollout").ends_with("20.0 s (2.00) 40.0 s (4.00)"),
            "{table}"
        );
        assert!(row("every install Active").ends_with("240.0 s (2.00) 240.0 s (2.00)"));
        assert!(row("CPU ms per plan").ends_with("4.00 (2.00) 4.00 (2.00)"));
        assert!(row("and etcd's own").ends_with("- 2.00"), "{table}");
        assert!(row("apiserver RSS peak").ends_with("512 MiB (0.50) 2048 MiB (2.00)"));
        assert!(row("store writes per plan").ends_with("5.00 (1.00) 5.00 (1.00)"));
        assert!(row("dispatch p99").ends_with("4.0 ms (0.40) 4.0 ms (0.40)"));
        assert!(row("claims lost").ends_with("0 (met) 3 (not met)"));
        assert_eq!(table.lines().count(), 2 + 11, "{table}");
        // The etcd section says what etcd itself used, outside the figure.
        let etcd = &text[text.find("[etcd store]").unwrap()..];
        assert!(
            etcd.contains("etcd itself                        2.00"),
            "{etcd}"
        );
        assert!(etcd.contains("with it 6.00"), "{etcd}");
        let embedded = &text[..text.find("[etcd store]").unwrap()];
        assert!(!embedded.contains("etcd itself"), "{embedded}");

        let one = report(vec![backend(Backend::Embedded, 20, 512, 0)]);
        assert!(!one.contains("side by side"), "{one}");
    }
}
