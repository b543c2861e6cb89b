//! The values of one step on one rank: its share of the rows of each batch.

use tch::Tensor;

use crate::data::{Sample, Specials};

pub enum Val {
    /// This rank's prompts: prompts `first..first + samples.len()` of the step's batch.
    Prompts {
        samples: Vec<Sample>,
        first: i64,
        /// The dataset they were drawn from.
        dataset: String,
        /// The end-of-answer and padding ids of the dataset's text.
        specials: Specials,
        /// Under an FSDP layout, the prompts of the rank's whole FSDP group and the first's
        /// index: its ranks decode together (each step gathers the model), so they generate
        /// the group's rows and each keeps its own.
        group: Option<(Vec<Sample>, i64)>,
    },
    Rollout(Rollout),
    Tensor(Tensor),
}

impl Val {
    /// The same value sharing its tensors.
    pub fn shallow_clone(&self) -> Val {
        match self {
            Val::Prompts {
                samples,
                first,
                dataset,
                specials,
                group,
            } => Val::Prompts {
                samples: samples.clone(),
                first: *first,
                dataset: dataset.clone(),
                specials: *specials,
                group: group.clone(),
            },
            Val::Rollout(r) => Val::Rollout(Rollout {
                fields: r
                    .fields
                    .iter()
                    .map(|(n, t)| (n.clone(), t.shallow_clone()))
                    .collect(),
                ids: r.ids.shallow_clone(),
                attention: r.attention.shallow_clone(),
                prompt_len: r.prompt_len,
                response_len: r.response_len,
            }),
            Val::Tensor(t) => Val::Tensor(t.shallow_clone()),
        }
    }
}

/// What `generate` produced on this rank, as the program sees it (`rollout.response`, …) plus
/// what the model calls need.
pub struct Rollout {
    /// `prompt`, `response`, `target`, `mask`, `last`, `group`, in that order.
    pub fields: Vec<(String, Tensor)>,
    /// `[R, P + N]` prompt and response tokens, and the attention mask over them.
    pub ids: Tensor,
    pub attention: Tensor,
    pub prompt_len: i64,
    pub response_len: i64,
}

impl Rollout {
    pub fn field(&self, name: &str) -> Option<&Tensor> {
        self.fields.iter().find(|(n, _)| n == name).map(|(_, t)| t)
    }

    pub fn rows(&self) -> i64 {
        self.ids.size()[0]
    }

    /// The rows `rows` (int64 indices) of every tensor.
    pub fn select(&self, rows: &Tensor) -> Rollout {
        Rollout {
            fields: self
                .fields
                .iter()
                .map(|(n, t)| (n.clone(), t.index_select(0, rows)))
                .collect(),
            ids: self.ids.index_select(0, rows),
            attention: self.attention.index_select(0, rows),
            prompt_len: self.prompt_len,
            response_len: self.response_len,
        }
    }
}
