//! What a training run shows while it runs and leaves in its run folder.
//!
//! - `metrics.jsonl`: one JSON line per step, flushed as it is written (`metrics.rs`);
//! - a progress line on stderr (`progress.rs`);
//! - at the end, `curves.png` (each metric against step, `plot.rs`) and `summary.txt` (a table of
//!   each metric's start, end and range, and the mean time per step in each kind of op,
//!   `summary.rs`);
//! - `events.out.tfevents.0.rlc`: the lines of `metrics.jsonl` as TensorBoard event files
//!   (`tensorboard.rs`), so that `tensorboard --logdir runs/` shows every run's metrics;
//! - with `--trace`, `trace.json`: every op each rank ran, on one clock (`trace.rs`).
//!
//! A resumed run continues the same `metrics.jsonl`, so the curve and summary cover the whole
//! run, and the file equals an uninterrupted run's apart from the timing fields.

mod metrics;
mod numbers;
mod plot;
mod progress;
mod summary;
mod tensorboard;
pub mod trace;

// The rasteriser lives in `rlc-raster` (shared with `rlc plan`'s timeline).
use rlc_raster::{canvas, font};
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

pub use metrics::{TIMING_KEYS, is_timing, strip_timing};
pub use tensorboard::EVENTS_FILE;

use progress::Progress;

pub const METRICS_FILE: &str = "metrics.jsonl";
pub const CURVES_FILE: &str = "curves.png";
pub const SUMMARY_FILE: &str = "summary.txt";

/// One finished loop step.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRecord {
    /// 0-based loop step.
    pub step: u64,
    /// The program's `log { ... }` fields in source order, e.g. reward, kl, then any per-op-kind
    /// times (`time/generate`, …: written after the report's timing fields, left out of the
    /// curves). Names must differ from the report's own keys (`step`, `tokens`, `seconds`,
    /// `tokens_per_s`).
    pub metrics: Vec<(String, f64)>,
    /// Tokens generated in this step, over all ranks.
    pub tokens: u64,
    /// Wall time of this step.
    pub seconds: f64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportOptions {
    pub total_steps: u64,
    /// Draw progress on stderr.
    pub progress: bool,
    /// Shown on the curves and atop the summary.
    pub title: String,
}

/// A run's report, fed one [`StepRecord`] per step.
#[derive(Debug)]
pub struct Report {
    dir: PathBuf,
    title: String,
    metrics: File,
    events: tensorboard::EventFile,
    progress: Progress,
}

impl Report {
    /// Creates `dir` (and parents) if needed and opens `dir/metrics.jsonl` for appending.
    ///
    /// With `resume_from_step = Some(s)` the file first keeps only its lines with step < s (the
    /// steps the checkpoint covers), so the resumed run's file equals an uninterrupted one's
    /// apart from timing. With `None` this is a fresh run and any old file is emptied, so a
    /// reused folder does not mix two runs in one curve.
    pub fn create(
        dir: &Path,
        options: ReportOptions,
        resume_from_step: Option<u64>,
    ) -> io::Result<Report> {
        fs::create_dir_all(dir)?;
        let metrics = metrics::open(&dir.join(METRICS_FILE), resume_from_step)?;
        // The event file is written again from the lines metrics.jsonl kept (none when fresh).
        let kept = match resume_from_step {
            Some(_) => fs::read_to_string(dir.join(METRICS_FILE))?,
            None => String::new(),
        };
        let events = tensorboard::EventFile::create(&dir.join(EVENTS_FILE), &kept)?;
        Ok(Report {
            dir: dir.to_path_buf(),
            progress: Progress::new(options.total_steps, options.progress),
            title: options.title,
            metrics,
            events,
        })
    }

    /// The run folder.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Appends one JSON line and its event and flushes them; updates the progress line.
    pub fn record(&mut self, record: &StepRecord) -> io::Result<()> {
        let line = metrics::format_line(record);
        metrics::append(&mut self.metrics, &line)?;
        self.events.append(&line)?;
        self.progress.update(record);
        Ok(())
    }

    /// Writes `curves.png` and `summary.txt` from every step in `metrics.jsonl` (including
    /// those before a resume) and returns the summary text. May be called again later, e.g.
    /// after more steps.
    pub fn finish(&mut self) -> io::Result<String> {
        self.progress.finish();
        let rows = metrics::read(&self.dir.join(METRICS_FILE))?;
        let series = metrics::series(&rows);
        let steps: Vec<u64> = rows.iter().map(|row| row.step).collect();
        plot::write(&self.dir.join(CURVES_FILE), &self.title, &steps, &series)?;
        let text = summary::render(&self.title, &rows, &series);
        fs::write(self.dir.join(SUMMARY_FILE), &text)?;
        Ok(text)
    }
}

#[cfg(test)]
mod tests;
