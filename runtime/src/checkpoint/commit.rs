//! A step's checkpoints as one unit. Each role's folder is atomic on its own (`save`); the step
//! is committed by a marker file beside the role folders, `step-000050.complete`, written
//! (atomically, by rename) only once every role the step checkpoints has its folder in place.
//! A resumed run takes the newest committed step whose every role folder verifies
//! ([`newest_committed`]) and says why it passed over any newer one, and first clears what killed
//! writes left behind ([`clean_leftovers`]).
//!
//! Every writer of the step calls [`commit`] after installing its own folder, and writes the
//! marker when it sees every role's folder. No coordination is needed: of two writers, the one
//! that installs its folder last looks after the other's folder is in place, so at least one of
//! them writes the marker (both may, with the same bytes; each through a temporary of its own).

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

use super::io::{self, context};
use super::{CheckpointError, MANIFEST_FILE, parse_step, step_dir};

/// What follows `step-000050` in a marker's name.
pub const MARKER_SUFFIX: &str = ".complete";

/// The marker of `step` under `root` (the folder holding one folder per role).
pub fn marker_path(root: &Path, step: u64) -> PathBuf {
    root.join(format!("step-{step:06}{MARKER_SUFFIX}"))
}

/// The marker's content: what was committed (read back to check it, and for people).
#[derive(Debug, Serialize, Deserialize)]
struct Marker {
    step: u64,
    roles: Vec<String>,
}

/// Commits `step` under `root` if every role of `roles` has its folder of that step with a
/// manifest; returns whether this call wrote the marker.
pub fn commit(root: &Path, step: u64, roles: &[String]) -> Result<bool, CheckpointError> {
    let complete = roles.iter().all(|role| {
        step_dir(&root.join(role), step)
            .join(MANIFEST_FILE)
            .is_file()
    });
    if !complete {
        return Ok(false);
    }
    let marker = marker_path(root, step);
    let mut roles = roles.to_vec();
    roles.sort();
    roles.dedup();
    let bytes =
        serde_json::to_vec_pretty(&Marker { step, roles }).expect("a marker always serialises");
    // Ranks are threads of one process too: the pid alone does not tell writers apart.
    static WRITES: AtomicU64 = AtomicU64::new(0);
    let temporary = root.join(format!(
        ".step-{step:06}{MARKER_SUFFIX}.tmp-{}-{}",
        std::process::id(),
        WRITES.fetch_add(1, Ordering::Relaxed)
    ));
    io::write_synced(&marker, &temporary, &bytes)?;
    if let Err(error) = fs::rename(&temporary, &marker) {
        let _ = fs::remove_file(&temporary);
        return Err(context(&marker, "rename into place", &temporary)(error));
    }
    io::sync_dir(&marker, root)?;
    Ok(true)
}

/// The step a resumed run starts from: its folder for each role, and the state the first
/// role's folder saved (the seed of the run that wrote it, …).
#[derive(Debug)]
pub struct Committed {
    pub step: u64,
    pub dirs: Vec<(String, PathBuf)>,
    pub state: serde_json::Value,
}

/// A step newer than the one resumed from, and why it was passed over.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passed {
    pub step: u64,
    pub reason: String,
}

impl std::fmt::Display for Passed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "step {} {}", self.step, self.reason)
    }
}

/// The newest step under `root` that is committed and whose folder of every role in `roles`
/// verifies (sizes and SHA-256 of every file, `checkpoint::verify`), with the newer steps it
/// passed over and why (newest first). `None` when no step qualifies.
pub fn newest_committed(
    root: &Path,
    roles: &[String],
) -> Result<(Option<Committed>, Vec<Passed>), CheckpointError> {
    let mut passed = Vec::new();
    for step in steps_seen(root, roles)?.into_iter().rev() {
        match check_step(root, step, roles) {
            Ok(committed) => return Ok((Some(committed), passed)),
            Err(reason) => passed.push(Passed { step, reason }),
        }
    }
    Ok((None, passed))
}

/// Why `step` cannot be resumed from, or its folders.
fn check_step(root: &Path, step: u64, roles: &[String]) -> Result<Committed, String> {
    let marker = marker_path(root, step);
    match fs::read(&marker) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            let (written, unwritten): (Vec<&String>, Vec<&String>) =
                roles.iter().partition(|role| {
                    step_dir(&root.join(role), step)
                        .join(MANIFEST_FILE)
                        .is_file()
                });
            let mut reason = format!(
                "is incomplete: it has no {} (the run stopped while writing it",
                marker.display()
            );
            if !written.is_empty() && !unwritten.is_empty() {
                reason += &format!("; {} written, {} not", names(&written), names(&unwritten));
            }
            reason.push(')');
            return Err(reason);
        }
        Err(error) => return Err(format!("has a marker that cannot be read ({error})")),
        Ok(bytes) => match serde_json::from_slice::<Marker>(&bytes) {
            Ok(m) if m.step == step => {}
            Ok(m) => return Err(format!("has a marker that names step {}", m.step)),
            Err(error) => return Err(format!("has a damaged marker ({error})")),
        },
    }
    let mut dirs = Vec::new();
    let mut first_state = None;
    for role in roles {
        let dir = step_dir(&root.join(role), step);
        if !dir.is_dir() {
            return Err(format!("has no checkpoint of `{role}` ({})", dir.display()));
        }
        if !dir.join(MANIFEST_FILE).is_file() {
            return Err(format!(
                "is incomplete: {} has no {MANIFEST_FILE}",
                dir.display()
            ));
        }
        let (saved_step, state) =
            super::verify(&dir).map_err(|error| format!("is damaged: {error}"))?;
        if saved_step != step {
            return Err(format!(
                "is damaged: {} holds the checkpoint of step {saved_step}",
                dir.display()
            ));
        }
        first_state.get_or_insert(state);
        dirs.push((role.clone(), dir));
    }
    Ok(Committed {
        step,
        dirs,
        state: first_state.unwrap_or(serde_json::Value::Null),
    })
}

/// `` `a`, `b` `` for messages.
fn names(roles: &[&String]) -> String {
    roles
        .iter()
        .map(|role| format!("`{role}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Every step that has a marker or a folder of one of `roles` under `root`, in order.
fn steps_seen(root: &Path, roles: &[String]) -> Result<BTreeSet<u64>, CheckpointError> {
    let mut steps = BTreeSet::new();
    for entry in list(root)? {
        if let Some(step) = entry.strip_suffix(MARKER_SUFFIX).and_then(parse_step) {
            steps.insert(step);
        }
    }
    for role in roles {
        steps.extend(list(&root.join(role))?.iter().filter_map(|n| parse_step(n)));
    }
    Ok(steps)
}

/// The UTF-8 names in `folder`; none when it does not exist.
fn list(folder: &Path) -> Result<Vec<String>, CheckpointError> {
    let entries = match fs::read_dir(folder) {
        Ok(entries) => entries,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(error) => return Err(context(folder, "list", folder)(error)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(context(folder, "list", folder))?;
        if let Some(name) = entry.file_name().to_str() {
            names.push(name.to_string());
        }
    }
    names.sort();
    Ok(names)
}

/// Clears what killed writes left under `root`: temporary role folders (`.step-….tmp-PID`) and
/// markers (`.step-….complete.tmp-…`) are removed; a folder moved aside while its step was being
/// replaced (`.step-….old-PID`) goes back to its place when that is empty, and is removed when the
/// replacement is in. Returns one line per thing done, for the run to state.
///
/// Only for a run that no other process is writing into yet (a resumed run, before its ranks
/// start).
pub fn clean_leftovers(root: &Path, roles: &[String]) -> Result<Vec<String>, CheckpointError> {
    let mut done = Vec::new();
    for name in list(root)? {
        if name.starts_with(".step-") && name.contains(&format!("{MARKER_SUFFIX}.tmp-")) {
            let path = root.join(&name);
            fs::remove_file(&path).map_err(context(root, "remove", &path))?;
            done.push(format!(
                "removed {} (an interrupted commit)",
                path.display()
            ));
        }
    }
    for role in roles {
        let folder = root.join(role);
        for name in list(&folder)? {
            let Some(hidden) = name.strip_prefix('.') else {
                continue;
            };
            let path = folder.join(&name);
            if let Some((target, _pid)) = hidden.split_once(".old-")
                && parse_step(target).is_some()
            {
                let target = folder.join(target);
                if fs::symlink_metadata(&target).is_err() {
                    fs::rename(&path, &target).map_err(context(&target, "restore", &path))?;
                    done.push(format!(
                        "restored {} from {} (a replacement was interrupted)",
                        target.display(),
                        path.display()
                    ));
                } else {
                    io::remove_if_present(&folder, &path)?;
                    done.push(format!(
                        "removed {} (the previous copy of a replaced checkpoint)",
                        path.display()
                    ));
                }
            } else if let Some((target, _pid)) = hidden.split_once(".tmp-")
                && parse_step(target).is_some()
            {
                io::remove_if_present(&folder, &path)?;
                done.push(format!(
                    "removed {} (an interrupted checkpoint write)",
                    path.display()
                ));
            }
        }
    }
    Ok(done)
}
