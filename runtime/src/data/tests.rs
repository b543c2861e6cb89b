use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::tokens::{BOS, EOS, EQUALS, PAD, PLUS, SPARE, VOCAB};
use super::*;

fn task(kind: &str, digits: i64) -> Task {
    Task::new(kind, digits).unwrap()
}

/// The decimal number spelled by digit tokens.
fn number(digits: &[i64]) -> u64 {
    digits.iter().fold(0, |n, &d| n * 10 + d as u64)
}

/// A temp file holding `text`, unique per test process and call; removed on drop.
struct TempFile(PathBuf);

impl TempFile {
    fn new(text: &str) -> TempFile {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "rlc-data-test-{}-{}.jsonl",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let path = std::env::temp_dir().join(name);
        std::fs::write(&path, text).unwrap();
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The error message of loading `text` as JSONL with prompt field `prompt`.
fn jsonl_error(text: &str) -> (String, PathBuf) {
    let file = TempFile::new(text);
    let err = Source::jsonl(&file.0, "prompt").unwrap_err().to_string();
    (err, file.0.clone())
}

#[test]
fn encode_and_decode_round_trip() {
    let tokens = encode("^123+456=$_").unwrap();
    assert_eq!(tokens, [BOS, 1, 2, 3, PLUS, 4, 5, 6, EQUALS, EOS, PAD]);
    assert_eq!(decode(&tokens), "^123+456=$_");
    assert_eq!(decode(&[SPARE, -1, VOCAB]), "???");
    let err = encode("12a").unwrap_err().to_string();
    assert!(err.contains("`a` at position 2"), "{err}");
}

#[test]
fn reverse_prompt_is_bos_digits_equals_and_target_is_reversed() {
    let t = task("reverse_digits", 6);
    let s = t.sample_for(&[1, 2, 3, 4, 5, 6]);
    assert_eq!(s.prompt.len() as i64, 6 + 2);
    assert_eq!(t.prompt_len(), 8);
    assert_eq!(decode(&s.prompt), "^123456=");
    assert_eq!(decode(&s.target), "654321$");
}

#[test]
fn sort_target_is_ascending() {
    let s = task("sort_digits", 6).sample_for(&[3, 1, 5, 2, 6, 0]);
    assert_eq!(decode(&s.prompt), "^315260=");
    assert_eq!(decode(&s.target), "012356$");
}

#[test]
fn add_carries_and_drops_leading_zeros() {
    let t = task("add_numbers", 6);
    assert_eq!(t.prompt_len(), 2 * 6 + 3);
    let s = t.sample_for(&[9, 9, 9, 9, 9, 9, 0, 0, 0, 0, 0, 1]);
    assert_eq!(s.prompt.len(), 15);
    assert_eq!(decode(&s.prompt), "^999999+000001=");
    assert_eq!(decode(&s.target), "1000000$");
    let zero = t.sample_for(&[0; 12]);
    assert_eq!(decode(&zero.target), "0$");
    let small = t.sample_for(&[0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 3, 4]);
    assert_eq!(decode(&small.target), "46$");
}

#[test]
fn drawn_samples_are_well_formed() {
    for kind in [
        "reverse_digits",
        "add_numbers",
        "sort_digits",
        "add_with_tool",
    ] {
        let source = Source::task(kind, 6).unwrap();
        assert_eq!(source.vocab(), 16);
        let len = source.prompt_len() as usize;
        for s in Sampler::new(source, 3).next(200) {
            assert_eq!(s.prompt.len(), len);
            assert_eq!((s.prompt[0], s.prompt[len - 1]), (BOS, EQUALS));
            assert_eq!(s.target.last(), Some(&EOS));
            let answer = &s.target[..s.target.len() - 1];
            let operands = &s.prompt[1..len - 1];
            match kind {
                "reverse_digits" => assert!(answer.iter().eq(operands.iter().rev())),
                "sort_digits" => {
                    let mut sorted = operands.to_vec();
                    sorted.sort();
                    assert_eq!(answer, sorted);
                }
                _ => {
                    assert_eq!(operands[6], PLUS);
                    let sum = number(&operands[..6]) + number(&operands[7..]);
                    assert_eq!(number(answer), sum);
                    assert!(answer.len() == 1 || answer[0] != 0, "leading zero");
                }
            }
        }
    }
}

#[test]
fn digits_are_roughly_uniform() {
    let mut counts = [0usize; 10];
    for s in Sampler::new(Source::task("reverse_digits", 10).unwrap(), 1).next(1000) {
        for &d in &s.prompt[1..11] {
            counts[d as usize] += 1;
        }
    }
    // 10 000 digits: each count is 1000 ± ~30 (one sigma).
    assert!(
        counts.iter().all(|&c| (850..1150).contains(&c)),
        "{counts:?}"
    );
}

#[test]
fn unknown_kind_and_bad_digits_are_errors() {
    let err = Source::task("multiply", 6).unwrap_err().to_string();
    assert!(err.contains("`multiply`"), "{err}");
    for kind in [
        "reverse_digits",
        "add_numbers",
        "sort_digits",
        "add_with_tool",
    ] {
        assert!(err.contains(kind), "{err}");
    }
    assert!(Source::task("add_numbers", 0).is_err());
}

fn jsonl_source(lines: usize) -> (TempFile, Source) {
    let text: String = (0..lines)
        .map(|i| format!("{{\"prompt\": \"{i}+{i}=\"}}\n"))
        .collect();
    let file = TempFile::new(&text);
    let source = Source::jsonl(&file.0, "prompt").unwrap();
    (file, source)
}

#[test]
fn streams_do_not_depend_on_how_they_are_split() {
    let (_file, jsonl) = jsonl_source(5);
    for source in [Source::task("add_numbers", 4).unwrap(), jsonl] {
        let whole = Sampler::new(source.clone(), 9).next(8);
        let mut split = Sampler::new(source.clone(), 9);
        let mut parts = split.next(3);
        parts.extend(split.next(5));
        assert_eq!(parts, whole);
        assert_eq!(split.cursor(), 8);
        assert_ne!(Sampler::new(source, 10).next(8), whole, "seed ignored");
    }
}

#[test]
fn seek_resumes_the_stream() {
    let (_file, jsonl) = jsonl_source(3);
    for source in [Source::task("sort_digits", 6).unwrap(), jsonl] {
        let stream = Sampler::new(source.clone(), 4).next(20);
        let mut resumed = Sampler::new(source, 4);
        resumed.seek(13);
        assert_eq!(resumed.next(7), stream[13..]);
        // Backwards too, across a JSONL epoch boundary.
        resumed.seek(2);
        assert_eq!(resumed.next(5), stream[2..7]);
        assert_eq!(resumed.cursor(), 7);
    }
}

#[test]
fn each_jsonl_epoch_is_a_shuffle_of_all_lines() {
    let (_file, source) = jsonl_source(7);
    let Source::Jsonl(prompts) = &source else {
        unreachable!()
    };
    let lines = prompts.samples().to_vec();
    let stream = Sampler::new(source, 5).next(21);
    let epochs: Vec<_> = stream.chunks(7).collect();
    for epoch in &epochs {
        let mut seen = epoch.to_vec();
        seen.sort_by(|a, b| a.prompt.cmp(&b.prompt));
        let mut all = lines.clone();
        all.sort_by(|a, b| a.prompt.cmp(&b.prompt));
        assert_eq!(seen, all);
    }
    assert!(
        epochs[0] != epochs[1] || epochs[1] != epochs[2],
        "not reshuffled"
    );
}

#[test]
fn jsonl_prompts_are_encoded_with_bos_and_optional_targets() {
    let file = TempFile::new(
        "{\"prompt\": \"12+34=\", \"target\": \"46\"}\n\n{\"prompt\": \"^9=\", \"id\": 2}\n",
    );
    let source = Source::jsonl(&file.0, "prompt").unwrap();
    assert_eq!(source.vocab(), 16);
    assert_eq!(source.prompt_len(), 7);
    let Source::Jsonl(prompts) = &source else {
        unreachable!()
    };
    let samples = prompts.samples();
    assert_eq!(samples.len(), 2);
    assert_eq!(samples[0].prompt, [BOS, 1, 2, PLUS, 3, 4, EQUALS]);
    assert_eq!(samples[0].target, [4, 6, EOS]);
    assert_eq!(decode(&samples[1].prompt), "^9=");
    assert!(samples[1].target.is_empty());
}

#[test]
fn a_jsonl_file_may_start_with_a_byte_order_mark() {
    let plain = "{\"prompt\": \"12+34=\", \"target\": \"46\"}\n{\"prompt\": \"^9=\"}\n";
    let with_bom = TempFile::new(&format!("\u{feff}{plain}"));
    let without = TempFile::new(plain);
    let (Source::Jsonl(a), Source::Jsonl(b)) = (
        Source::jsonl(&with_bom.0, "prompt").unwrap(),
        Source::jsonl(&without.0, "prompt").unwrap(),
    ) else {
        unreachable!()
    };
    assert_eq!(a.samples(), b.samples());
    // Only at the start: elsewhere it is a character of the text, refused as any other would be.
    let (err, _) = jsonl_error(&format!("{plain}\u{feff}{plain}"));
    assert!(err.contains("line 3"), "{err}");
}

#[test]
fn jsonl_errors_name_the_file_and_line() {
    let good = "{\"prompt\": \"1=\"}\n";
    let cases = [
        (
            format!("{good}{{\"prompt\": \"1=\"\n"),
            "line 2: invalid JSON",
        ),
        (
            format!("{good}{good}{{\"text\": \"1=\"}}\n"),
            "line 3: no field `prompt`",
        ),
        (
            "{\"prompt\": 12}\n".to_string(),
            "line 1: field `prompt` is a number, not a string",
        ),
        (
            format!("{good}[1]\n"),
            "line 2: expected a JSON object, found an array",
        ),
        (
            format!("{good}\n{{\"prompt\": \"1*2=\"}}\n"),
            "line 3: field `prompt`: character `*`",
        ),
        (
            "{\"prompt\": \"1=\", \"target\": \"x\"}\n".to_string(),
            "line 1: field `target`: character `x`",
        ),
        ("\n  \n".to_string(), "no prompts"),
    ];
    for (text, expected) in cases {
        let (err, path) = jsonl_error(&text);
        assert!(err.contains(&path.display().to_string()), "{err}");
        assert!(err.contains(expected), "expected `{expected}` in: {err}");
    }
    let missing = std::env::temp_dir().join("rlc-data-test-no-such-file.jsonl");
    let err = Source::jsonl(&missing, "prompt").unwrap_err().to_string();
    assert!(
        err.contains("rlc-data-test-no-such-file.jsonl: cannot read"),
        "{err}"
    );
}

#[test]
fn score_is_the_fraction_of_matching_target_positions() {
    let sample = task("reverse_digits", 3).sample_for(&[1, 2, 3]); // target 3 2 1 EOS
    assert_eq!(score(&[3, 2, 1, EOS], &sample), 1.0);
    // Padding after EOS is ignored.
    assert_eq!(score(&[3, 2, 1, EOS, PAD, PAD], &sample), 1.0);
    // Two digits right, the third wrong, EOS right.
    assert_eq!(score(&[3, 2, 9, EOS], &sample), 0.75);
    // Right digits but no EOS: the model did not stop.
    assert_eq!(score(&[3, 2, 1, 4], &sample), 0.75);
    // Short responses miss the positions they lack; a shift is not forgiven.
    assert_eq!(score(&[3], &sample), 0.25);
    assert_eq!(score(&[0, 3, 2, 1, EOS], &sample), 0.0);
    assert_eq!(score(&[], &sample), 0.0);
    let no_target = Sample {
        prompt: vec![BOS],
        target: vec![],
        row: None,
    };
    assert_eq!(score(&[EOS], &no_target), 0.0);
}

#[test]
fn jsonl_keeps_the_named_fields_of_each_row_as_text() {
    let file = TempFile::new(
        "{\"prompt\": \"12+5=\", \"answer\": \"17\", \"level\": 3}\n\n\
         {\"prompt\": \"1+1=\", \"answer\": \"2\", \"level\": {\"a\": 1}}\n",
    );
    let keep = ["answer".to_string(), "level".to_string()];
    let Source::Jsonl(prompts) = Source::jsonl_keeping(&file.0, "prompt", &keep, None).unwrap()
    else {
        panic!("a JSONL source")
    };
    let rows: Vec<Option<u64>> = prompts.samples().iter().map(|s| s.row).collect();
    assert_eq!(rows, [Some(0), Some(1)]);
    let second = prompts.fields(1).unwrap();
    assert_eq!(second["answer"], "2");
    assert_eq!(
        second["level"], "{\"a\":1}",
        "other JSON values as their JSON text"
    );
    assert_eq!(prompts.fields(0).unwrap()["level"], "3");
    assert!(prompts.fields(2).is_none());
    // A line without a kept field is an error naming the line and the field.
    let err = Source::jsonl_keeping(&file.0, "prompt", &["missing".to_string()], None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("line 1") && err.contains("no field `missing` (the dataset keeps it)"),
        "{err}"
    );
}
