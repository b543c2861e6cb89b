//! `transfer` ops: a value re-laid from the data ranks of the layout that produced it to those of
//! the layout that reads it (a `dp(1)` reference feeding a `dp(2)` policy). The plan lists the
//! sends (`from`, `to`, global rows); a destination rank also keeps the rows it already holds.
//! Every destination rank ends with its data rank's rows, kept beside the source version (other
//! readers on the same rank may still read that one).

use rlc_plan::model::{Instance, Op, OpKind};
use tch::{Kind, Tensor};

use super::error::{Result, RunError};
use super::rank::Rank;
use super::values::{Rollout, Val};
use crate::collectives::Communicator;

/// Global rows `[first, first + rows)` held by `rank` in `instance` (contiguous per data rank).
fn rows_of(instance: &Instance, rank: u32, total: i64) -> Option<(i64, i64)> {
    let parts = i64::from(instance.layout.data_ranks());
    let index = i64::from(instance.data_rank_of(rank)?);
    Some((index * total / parts, total / parts))
}

/// Rows `[start, start + len)` of a value (a scalar is every row's).
fn cut(val: &Val, start: i64, len: i64) -> Result<Val> {
    Ok(match val {
        Val::Tensor(t) if t.dim() == 0 => Val::Tensor(t.shallow_clone()),
        Val::Tensor(t) => Val::Tensor(t.narrow(0, start, len)),
        Val::Rollout(r) => Val::Rollout(r.select(&Tensor::arange_start(
            start,
            start + len,
            (Kind::Int64, r.ids.device()),
        ))),
        Val::Prompts { .. } => {
            return Err(RunError::Unsupported(
                "moving prompts between layouts".into(),
            ));
        }
    })
}

/// A value as the messages that carry it: a header (`[0]` a tensor, `[1, fields, prompt_len,
/// response_len]` a rollout), for a rollout its field names (bytes, `\0`-separated), then its
/// tensors.
fn encode(val: &Val) -> Vec<Tensor> {
    match val {
        Val::Tensor(t) => vec![Tensor::from_slice(&[0i64]), t.shallow_clone()],
        Val::Rollout(r) => {
            let header = [1, r.fields.len() as i64, r.prompt_len, r.response_len];
            let names: Vec<&str> = r.fields.iter().map(|(n, _)| n.as_str()).collect();
            let mut out = vec![
                Tensor::from_slice(&header),
                Tensor::from_slice(names.join("\0").as_bytes()),
            ];
            out.extend(r.fields.iter().map(|(_, t)| t.shallow_clone()));
            out.push(r.ids.shallow_clone());
            out.push(r.attention.shallow_clone());
            out
        }
        Val::Prompts { .. } => Vec::new(),
    }
}

/// Receives one value [`encode`] sent.
fn receive(world: &Communicator, from: usize) -> Result<Val> {
    let header = Vec::<i64>::try_from(world.recv(from)?)
        .map_err(|e| RunError::Plan(format!("a transfer's header: {e}")))?;
    match header.as_slice() {
        [0] => Ok(Val::Tensor(world.recv(from)?)),
        &[1, fields, prompt_len, response_len] => {
            let bytes = Vec::<u8>::try_from(world.recv(from)?)
                .map_err(|e| RunError::Plan(format!("a transfer's field names: {e}")))?;
            let names: Vec<String> = String::from_utf8_lossy(&bytes)
                .split('\0')
                .map(str::to_string)
                .collect();
            let mut fields_out = Vec::new();
            for name in names.into_iter().take(fields as usize) {
                fields_out.push((name, world.recv(from)?));
            }
            Ok(Val::Rollout(Rollout {
                fields: fields_out,
                ids: world.recv(from)?,
                attention: world.recv(from)?,
                prompt_len,
                response_len,
            }))
        }
        other => Err(RunError::Plan(format!("a transfer's header {other:?}"))),
    }
}

/// `pieces` (in row order, of one kind) joined along the rows.
fn join(pieces: Vec<Val>) -> Val {
    let cat = |parts: Vec<&Tensor>| Tensor::cat(&parts, 0);
    match pieces.first() {
        Some(Val::Rollout(first)) => {
            let rollouts: Vec<&Rollout> = pieces
                .iter()
                .filter_map(|p| match p {
                    Val::Rollout(r) => Some(r),
                    _ => None,
                })
                .collect();
            Val::Rollout(Rollout {
                fields: first
                    .fields
                    .iter()
                    .enumerate()
                    .map(|(i, (name, _))| {
                        (
                            name.clone(),
                            cat(rollouts.iter().map(|r| &r.fields[i].1).collect()),
                        )
                    })
                    .collect(),
                ids: cat(rollouts.iter().map(|r| &r.ids).collect()),
                attention: cat(rollouts.iter().map(|r| &r.attention).collect()),
                prompt_len: first.prompt_len,
                response_len: first.response_len,
            })
        }
        _ => Val::Tensor(cat(pieces
            .iter()
            .filter_map(|p| match p {
                Val::Tensor(t) => Some(t),
                _ => None,
            })
            .collect())),
    }
}

/// Rows of a value (a scalar counts as none: it is every row's).
fn row_count(val: &Val) -> i64 {
    match val {
        Val::Tensor(t) if t.dim() == 0 => 0,
        Val::Tensor(t) => t.size()[0],
        Val::Rollout(r) => r.rows(),
        Val::Prompts { samples, .. } => samples.len() as i64,
    }
}

impl Rank<'_> {
    pub(super) fn transfer(&mut self, op: &Op) -> Result<()> {
        let OpKind::Transfer {
            value,
            from,
            to,
            sends,
            ..
        } = &op.kind
        else {
            unreachable!("transfer() runs transfer ops")
        };
        let plan = self.job.plan;
        let instance = |id: &str| {
            plan.instance(id)
                .ok_or_else(|| RunError::Plan(format!("no instance `{id}`")))
        };
        let (src, dst) = (instance(from)?, instance(to)?);
        let Some(total) = sends.first().map(|s| s.rows.of as i64) else {
            return Ok(());
        };
        let world = self.comms.world.as_ref().ok_or_else(|| {
            RunError::Plan(format!("`{}` needs a communicator of every rank", op.label))
        })?;
        let me = self.rank;
        let mine = src
            .ranks
            .contains(me)
            .then(|| rows_of(src, me, total))
            .flatten();
        // Source side: each send of this rank's rows.
        if let Some((first, _)) = mine {
            let val = self.value(op, *value)?;
            for send in sends.iter().filter(|s| s.from == me) {
                let (a, b) = (send.rows.start as i64, send.rows.end as i64);
                let message = encode(&cut(val, a - first, b - a)?);
                for dest in send.to.iter().filter(|&r| r != me) {
                    for t in &message {
                        world.send(t, dest as usize)?;
                    }
                }
            }
        }
        let Some((want, need)) = dst
            .ranks
            .contains(me)
            .then(|| rows_of(dst, me, total))
            .flatten()
        else {
            return Ok(());
        };
        // Destination side: its own rows where this rank holds them, the rest as the plan sends.
        let mut pieces: Vec<(i64, Val)> = Vec::new();
        if let (Some((first, held)), Some(val)) = (mine, self.values.get(value)) {
            let (a, b) = (want.max(first), (want + need).min(first + held));
            if a < b {
                pieces.push((a, cut(val, a - first, b - a)?));
            }
        }
        for send in sends.iter().filter(|s| s.to.contains(me) && s.from != me) {
            pieces.push((send.rows.start as i64, receive(world, send.from as usize)?));
        }
        pieces.sort_by_key(|(start, _)| *start);
        let scalar = pieces.iter().all(|(_, p)| row_count(p) == 0);
        let rows: i64 = pieces.iter().map(|(_, p)| row_count(p)).sum();
        if pieces.is_empty() || (!scalar && rows != need) {
            return Err(RunError::Plan(format!(
                "`{}`: rank {me} assembled {rows} of its {need} rows of the value",
                op.label
            )));
        }
        let joined = if scalar {
            pieces.remove(0).1
        } else {
            join(pieces.into_iter().map(|(_, p)| p).collect())
        };
        self.relaid.insert((*value, dst.id.clone()), joined);
        Ok(())
    }
}
