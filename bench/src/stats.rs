//! Distributions of durations and the little Markdown they turn into.

use std::time::Duration;

use serde_json::{Value, json};

/// Samples of one measured path, in microseconds.
#[derive(Debug, Clone, Default)]
pub struct Samples(Vec<u64>);

impl Samples {
    /// Adds a sample.
    pub fn push(&mut self, d: Duration) {
        self.0.push(d.as_micros() as u64);
    }

    /// The samples sorted.
    fn sorted(&self) -> Vec<u64> {
        let mut s = self.0.clone();
        s.sort_unstable();
        s
    }

    /// Number of samples.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The p-quantile (0..=1) in microseconds, nearest rank.
    pub fn quantile_us(&self, p: f64) -> u64 {
        percentile(&self.sorted(), p)
    }

    /// Median in milliseconds.
    pub fn median_ms(&self) -> f64 {
        self.quantile_us(0.5) as f64 / 1000.0
    }

    /// Summary as JSON (microseconds).
    pub fn summary(&self) -> Value {
        let s = self.sorted();
        let mean = if s.is_empty() {
            0.0
        } else {
            s.iter().sum::<u64>() as f64 / s.len() as f64
        };
        json!({
            "n": s.len(),
            "min_us": s.first().copied().unwrap_or(0),
            "p50_us": percentile(&s, 0.50),
            "p90_us": percentile(&s, 0.90),
            "p99_us": percentile(&s, 0.99),
            "max_us": s.last().copied().unwrap_or(0),
            "mean_us": mean.round(),
        })
    }

    /// All samples as JSON (microseconds, in measurement order).
    pub fn raw(&self) -> Value {
        json!(self.0)
    }

    /// "| median | p90 | p99 |" cells in milliseconds.
    pub fn cells(&self) -> String {
        format!(
            "{} | {} | {}",
            ms(self.quantile_us(0.5)),
            ms(self.quantile_us(0.9)),
            ms(self.quantile_us(0.99))
        )
    }
}

/// Nearest-rank percentile of sorted values.
pub fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// Microseconds as milliseconds for a table.
pub fn ms(us: u64) -> String {
    if us >= 100_000 {
        format!("{:.0} ms", us as f64 / 1000.0)
    } else {
        format!("{:.2} ms", us as f64 / 1000.0)
    }
}

/// Writes `value` to `bench/results/<name>.json`.
pub fn write_result(name: &str, value: &Value) -> anyhow::Result<()> {
    let dir = stepd_e2e::repo_root().join("bench/results");
    std::fs::create_dir_all(&dir)?;
    std::fs::write(
        dir.join(format!("{name}.json")),
        serde_json::to_string_pretty(value)? + "\n",
    )?;
    Ok(())
}

/// The machine, for the result files.
pub fn machine() -> Value {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|m| m.trim().to_owned())
        .unwrap_or_default();
    let cpus = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let load = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        .unwrap_or_default();
    json!({"cpus": cpus, "cpu_model": model, "loadavg_1m_at_start": load})
}
