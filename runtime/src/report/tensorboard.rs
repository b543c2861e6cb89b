//! TensorBoard event files: `metrics.jsonl` again, in the format TensorBoard reads
//! (`tensorboard --logdir runs/`), written beside it as the run goes.
//!
//! The format, from TensorFlow's `core/util/event.proto`, `core/framework/summary.proto` and the
//! TFRecord framing of `core/lib/io/record_writer.cc`:
//!
//! - the file is a sequence of records, each `length: u64 LE | masked CRC32C of those 8 bytes:
//!   u32 LE | data | masked CRC32C of data: u32 LE`, where a CRC `c` is masked as
//!   `((c >> 15) | (c << 17)) + 0xa282ead8` (wrapping);
//! - each record's data is one serialised `Event` message. The first is
//!   `{ file_version: "brain.Event:2" }`; then one per step:
//!   `{ wall_time, step, summary { value { tag, simple_value } … } }`.
//!
//! Only those few protobuf fields are written, encoded here by hand as proto3's canonical
//! serialisation does (a `wall_time` or `step` of zero is left out; the oneof members
//! `file_version`, `summary` and `simple_value` are always written), so the bytes equal those
//! of TensorFlow's and TensorBoard's own writers (tested against bytes from TensorBoard 2.21's
//! `RecordWriter`).
//!
//! The file is a function of `metrics.jsonl`, line for line, so it is as deterministic as that
//! file:
//!
//! - its name is fixed, [`EVENTS_FILE`]: TensorBoard takes any file whose name contains
//!   `tfevents` for an event file, and the usual `<unix seconds>.<host name>` suffix would only
//!   make two runs of one job differ;
//! - each line gives one event at its `step`, with every other key of the line as a scalar of
//!   the same tag, in line order: the program's `log` fields and the report's own `tokens`,
//!   `seconds`, `tokens_per_s` and `time/<kind>` (TensorBoard groups those under `time`). Values
//!   are `simple_value`s, 32-bit floats (TensorBoard's scalar type); a `null` (a non-finite
//!   value) becomes NaN;
//! - `wall_time` is the run's elapsed seconds at the end of the step (the sum of `seconds` of
//!   this line and the ones before it), not the clock: TensorBoard's "Relative" axis shows the
//!   run's time, its "Wall" axis starts at 1970;
//! - a resumed run writes the file again from the lines `metrics.jsonl` kept, so its file
//!   equals an uninterrupted run's apart from the timing values, like `metrics.jsonl`.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

use serde_json::Value;

use super::metrics;

/// The event file's name in the run folder.
pub const EVENTS_FILE: &str = "events.out.tfevents.0.rlc";

/// The `file_version` of the first event: the version TensorBoard's readers expect.
const FILE_VERSION: &str = "brain.Event:2";

/// The event file of a run, open for appending one event per step.
#[derive(Debug)]
pub struct EventFile {
    file: File,
    /// The sum of `seconds` over the lines written so far.
    elapsed: f64,
}

impl EventFile {
    /// Writes `path` afresh: the version event, then one event per line of `lines` (the lines
    /// a resumed run keeps of `metrics.jsonl`; empty for a fresh run; lines that do not parse,
    /// a step torn by a crash, are left out as `metrics.jsonl`'s reader leaves them out). Goes
    /// through a temporary file, so an interruption leaves either the old file or the new one.
    pub fn create(path: &Path, lines: &str) -> io::Result<EventFile> {
        let mut elapsed = 0.0;
        let mut bytes = record(&version_event());
        for line in lines.lines() {
            if let Some(event) = line_event(line, &mut elapsed) {
                bytes.extend(record(&event));
            }
        }
        // Not a name with `tfevents` in it, which a TensorBoard watching the folder would read.
        let temporary = path.with_file_name("events.tmp");
        fs::write(&temporary, bytes)?;
        fs::rename(&temporary, path)?;
        let file = OpenOptions::new().append(true).open(path)?;
        Ok(EventFile { file, elapsed })
    }

    /// Appends the event of one `metrics.jsonl` line (as [`metrics::format_line`] wrote it),
    /// in one write, and flushes it.
    pub fn append(&mut self, line: &str) -> io::Result<()> {
        let Some(event) = line_event(line, &mut self.elapsed) else {
            return Ok(());
        };
        self.file.write_all(&record(&event))?;
        self.file.flush()
    }
}

/// The event of a `metrics.jsonl` line, `None` unless the line is an object with an unsigned
/// integer `step`. Adds the line's `seconds` to `elapsed` first: the event's wall time.
fn line_event(line: &str, elapsed: &mut f64) -> Option<Vec<u8>> {
    let fields = metrics::fields(line)?;
    let step = fields.iter().find(|(key, _)| key == "step")?.1.as_u64()?;
    let mut scalars = Vec::new();
    for (key, value) in &fields {
        let value = match value {
            _ if key == "step" => continue,
            Value::Number(number) => number.as_f64().unwrap_or(f64::NAN),
            Value::Null => f64::NAN,
            // The report writes numbers and nulls only: anything else is not a scalar.
            _ => continue,
        };
        if key == "seconds" && value.is_finite() {
            *elapsed += value;
        }
        // TensorBoard's scalars are 32-bit: the nearest f32.
        scalars.push((key.as_str(), value as f32));
    }
    Some(scalars_event(*elapsed, step, &scalars))
}

// ---------------------------------------------------------------------------------------------
// Events, encoded as protobuf by hand.

/// `Event.wall_time`: double, field 1.
const EVENT_WALL_TIME: u32 = 1;
/// `Event.step`: int64, field 2.
const EVENT_STEP: u32 = 2;
/// `Event.file_version`: string, field 3 (in the oneof `what`).
const EVENT_FILE_VERSION: u32 = 3;
/// `Event.summary`: `Summary`, field 5 (in the oneof `what`).
const EVENT_SUMMARY: u32 = 5;
/// `Summary.value`: repeated `Summary.Value`, field 1.
const SUMMARY_VALUE: u32 = 1;
/// `Summary.Value.tag`: string, field 1.
const VALUE_TAG: u32 = 1;
/// `Summary.Value.simple_value`: float, field 2 (in the oneof `value`).
const VALUE_SIMPLE_VALUE: u32 = 2;

/// Protobuf wire types.
const VARINT: u32 = 0;
const FIXED64: u32 = 1;
const LENGTH_DELIMITED: u32 = 2;
const FIXED32: u32 = 5;

/// `Event { file_version: "brain.Event:2" }` (wall time and step 0, so left out).
fn version_event() -> Vec<u8> {
    let mut event = Vec::new();
    length_delimited(&mut event, EVENT_FILE_VERSION, FILE_VERSION.as_bytes());
    event
}

/// `Event { wall_time, step, summary { value { tag, simple_value } for each scalar } }`.
fn scalars_event(wall_time: f64, step: u64, scalars: &[(&str, f32)]) -> Vec<u8> {
    let mut summary = Vec::new();
    for (tag, value) in scalars {
        let mut entry = Vec::new();
        length_delimited(&mut entry, VALUE_TAG, tag.as_bytes());
        key(&mut entry, VALUE_SIMPLE_VALUE, FIXED32);
        entry.extend(value.to_le_bytes());
        length_delimited(&mut summary, SUMMARY_VALUE, &entry);
    }
    let mut event = Vec::new();
    // proto3 leaves out scalar fields equal to their default (+0.0 by its bits, 0).
    if wall_time.to_bits() != 0 {
        key(&mut event, EVENT_WALL_TIME, FIXED64);
        event.extend(wall_time.to_le_bytes());
    }
    if step != 0 {
        key(&mut event, EVENT_STEP, VARINT);
        // An int64's varint is its two's complement as a u64: the same bytes for a step
        // below 2^63, which every real run's is.
        varint(&mut event, step);
    }
    length_delimited(&mut event, EVENT_SUMMARY, &summary);
    event
}

fn key(out: &mut Vec<u8>, field: u32, wire_type: u32) {
    varint(out, u64::from(field << 3 | wire_type));
}

fn length_delimited(out: &mut Vec<u8>, field: u32, data: &[u8]) {
    key(out, field, LENGTH_DELIMITED);
    varint(out, data.len() as u64);
    out.extend_from_slice(data);
}

/// Base-128, least significant group first, the high bit set on all bytes but the last.
fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

// ---------------------------------------------------------------------------------------------
// TFRecord framing and CRC32C.

/// `data` framed as one TFRecord.
fn record(data: &[u8]) -> Vec<u8> {
    let length = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend(length);
    out.extend(masked_crc32c(&length).to_le_bytes());
    out.extend_from_slice(data);
    out.extend(masked_crc32c(data).to_le_bytes());
    out
}

/// The CRC as TFRecord stores it: rotated and offset, so that a CRC of data holding CRCs is
/// not degenerate.
fn masked_crc32c(data: &[u8]) -> u32 {
    crc32c(data).rotate_right(15).wrapping_add(0xa282_ead8)
}

/// CRC-32C (Castagnoli; iSCSI, RFC 3720): the reflected polynomial 0x82F63B78, initial value
/// and final XOR all ones. One table lookup per byte.
fn crc32c(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in data {
        crc = CRC32C_TABLE[usize::from(crc as u8 ^ byte)] ^ (crc >> 8);
    }
    !crc
}

/// The CRC of each byte value on its own (without the initial and final inversion).
const CRC32C_TABLE: [u32; 256] = {
    let mut table = [0u32; 256];
    let mut byte = 0;
    while byte < 256 {
        let mut crc = byte as u32;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[byte] = crc;
        byte += 1;
    }
    table
};

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(text: &str) -> Vec<u8> {
        (0..text.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
            .collect()
    }

    /// RFC 3720 (iSCSI), appendix B.4, and the usual check value of "123456789".
    #[test]
    fn crc32c_matches_known_vectors() {
        assert_eq!(crc32c(b""), 0);
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c(&[0; 32]), 0x8a91_36aa);
        assert_eq!(crc32c(&[0xff; 32]), 0x62a8_ab43);
        let ascending: Vec<u8> = (0..32).collect();
        assert_eq!(crc32c(&ascending), 0x46dd_794e);
        let descending: Vec<u8> = (0..32).rev().collect();
        assert_eq!(crc32c(&descending), 0x113f_db5c);
    }

    #[test]
    fn masking_rotates_right_by_15_and_adds_the_constant() {
        // The CRC of "123456789" is 0xe3069283: rotated right by 15 bits (its low 15 bits
        // 0x1283 on top, the high 17 bits 0x1c60d below) it is 0x2507c60d, then
        // 0x2507c60d + 0xa282ead8 = 0xc78ab0e5 (no carry out of 32 bits).
        assert_eq!(masked_crc32c(b"123456789"), 0xc78a_b0e5);
        // Where the sum passes 2^32 it wraps: the length CRC of the version record, 0x092b536d
        // (below 0xa282ead8, so it wrapped), in `version_record_equals_tensorboards_writer`.
    }

    #[test]
    fn varints_use_seven_bits_a_byte() {
        let encode = |value| {
            let mut out = Vec::new();
            varint(&mut out, value);
            out
        };
        assert_eq!(encode(0), [0x00]);
        assert_eq!(encode(3), [0x03]);
        assert_eq!(encode(127), [0x7f]);
        assert_eq!(encode(150), [0x96, 0x01]);
        assert_eq!(encode(300), [0xac, 0x02]);
        assert_eq!(encode(u64::MAX).len(), 10);
    }

    /// The bytes of `Event { file_version: "brain.Event:2" }` framed as a record: by hand from
    /// the protobuf and TFRecord specifications, and equal to TensorBoard 2.21's
    /// `RecordWriter(…).write(Event(file_version="brain.Event:2").SerializeToString())`.
    #[test]
    fn version_record_equals_tensorboards_writer() {
        let mut data = vec![0x1a, 13]; // field 3, length-delimited; 13 bytes
        data.extend(b"brain.Event:2");
        assert_eq!(version_event(), data);
        let expected = hex("0f000000000000006d532b091a0d627261696e2e4576656e743a32fc985129");
        assert_eq!(record(&version_event()), expected);
        // The framing around the 15 bytes of data.
        assert_eq!(&expected[..8], 15u64.to_le_bytes());
        assert_eq!(
            &expected[8..12],
            masked_crc32c(&15u64.to_le_bytes()).to_le_bytes()
        );
        assert_eq!(&expected[27..], masked_crc32c(&data).to_le_bytes());
    }

    /// `Event { wall_time: 1.5, step: 3, summary { value { tag: "reward", simple_value: 0.25 } } }`:
    /// the fields by hand, and the record equal to TensorBoard 2.21's writer's bytes.
    #[test]
    fn scalar_record_equals_tensorboards_writer() {
        let event = scalars_event(1.5, 3, &[("reward", 0.25)]);
        let by_hand = [
            &[0x09][..],                             // field 1 (wall_time), 64-bit
            &0x3ff8_0000_0000_0000u64.to_le_bytes(), // 1.5 as a double
            &[0x10, 0x03],                           // field 2 (step), varint 3
            &[0x2a, 15],                             // field 5 (summary), 15 bytes
            &[0x0a, 13],                             // Summary field 1 (value), 13 bytes
            &[0x0a, 6],                              // Value field 1 (tag), 6 bytes
            b"reward",
            &[0x15],                       // Value field 2 (simple_value), 32-bit
            &0x3e80_0000u32.to_le_bytes(), // 0.25 as a float
        ]
        .concat();
        assert_eq!(event, by_hand);
        assert_eq!(
            record(&event),
            hex(concat!(
                "1c00000000000000c8c1951d",
                "09000000000000f83f10032a0f0a0d0a06726577617264150000803e",
                "00cb0cc6"
            ))
        );
        // At step 0 and time 0 only the summary is written; a value of 0 is still written.
        assert_eq!(
            scalars_event(0.0, 0, &[("a", 0.0)]),
            hex("2a0a0a080a01611500000000")
        );
    }

    #[test]
    fn a_line_gives_every_key_but_step_in_order_and_sums_the_seconds() {
        let mut elapsed = 0.5;
        let line = r#"{"step":2,"reward":0.25,"kl":null,"tokens":1024,"seconds":0.25,"tokens_per_s":4096.0,"time/train":0.125}"#;
        let event = line_event(line, &mut elapsed).unwrap();
        assert_eq!(elapsed, 0.75);
        let expected = scalars_event(
            0.75,
            2,
            &[
                ("reward", 0.25),
                ("kl", f32::NAN),
                ("tokens", 1024.0),
                ("seconds", 0.25),
                ("tokens_per_s", 4096.0),
                ("time/train", 0.125),
            ],
        );
        assert_eq!(event, expected);
        // A torn line or one without a step gives nothing and leaves the time alone.
        assert_eq!(line_event(r#"{"step":3,"rew"#, &mut elapsed), None);
        assert_eq!(line_event(r#"{"reward":1.0}"#, &mut elapsed), None);
        assert_eq!(elapsed, 0.75);
    }

    /// Splits a file into its records' data, checking each length and CRC.
    fn records(bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut rest = bytes;
        while !rest.is_empty() {
            let length = u64::from_le_bytes(rest[..8].try_into().unwrap()) as usize;
            assert_eq!(rest[8..12], masked_crc32c(&rest[..8]).to_le_bytes());
            let data = &rest[12..12 + length];
            let crc = &rest[12 + length..16 + length];
            assert_eq!(crc, masked_crc32c(data).to_le_bytes());
            out.push(data.to_vec());
            rest = &rest[16 + length..];
        }
        out
    }

    #[test]
    fn the_file_holds_the_version_then_one_event_per_line() {
        let dir = std::env::temp_dir()
            .join("rlc-tensorboard-tests")
            .join(std::process::id().to_string());
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(EVENTS_FILE);
        let lines = [
            r#"{"step":0,"reward":0.5,"seconds":0.25}"#,
            r#"{"step":1,"reward":0.75,"seconds":0.5}"#,
        ];
        // Written as a run goes, and rebuilt at once on a resume: the same bytes.
        let mut events = EventFile::create(&path, "").unwrap();
        for line in lines {
            events.append(line).unwrap();
        }
        let appended = fs::read(&path).unwrap();
        let text = lines.join("\n") + "\n{\"step\":2,\"torn";
        EventFile::create(&path, &text).unwrap();
        assert_eq!(fs::read(&path).unwrap(), appended);
        assert_eq!(
            records(&appended),
            [
                version_event(),
                scalars_event(0.25, 0, &[("reward", 0.5), ("seconds", 0.25)]),
                scalars_event(0.75, 1, &[("reward", 0.75), ("seconds", 0.5)]),
            ]
        );
        fs::remove_dir_all(&dir).unwrap();
    }
}
