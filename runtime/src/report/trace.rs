//! `trace.json`: when a run is given `--trace`, each op every rank ran, with its start and end
//! on one clock — the measured counterpart of `rlc plan`'s simulated timeline. Written in the
//! Trace Event Format (`chrome://tracing`, <https://ui.perfetto.dev>): one complete event (`"ph":
//! "X"`) per op run, the rank as its thread, times in microseconds since the run started.

use std::io::{self, Write};
use std::path::Path;

pub const TRACE_FILE: &str = "trace.json";

/// One op run on one rank.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    pub rank: u32,
    pub step: u64,
    /// The plan op's id and label (`policy.update`, `transfer ret policy.train→critic.train`).
    pub op: u32,
    pub label: String,
    /// Microseconds since the run started, and how long it took (waits for other ranks inside
    /// collectives included).
    pub start_us: u64,
    pub duration_us: u64,
}

/// The trace file's name for the ranks this process ran: `trace.json` when it ran every rank,
/// else one file per rank (processes have clocks of their own).
pub fn file_name(ranks: &[u32], world: u32) -> String {
    match ranks {
        [rank] if world > 1 => format!("trace.rank-{rank}.json"),
        _ => TRACE_FILE.to_string(),
    }
}

/// Writes `spans` (in any order) to `path`, sorted by rank, start and op so the bytes depend
/// only on the spans.
pub fn write(path: &Path, spans: &[Span]) -> io::Result<()> {
    let mut sorted: Vec<&Span> = spans.iter().collect();
    sorted.sort_by_key(|s| (s.rank, s.start_us, s.op, s.step));
    let mut out = io::BufWriter::new(std::fs::File::create(path)?);
    writeln!(out, "{{\"displayTimeUnit\": \"ms\", \"traceEvents\": [")?;
    for (i, s) in sorted.iter().enumerate() {
        let event = serde_json::json!({
            "name": s.label,
            "ph": "X",
            "pid": 0,
            "tid": s.rank,
            "ts": s.start_us,
            "dur": s.duration_us,
            "args": { "step": s.step, "op": s.op },
        });
        let comma = if i + 1 < sorted.len() { "," } else { "" };
        writeln!(out, "{event}{comma}")?;
    }
    writeln!(out, "]}}")?;
    out.flush()
}

/// Reads back what [`write`] wrote (for tests and tools).
pub fn read(path: &Path) -> io::Result<Vec<Span>> {
    let text = std::fs::read_to_string(path)?;
    let value: serde_json::Value = serde_json::from_str(&text).map_err(io::Error::other)?;
    let bad = || io::Error::other(format!("{} is not a trace rlc wrote", path.display()));
    let events = value["traceEvents"].as_array().ok_or_else(bad)?;
    events
        .iter()
        .map(|e| {
            Some(Span {
                rank: u32::try_from(e["tid"].as_u64()?).ok()?,
                step: e["args"]["step"].as_u64()?,
                op: u32::try_from(e["args"]["op"].as_u64()?).ok()?,
                label: e["name"].as_str()?.to_string(),
                start_us: e["ts"].as_u64()?,
                duration_us: e["dur"].as_u64()?,
            })
        })
        .collect::<Option<Vec<_>>>()
        .ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spans_round_trip_sorted() {
        let dir = std::env::temp_dir().join(format!("rlc-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(TRACE_FILE);
        let span = |rank, start_us, op| Span {
            rank,
            step: 3,
            op,
            label: format!("op \"{op}\""),
            start_us,
            duration_us: 7,
        };
        write(&path, &[span(1, 5, 2), span(0, 9, 1), span(0, 2, 4)]).unwrap();
        assert_eq!(
            read(&path).unwrap(),
            vec![span(0, 2, 4), span(0, 9, 1), span(1, 5, 2)]
        );
        assert_eq!(file_name(&[0, 1], 2), "trace.json");
        assert_eq!(file_name(&[1], 2), "trace.rank-1.json");
        assert_eq!(file_name(&[0], 1), "trace.json");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
