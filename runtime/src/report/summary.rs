//! `summary.txt`: an aligned table of each metric's start, end and range, and the run's totals.
//!
//! ```text
//! GRPO digits
//!
//! metric  first 10   last 10      min       max
//! reward     0.047    0.4097  0.01667      0.44
//! kl      6.927e-6  0.003189        0  0.003442
//!
//! steps 120 | total time 1:36 | 5.1k tok/s
//! time per step: generate 412 ms, forward 96 ms, train 305 ms, kernel 21 ms, other 1.2 ms
//! ```
//!
//! The last line, the mean seconds rank 0 spent in each kind of op (after the first step), is
//! there when the run wrote them (`time/…` in `metrics.jsonl`).

use super::StepRecord;
use super::metrics::{self, Series};
use super::numbers;

/// How many steps the "first" and "last" means cover.
const WINDOW: usize = 10;
const SIGNIFICANT_DIGITS: usize = 4;

/// One metric's row. Every field is NaN when the metric has no finite value in its range.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricStats {
    pub name: String,
    pub first_mean: f64,
    pub last_mean: f64,
    pub min: f64,
    pub max: f64,
}

/// The statistics of `series`, whose values run in step order. Non-finite values (logged as
/// `null`) are left out rather than poisoning a mean.
pub fn stats(series: &Series) -> MetricStats {
    let values = &series.values;
    let head = &values[..values.len().min(WINDOW)];
    let tail = &values[values.len().saturating_sub(WINDOW)..];
    let finite = || values.iter().copied().filter(|v| v.is_finite());
    MetricStats {
        name: series.name.clone(),
        first_mean: finite_mean(head),
        last_mean: finite_mean(tail),
        min: finite().reduce(f64::min).unwrap_or(f64::NAN),
        max: finite().reduce(f64::max).unwrap_or(f64::NAN),
    }
}

fn finite_mean(values: &[f64]) -> f64 {
    let finite: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
    if finite.is_empty() {
        f64::NAN
    } else {
        finite.iter().sum::<f64>() / finite.len() as f64
    }
}

/// The summary text, ending in a newline.
pub fn render(title: &str, rows: &[StepRecord], series: &[Series]) -> String {
    let header = ["metric", "first 10", "last 10", "min", "max"].map(String::from);
    let mut table = vec![header];
    for stats in series.iter().map(stats) {
        let cell = |value: f64| {
            if value.is_finite() {
                numbers::significant(value, SIGNIFICANT_DIGITS)
            } else {
                "-".to_string()
            }
        };
        table.push([
            stats.name.clone(),
            cell(stats.first_mean),
            cell(stats.last_mean),
            cell(stats.min),
            cell(stats.max),
        ]);
    }

    let mut text = String::new();
    if !title.is_empty() {
        text.push_str(title);
        text.push_str("\n\n");
    }
    if series.is_empty() {
        text.push_str("no metrics logged\n");
    } else {
        text.push_str(&align(&table));
    }

    let seconds: f64 = rows
        .iter()
        .map(|r| r.seconds)
        .filter(|s| s.is_finite())
        .sum();
    let tokens: u64 = rows.iter().map(|r| r.tokens).sum();
    // Overall throughput (all tokens over all time), not a mean of per-step rates that would
    // over-weight fast steps.
    let tokens_per_s = if seconds > 0.0 {
        tokens as f64 / seconds
    } else {
        f64::NAN
    };
    text.push_str(&format!(
        "\nsteps {} | total time {} | {} tok/s\n",
        rows.len(),
        numbers::duration(seconds),
        numbers::rate(tokens_per_s)
    ));
    let op_times = metrics::op_times(rows);
    if !op_times.is_empty() {
        let parts: Vec<String> = op_times
            .iter()
            .map(|(kind, seconds)| format!("{kind} {}", numbers::seconds(*seconds)))
            .collect();
        text.push_str(&format!("time per step: {}\n", parts.join(", ")));
    }
    text
}

/// Left-aligns the first column and right-aligns the numbers, two spaces between columns.
fn align(table: &[[String; 5]]) -> String {
    let mut widths = [0; 5];
    for row in table {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    for row in table {
        let mut line = format!("{:<width$}", row[0], width = widths[0]);
        for (cell, width) in row.iter().zip(widths).skip(1) {
            line.push_str(&format!("  {cell:>width$}"));
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(count: u64) -> Vec<StepRecord> {
        (0..count)
            .map(|step| StepRecord {
                step,
                metrics: vec![],
                tokens: 100,
                seconds: 0.5,
            })
            .collect()
    }

    #[test]
    fn first_and_last_ten_means_of_a_known_series() {
        let series = Series {
            name: "reward".into(),
            values: (0..30).map(f64::from).collect(),
        };
        let stats = stats(&series);
        // Mean of 0..=9 and of 20..=29.
        assert_eq!(stats.first_mean, 4.5);
        assert_eq!(stats.last_mean, 24.5);
        assert_eq!((stats.min, stats.max), (0.0, 29.0));
    }

    #[test]
    fn short_series_overlap_and_nan_is_skipped() {
        let series = Series {
            name: "kl".into(),
            values: vec![1.0, f64::NAN, 3.0],
        };
        let stats = stats(&series);
        assert_eq!((stats.first_mean, stats.last_mean), (2.0, 2.0));
        assert_eq!((stats.min, stats.max), (1.0, 3.0));
        let empty = stats_of(&[]);
        assert!(empty.first_mean.is_nan() && empty.min.is_nan());
    }

    fn stats_of(values: &[f64]) -> MetricStats {
        stats(&Series {
            name: "x".into(),
            values: values.to_vec(),
        })
    }

    #[test]
    fn renders_an_aligned_table_and_totals() {
        let series = [
            Series {
                name: "reward".into(),
                values: vec![0.0625, 0.5625],
            },
            Series {
                name: "kl".into(),
                values: vec![f64::NAN, f64::NAN],
            },
        ];
        let text = render("demo", &rows(2), &series);
        assert_eq!(
            text,
            "demo\n\n\
             metric  first 10  last 10     min     max\n\
             reward    0.3125   0.3125  0.0625  0.5625\n\
             kl             -        -       -       -\n\
             \n\
             steps 2 | total time 0:01 | 200 tok/s\n"
        );
    }

    #[test]
    fn per_op_times_get_one_line_and_no_rows() {
        let mut rows = rows(3);
        for row in &mut rows {
            row.metrics = vec![
                ("reward".into(), 0.5),
                ("time/generate".into(), 0.412),
                ("time/other".into(), 0.0012),
            ];
        }
        let series = metrics::series(&rows);
        let text = render("", &rows, &series);
        assert_eq!(
            text,
            "metric  first 10  last 10  min  max\n\
             reward       0.5      0.5  0.5  0.5\n\
             \n\
             steps 3 | total time 0:02 | 200 tok/s\n\
             time per step: generate 412 ms, other 1.2 ms\n"
        );
    }

    #[test]
    fn no_steps_and_no_metrics_still_render() {
        let text = render("", &[], &[]);
        assert_eq!(
            text,
            "no metrics logged\n\nsteps 0 | total time 0:00 | - tok/s\n"
        );
    }
}
