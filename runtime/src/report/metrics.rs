//! `metrics.jsonl`: one JSON object per step, written as the run goes so a crash loses at most
//! the step in flight, and read back whole for the curve and the summary.
//!
//! A line is `{"step":S, <the program's log fields in source order>, "tokens":T, "seconds":X,
//! "tokens_per_s":R, <"time/<kind>":Y for each kind of op rank 0 ran>}` (the seconds of the
//! step's generation, forward passes, training, kernels, transfers and other ops, which `rlc plan
//! --calibrate` fits the cost model to). Only `seconds`, `tokens_per_s` and the `time/` keys
//! depend on timing: [`strip_timing`] removes them, so two runs of the same job can be compared
//! line by line; the curves, the summary's table and the progress line leave them out.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use serde::Serialize;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;

use super::StepRecord;
use rlc_plan::simulate::TIME_KEY_PREFIX;

/// The report's own keys whose values differ between two otherwise identical runs (with every
/// key under [`TIME_KEY_PREFIX`]: see [`is_timing`]).
pub const TIMING_KEYS: [&str; 2] = ["seconds", "tokens_per_s"];

/// Whether a `metrics.jsonl` key holds a time: [`TIMING_KEYS`] and the per-op-kind seconds
/// (`time/generate`, …), which the runtime passes in a step's metrics after the `log` fields.
/// A `log` field cannot be one (its name is an identifier).
pub fn is_timing(key: &str) -> bool {
    TIMING_KEYS.contains(&key) || key.starts_with(TIME_KEY_PREFIX)
}

/// One metric's values, parallel to the rows it was collected from (NaN where a row lacks it or
/// logged a non-finite value).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    pub name: String,
    pub values: Vec<f64>,
}

/// The JSON line for `record`, without the newline.
pub fn format_line(record: &StepRecord) -> String {
    let mut line = format!("{{\"step\":{}", record.step);
    let (times, logged): (Vec<_>, Vec<_>) =
        record.metrics.iter().partition(|(name, _)| is_timing(name));
    for (name, value) in logged {
        line.push_str(&format!(",{}:{}", to_json(name), to_json(value)));
    }
    // Rounded so the file stays readable: timing noise is far above these digits anyway.
    let micro = |seconds: f64| (seconds * 1e6).round() / 1e6;
    let tokens_per_s = (record.tokens as f64 / record.seconds * 10.0).round() / 10.0;
    line.push_str(&format!(
        ",\"tokens\":{},\"seconds\":{},\"tokens_per_s\":{}",
        record.tokens,
        to_json(&micro(record.seconds)),
        to_json(&tokens_per_s)
    ));
    for (name, value) in times {
        line.push_str(&format!(",{}:{}", to_json(name), to_json(&micro(*value))));
    }
    line.push('}');
    line
}

/// `line` without its timing fields (`seconds`, `tokens_per_s`, `time/…`), other keys kept in
/// order. A
/// line that is not a JSON object comes back trimmed but otherwise unchanged.
pub fn strip_timing(line: &str) -> String {
    let Ok(OrderedObject(entries)) = serde_json::from_str(line) else {
        return line.trim().to_string();
    };
    let fields: Vec<String> = entries
        .iter()
        .filter(|(key, _)| !is_timing(key))
        .map(|(key, value)| format!("{}:{}", to_json(key), to_json(value)))
        .collect();
    format!("{{{}}}", fields.join(","))
}

/// Opens `path` for appending new lines. A fresh run (`resume_from_step` is `None`) starts an
/// empty file; a resumed one first drops the lines of steps it is about to redo, and any torn
/// line a crash left behind.
pub fn open(path: &Path, resume_from_step: Option<u64>) -> io::Result<File> {
    match resume_from_step {
        None => File::create(path),
        Some(step) => {
            truncate_from(path, step)?;
            OpenOptions::new().create(true).append(true).open(path)
        }
    }
}

/// Keeps only the lines of `path` whose step is below `step`. Rewrites through a temporary
/// file so an interruption leaves either the old file or the new one.
fn truncate_from(path: &Path, step: u64) -> io::Result<()> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(error) => return Err(error),
    };
    let mut kept = String::new();
    for line in text.lines() {
        if parse_line(line).is_some_and(|record| record.step < step) {
            kept.push_str(line);
            kept.push('\n');
        }
    }
    let temporary = path.with_extension("jsonl.tmp");
    fs::write(&temporary, kept)?;
    fs::rename(&temporary, path)
}

/// Appends `line` (from [`format_line`]) and its newline and flushes them, in one write so a
/// reader never sees half a line.
pub fn append(file: &mut File, line: &str) -> io::Result<()> {
    file.write_all(format!("{line}\n").as_bytes())?;
    file.flush()
}

/// Every readable row of `path`, sorted by step. Lines that do not parse are skipped: they
/// can only be a step torn by a crash, which the resumed run writes again.
pub fn read(path: &Path) -> io::Result<Vec<StepRecord>> {
    let text = fs::read_to_string(path)?;
    let mut rows: Vec<StepRecord> = text.lines().filter_map(parse_line).collect();
    rows.sort_by_key(|row| row.step);
    Ok(rows)
}

/// Splits rows into one series per `log` field, in order of first appearance (the per-op
/// times are left out: [`op_times`]).
pub fn series(rows: &[StepRecord]) -> Vec<Series> {
    let mut series: Vec<Series> = Vec::new();
    for (index, row) in rows.iter().enumerate() {
        for (name, value) in row.metrics.iter().filter(|(name, _)| !is_timing(name)) {
            let position = match series.iter().position(|s| &s.name == name) {
                Some(position) => position,
                None => {
                    series.push(Series {
                        name: name.clone(),
                        values: vec![f64::NAN; rows.len()],
                    });
                    series.len() - 1
                }
            };
            series[position].values[index] = *value;
        }
    }
    series
}

/// The mean seconds per step of each per-op-kind time (`time/generate` → `generate`), in order
/// of first appearance; a step without a key counts as 0 for it. The first step (warm-up:
/// allocation, compilation) is left out when there are others.
pub fn op_times(rows: &[StepRecord]) -> Vec<(String, f64)> {
    let rows = if rows.len() > 1 { &rows[1..] } else { rows };
    let mut totals: Vec<(String, f64)> = Vec::new();
    for row in rows {
        for (name, value) in &row.metrics {
            let Some(kind) = name.strip_prefix(TIME_KEY_PREFIX) else {
                continue;
            };
            let value = if value.is_finite() { *value } else { 0.0 };
            match totals.iter_mut().find(|(k, _)| k == kind) {
                Some((_, total)) => *total += value,
                None => totals.push((kind.to_string(), value)),
            }
        }
    }
    for (_, total) in &mut totals {
        *total /= rows.len() as f64;
    }
    totals
}

/// A row from a line; `None` unless it is an object with an unsigned integer `step`. Null
/// metrics (non-finite when written) come back as NaN.
fn parse_line(line: &str) -> Option<StepRecord> {
    let OrderedObject(entries) = serde_json::from_str(line).ok()?;
    let mut step = None;
    let mut record = StepRecord {
        step: 0,
        metrics: Vec::new(),
        tokens: 0,
        seconds: f64::NAN,
    };
    for (key, value) in entries {
        match key.as_str() {
            "step" => step = Some(value.as_u64()?),
            "tokens" => record.tokens = value.as_u64().unwrap_or(0),
            "seconds" => record.seconds = value.as_f64().unwrap_or(f64::NAN),
            "tokens_per_s" => {}
            _ => record
                .metrics
                .push((key, value.as_f64().unwrap_or(f64::NAN))),
        }
    }
    record.step = step?;
    Some(record)
}

fn to_json<T: Serialize + ?Sized>(value: &T) -> String {
    // Strings, floats (non-finite become `null`) and JSON values cannot fail to serialise.
    serde_json::to_string(value).expect("serialising a JSON scalar")
}

/// A JSON object's entries in file order: `serde_json::Map` sorts its keys unless some crate in
/// the build turns on `preserve_order`, and the metrics' order is the program's `log` order.
struct OrderedObject(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for OrderedObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntriesVisitor;

        impl<'de> Visitor<'de> for EntriesVisitor {
            type Value = OrderedObject;

            fn expecting(&self, formatter: &mut fmt::Formatter) -> fmt::Result {
                formatter.write_str("a JSON object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OrderedObject, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, Value>()? {
                    entries.push(entry);
                }
                Ok(OrderedObject(entries))
            }
        }

        deserializer.deserialize_map(EntriesVisitor)
    }
}

/// The entries of a JSON object line in file order; `None` unless it is an object.
pub fn fields(line: &str) -> Option<Vec<(String, Value)>> {
    serde_json::from_str(line)
        .ok()
        .map(|OrderedObject(entries)| entries)
}

/// The keys of a JSON object line, in file order (for tests).
#[cfg(test)]
pub fn keys(line: &str) -> Vec<String> {
    let OrderedObject(entries) = serde_json::from_str(line).expect("a JSON object");
    entries.into_iter().map(|(key, _)| key).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(step: u64, reward: f64) -> StepRecord {
        StepRecord {
            step,
            metrics: vec![("reward".into(), reward), ("kl".into(), 0.0)],
            tokens: 1024,
            seconds: 0.153,
        }
    }

    #[test]
    fn line_has_fixed_keys_around_the_metrics_in_order() {
        let line = format_line(&record(0, 0.0625));
        assert_eq!(
            line,
            r#"{"step":0,"reward":0.0625,"kl":0.0,"tokens":1024,"seconds":0.153,"tokens_per_s":6692.8}"#
        );
        assert_eq!(
            keys(&line),
            ["step", "reward", "kl", "tokens", "seconds", "tokens_per_s"]
        );
    }

    #[test]
    fn non_finite_values_are_null() {
        let mut bad = record(3, f64::NAN);
        bad.metrics.push(("loss".into(), f64::INFINITY));
        bad.seconds = 0.0;
        let line = format_line(&bad);
        let value: Value = serde_json::from_str(&line).unwrap();
        assert!(value["reward"].is_null());
        assert!(value["loss"].is_null());
        assert!(value["tokens_per_s"].is_null());
        let parsed = parse_line(&line).unwrap();
        assert!(parsed.metrics[0].1.is_nan());
    }

    #[test]
    fn strip_timing_removes_exactly_the_timing_keys() {
        let line = format_line(&record(7, 0.5));
        assert_eq!(
            strip_timing(&line),
            r#"{"step":7,"reward":0.5,"kl":0.0,"tokens":1024}"#
        );
        assert_eq!(strip_timing("  not json \n"), "not json");
    }

    #[test]
    fn series_follow_first_appearance_and_fill_gaps_with_nan() {
        let mut rows = vec![record(0, 1.0), record(1, 2.0)];
        rows[1].metrics.push(("loss".into(), 3.0));
        let series = series(&rows);
        let names: Vec<&str> = series.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["reward", "kl", "loss"]);
        assert_eq!(series[0].values, [1.0, 2.0]);
        assert!(series[2].values[0].is_nan());
        assert_eq!(series[2].values[1], 3.0);
    }

    #[test]
    fn op_times_follow_the_timing_fields_and_stay_out_of_the_series() {
        let mut rows = vec![record(0, 1.0), record(1, 2.0), record(2, 3.0)];
        for (i, row) in rows.iter_mut().enumerate() {
            row.metrics
                .push(("time/generate".into(), 0.25 * (i + 1) as f64));
            row.metrics.push(("time/train".into(), 0.1234567));
        }
        rows[2].metrics.retain(|(name, _)| name != "time/train");
        let line = format_line(&rows[1]);
        assert_eq!(
            line,
            r#"{"step":1,"reward":2.0,"kl":0.0,"tokens":1024,"seconds":0.153,"tokens_per_s":6692.8,"time/generate":0.5,"time/train":0.123457}"#
        );
        assert_eq!(
            strip_timing(&line),
            r#"{"step":1,"reward":2.0,"kl":0.0,"tokens":1024}"#
        );
        let parsed = parse_line(&line).unwrap();
        assert_eq!(parsed.metrics.len(), 4);
        let names: Vec<String> = series(&rows).into_iter().map(|s| s.name).collect();
        assert_eq!(names, ["reward", "kl"]);
        // Steps 1 and 2 (step 0 is the warm-up); step 2 has no training time.
        let times = op_times(&rows);
        assert_eq!(times[0], ("generate".to_string(), 0.625));
        assert_eq!(times[1].0, "train");
        assert!((times[1].1 - 0.1234567 / 2.0).abs() < 1e-12);
    }

    #[test]
    fn torn_and_foreign_lines_are_skipped() {
        assert!(parse_line(r#"{"step":4,"rew"#).is_none());
        assert!(parse_line(r#"{"reward":1.0}"#).is_none());
        assert!(parse_line(r#"[1,2]"#).is_none());
        assert!(parse_line(r#"{"step":-1}"#).is_none());
    }
}
