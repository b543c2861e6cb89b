//! `state.json`: the step count and the caller's JSON state (optimiser step, RNG states, data
//! cursor, …).
//!
//! serde_json keeps integers (u64 included) exact, but without its `float_roundtrip` feature
//! its parser can land one ulp off the float it printed, for a good share of values. So
//! `encode` re-parses its own output and records the exact bits of every float that drifted
//! under `float_bits` (JSON pointer → `f64::to_bits`); `decode` puts them back. The file stays
//! readable and the state comes back bit-exact.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::{Number, Value};

use super::STATE_FILE;
use super::error::{CheckpointError, Corruption, corrupt};

#[derive(Serialize, Deserialize)]
struct StateFile {
    step: u64,
    state: Value,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    float_bits: BTreeMap<String, u64>,
}

/// The bytes of `state.json`; `checkpoint` is the destination folder, named in errors.
pub(super) fn encode(
    checkpoint: &Path,
    step: u64,
    state: &Value,
) -> Result<Vec<u8>, CheckpointError> {
    let unsavable = |reason: String| CheckpointError::Unsavable {
        dir: checkpoint.to_path_buf(),
        reason,
    };
    let mut file = StateFile {
        step,
        state: state.clone(),
        float_bits: BTreeMap::new(),
    };
    let plain = to_json(&file).map_err(&unsavable)?;
    let reread: StateFile = serde_json::from_slice(&plain)
        .map_err(|error| unsavable(format!("state.json does not re-parse ({error})")))?;
    collect_drift(state, &reread.state, String::new(), &mut file.float_bits)
        .map_err(|at| unsavable(format!("state at `{at}` does not survive JSON")))?;
    if file.float_bits.is_empty() {
        return Ok(plain);
    }
    let bytes = to_json(&file).map_err(&unsavable)?;
    // The patched file must now decode to exactly the state given.
    let (_, decoded) = decode(checkpoint, &bytes)?;
    let mut still = BTreeMap::new();
    match collect_drift(state, &decoded, String::new(), &mut still) {
        Ok(()) if still.is_empty() => Ok(bytes),
        Ok(()) => Err(unsavable(format!(
            "state at `{}` does not survive JSON exactly",
            still.keys().next().expect("not empty")
        ))),
        Err(at) => Err(unsavable(format!("state at `{at}` does not survive JSON"))),
    }
}

fn to_json(file: &StateFile) -> Result<Vec<u8>, String> {
    serde_json::to_vec_pretty(file)
        .map_err(|error| format!("state cannot be written as JSON ({error})"))
}

/// Parses `state.json` (already verified against the manifest) into the step and the state.
pub(super) fn decode(dir: &Path, bytes: &[u8]) -> Result<(u64, Value), CheckpointError> {
    let invalid = |what: String| corrupt(dir, STATE_FILE, Corruption::Invalid(what));
    let mut file: StateFile = serde_json::from_slice(bytes)
        .map_err(|error| invalid(format!("is malformed ({error})")))?;
    for (at, bits) in &file.float_bits {
        let exact = Number::from_f64(f64::from_bits(*bits))
            .ok_or_else(|| invalid(format!("has non-finite float bits for `{at}`")))?;
        match file.state.pointer_mut(at) {
            Some(slot @ Value::Number(_)) => *slot = Value::Number(exact),
            _ => {
                return Err(invalid(format!(
                    "has float bits for `{at}`, not a number there"
                )));
            }
        }
    }
    Ok((file.step, file.state))
}

/// Records in `drift` the JSON pointer and intended bits of every float of `intended` that
/// `parsed` holds differently (by bits: `==` would accept 0.0 for -0.0). Any other difference
/// is a failure, reported by its pointer.
fn collect_drift(
    intended: &Value,
    parsed: &Value,
    at: String,
    drift: &mut BTreeMap<String, u64>,
) -> Result<(), String> {
    match (intended, parsed) {
        (Value::Array(xs), Value::Array(ys)) if xs.len() == ys.len() => {
            for (i, (x, y)) in xs.iter().zip(ys).enumerate() {
                collect_drift(x, y, format!("{at}/{i}"), drift)?;
            }
            Ok(())
        }
        (Value::Object(xs), Value::Object(ys)) if xs.len() == ys.len() => {
            for (key, x) in xs {
                // JSON pointer escaping, so `pointer_mut` finds keys holding `/` or `~`.
                let child = format!("{at}/{}", key.replace('~', "~0").replace('/', "~1"));
                match ys.get(key) {
                    Some(y) => collect_drift(x, y, child, drift)?,
                    None => return Err(child),
                }
            }
            Ok(())
        }
        (Value::Number(x), Value::Number(y)) if x.is_f64() && y.is_f64() => {
            let (x, y) = (x.as_f64().expect("f64"), y.as_f64().expect("f64"));
            if x.to_bits() != y.to_bits() {
                drift.insert(at, x.to_bits());
            }
            Ok(())
        }
        _ if intended == parsed => Ok(()),
        _ => Err(at),
    }
}
