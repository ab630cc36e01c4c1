//! The training progress bar on stderr: env steps done of the total, with the throughput
//! of this process and the most recent mean episode return. Hidden when stderr is not a
//! terminal (logs, CI) or when the run is quiet.

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::time::Instant;

// `wide_bar` takes what the terminal has left, so that the line never wraps.
const TEMPLATE: &str = "{wide_bar:.cyan/blue} {human_pos}/{human_len} env steps  {msg}  eta {eta}";

pub struct Progress {
    bar: ProgressBar,
    start: Instant,
    start_steps: u64,
}

impl Progress {
    /// A bar over `total_env_steps`, starting at `start_env_steps` (nonzero on resume).
    pub fn new(total_env_steps: u64, start_env_steps: u64, quiet: bool) -> Progress {
        let bar = if quiet || !std::io::stderr().is_terminal() {
            ProgressBar::hidden()
        } else {
            ProgressBar::new(total_env_steps)
        };
        // TEMPLATE is a constant that the test below parses.
        bar.set_style(ProgressStyle::with_template(TEMPLATE).unwrap_or_else(|_| ProgressStyle::default_bar()));
        bar.set_length(total_env_steps);
        bar.set_position(start_env_steps);
        Progress { bar, start: Instant::now(), start_steps: start_env_steps }
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
    }

    /// Leaves the final state of the bar on screen, and ends its line.
    pub fn finish(&self) {
        self.bar.finish();
        if !self.bar.is_hidden() {
            eprintln!();
        }
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
    }
}
