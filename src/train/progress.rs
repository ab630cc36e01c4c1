//! Training progress on stderr: env steps done of the total, with the throughput of this
//! process and the most recent mean episode return. On a terminal, a bar; otherwise (a
//! Slurm log, `nohup`, CI) plain lines, one per 1% of the run but at most one every 2 s
//! and at least one a minute. Nothing when the run is quiet.

use indicatif::{ProgressBar, ProgressStyle};
use std::cell::Cell;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

// `wide_bar` takes what the terminal has left, so that the line never wraps.
const TEMPLATE: &str = "{wide_bar:.cyan/blue} {human_pos}/{human_len} env steps  {msg}  eta {eta}";

pub struct Progress {
    bar: ProgressBar,
    start: Instant,
    start_steps: u64,
    /// Without a terminal: when the last line was printed, and at how many steps.
    lines: Option<Cell<(Instant, u64)>>,
}

/// The bounds on the time between two plain lines.
const LINES_MIN: Duration = Duration::from_secs(2);
const LINES_MAX: Duration = Duration::from_secs(60);

impl Progress {
    /// A bar over `total_env_steps`, starting at `start_env_steps` (nonzero on resume).
    pub fn new(total_env_steps: u64, start_env_steps: u64, quiet: bool) -> Progress {
        let terminal = std::io::stderr().is_terminal();
        let bar = if quiet || !terminal { ProgressBar::hidden() } else { ProgressBar::new(total_env_steps) };
        let lines = (!quiet && !terminal).then(|| Cell::new((Instant::now(), start_env_steps)));
        // TEMPLATE is a constant that the test below parses.
        bar.set_style(ProgressStyle::with_template(TEMPLATE).unwrap_or_else(|_| ProgressStyle::default_bar()));
        bar.set_length(total_env_steps);
        bar.set_position(start_env_steps);
        Progress { bar, start: Instant::now(), start_steps: start_env_steps, lines }
    }

    /// Moves the bar to `env_steps`; `recent_return` is the latest report's mean episode
    /// return (`None` while no episode has ended), kept on display until the next one.
    pub fn update(&self, env_steps: u64, recent_return: Option<f64>) {
        self.bar.set_position(env_steps);
        // Steps done by this process: a resumed run starts partway along.
        let rate = env_steps.saturating_sub(self.start_steps) as f64 / self.start.elapsed().as_secs_f64().max(1e-9);
        let ret = match recent_return {
            Some(r) => format!("return {r:.3}"),
            None => "return -".into(),
        };
        self.bar.set_message(format!("{}/s  {ret}", human(rate)));
        if let Some(lines) = &self.lines {
            let (at, steps) = lines.get();
            let total = self.bar.length().unwrap_or(0).max(1);
            let since = at.elapsed();
            let percent = (env_steps - steps.min(env_steps)) * 100 >= total;
            if (since >= LINES_MIN && percent) || since >= LINES_MAX {
                lines.set((Instant::now(), env_steps));
                eprintln!("{}", self.line(env_steps, total, rate, &ret));
            }
        }
    }

    /// A plain progress line: `env steps 40960/500000 (8%)  12.3k/s  return 0.532  eta 37s`.
    fn line(&self, env_steps: u64, total: u64, rate: f64, ret: &str) -> String {
        let eta = total.saturating_sub(env_steps) as f64 / rate.max(1e-9);
        let percent = env_steps * 100 / total;
        format!("env steps {env_steps}/{total} ({percent}%)  {}/s  {ret}  eta {}", human(rate), duration(eta))
    }

    /// Leaves the final state of the bar on screen, and ends its line.
    pub fn finish(&self) {
        self.bar.finish();
        if !self.bar.is_hidden() {
            eprintln!();
        }
    }
}

/// Seconds as `1h 02m`, `3m 07s` or `42s`.
fn duration(s: f64) -> String {
    let s = s.round() as u64;
    match (s / 3600, s % 3600 / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m {s:02}s"),
        (h, m, _) => format!("{h}h {m:02}m"),
    }
}

fn human(x: f64) -> String {
    match x {
        x if x >= 1e9 => format!("{:.2}G", x / 1e9),
        x if x >= 1e6 => format!("{:.2}M", x / 1e6),
        x if x >= 1e3 => format!("{:.1}k", x / 1e3),
        x => format!("{x:.0}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn template_parses_and_quiet_bar_is_hidden() {
        assert!(ProgressStyle::with_template(TEMPLATE).is_ok());
        let p = Progress::new(1000, 100, true);
        assert!(p.bar.is_hidden());
        p.update(600, Some(1.25));
        assert_eq!(p.bar.position(), 600);
        assert!(p.bar.message().ends_with("return 1.250"), "{}", p.bar.message());
        p.finish();
        assert_eq!(human(2.5e6), "2.50M");
        assert_eq!(human(12_345.0), "12.3k");
        assert_eq!(
            p.line(40_960, 500_000, 12_345.0, "return 0.532"),
            "env steps 40960/500000 (8%)  12.3k/s  return 0.532  eta 37s"
        );
        assert_eq!(
            (duration(3725.0), duration(187.0), duration(42.4)),
            ("1h 02m".into(), "3m 07s".into(), "42s".into())
        );
    }
}
