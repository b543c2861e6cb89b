//! The progress line on stderr: `step  37/120 [###-------] reward 0.412 kl 0.0031 | 5.1k tok/s
//! | ETA 0:42`.
//!
//! On a terminal one line is redrawn in place each step. Elsewhere (CI logs, `2> file`)
//! redrawing would leave a wall of `\r`-joined text, so a plain line goes out every tenth of the
//! run instead.

use std::io::{self, IsTerminal, Write};

use super::StepRecord;
use super::numbers;

const BAR_WIDTH: u64 = 10;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Off,
    /// Redraw one line with `\r`.
    Redraw,
    /// Print a line after every `every` steps (and the last).
    Lines {
        every: u64,
    },
}

#[derive(Debug)]
pub struct Progress {
    total_steps: u64,
    mode: Mode,
    /// Totals over the steps this process ran: a resumed run's rate and ETA should not count
    /// time spent before the restart.
    steps: u64,
    tokens: u64,
    seconds: f64,
    /// A redrawn line is on screen and needs a newline before anything else is printed.
    line_open: bool,
}

impl Progress {
    pub fn new(total_steps: u64, enabled: bool) -> Self {
        let mode = if !enabled {
            Mode::Off
        } else if io::stderr().is_terminal() {
            Mode::Redraw
        } else {
            Mode::Lines {
                every: plain_interval(total_steps),
            }
        };
        Self {
            total_steps,
            mode,
            steps: 0,
            tokens: 0,
            seconds: 0.0,
            line_open: false,
        }
    }

    pub fn update(&mut self, record: &StepRecord) {
        self.steps += 1;
        self.tokens += record.tokens;
        if record.seconds.is_finite() {
            self.seconds += record.seconds;
        }
        let done = record.step + 1;
        let print = match self.mode {
            Mode::Off => return,
            Mode::Redraw => true,
            Mode::Lines { every } => done.is_multiple_of(every) || done >= self.total_steps,
        };
        if !print {
            return;
        }
        let tokens_per_s = self.tokens as f64 / self.seconds;
        let mean_step_seconds = self.seconds / self.steps as f64;
        let remaining = self.total_steps.saturating_sub(done);
        let eta_seconds = mean_step_seconds * remaining as f64;
        let line = render(record, self.total_steps, tokens_per_s, eta_seconds);
        // Progress is best effort: a closed stderr must not stop training.
        let mut stderr = io::stderr().lock();
        let _ = if self.mode == Mode::Redraw {
            self.line_open = true;
            // `\x1b[K` clears what a longer previous line left to the right.
            write!(stderr, "\r{line}\x1b[K")
        } else {
            writeln!(stderr, "{line}")
        };
        let _ = stderr.flush();
    }

    /// Ends a redrawn line so later output starts on a fresh one.
    pub fn finish(&mut self) {
        if self.line_open {
            self.line_open = false;
            let _ = writeln!(io::stderr());
        }
    }
}

/// Steps between two plain lines: every step for short runs, else about a tenth of the run.
fn plain_interval(total_steps: u64) -> u64 {
    if total_steps <= 20 {
        1
    } else {
        total_steps.div_ceil(10)
    }
}

/// The progress text after `record`'s step, given this process's throughput and the estimated
/// seconds left.
fn render(record: &StepRecord, total_steps: u64, tokens_per_s: f64, eta_seconds: f64) -> String {
    let done = record.step + 1;
    // A run may go past an estimate of zero or too few total steps; never draw an overfull bar.
    let total = total_steps.max(done);
    let width = total.to_string().len();
    let filled = (done * BAR_WIDTH / total) as usize;
    let mut line = format!(
        "step {done:>width$}/{total} [{}{}]",
        "#".repeat(filled),
        "-".repeat(BAR_WIDTH as usize - filled)
    );
    for (name, value) in record
        .metrics
        .iter()
        .filter(|(name, _)| !super::metrics::is_timing(name))
    {
        line.push_str(&format!(" {name} {}", numbers::significant(*value, 3)));
    }
    line.push_str(&format!(
        " | {} tok/s | ETA {}",
        numbers::rate(tokens_per_s),
        numbers::duration(eta_seconds)
    ));
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(step: u64) -> StepRecord {
        StepRecord {
            step,
            metrics: vec![("reward".into(), 0.41249), ("kl".into(), 0.0031)],
            tokens: 512,
            seconds: 0.1,
        }
    }

    #[test]
    fn renders_step_bar_metrics_rate_and_eta() {
        assert_eq!(
            render(&record(36), 120, 5_100.0, 42.0),
            "step  37/120 [###-------] reward 0.412 kl 0.0031 | 5.1k tok/s | ETA 0:42"
        );
        assert_eq!(
            render(&record(119), 120, 5_100.0, 0.0),
            "step 120/120 [##########] reward 0.412 kl 0.0031 | 5.1k tok/s | ETA 0:00"
        );
    }

    #[test]
    fn per_op_times_stay_off_the_line() {
        let mut timed = record(36);
        timed.metrics.push(("time/generate".into(), 0.2));
        assert_eq!(
            render(&timed, 120, 5_100.0, 42.0),
            render(&record(36), 120, 5_100.0, 42.0)
        );
    }

    #[test]
    fn overrunning_or_unknown_totals_keep_the_bar_full() {
        let line = render(&record(9), 0, f64::NAN, 0.0);
        assert!(line.starts_with("step 10/10 [##########]"), "{line}");
        assert!(line.ends_with("| - tok/s | ETA 0:00"), "{line}");
    }

    #[test]
    fn plain_lines_every_step_for_short_runs_else_every_tenth() {
        assert_eq!(plain_interval(0), 1);
        assert_eq!(plain_interval(20), 1);
        assert_eq!(plain_interval(120), 12);
        assert_eq!(plain_interval(101), 11);
    }

    #[test]
    fn disabled_progress_still_counts_and_prints_nothing() {
        let mut progress = Progress::new(5, false);
        progress.update(&record(0));
        progress.finish();
        assert_eq!((progress.steps, progress.tokens), (1, 512));
        assert!(!progress.line_open);
    }
}
