//! The kernels pass: each `kernel` op's `fn` (or builtin, or operator) and each `update`'s
//! loss closure lowered to the kernel IR and kept once in the plan's kernel table, so that the
//! runtime runs them from the plan alone. A body the kernel IR cannot express is a lowering
//! error: accepted and then not run is not an option.

use super::*;
use rlc_kernel::ir::{Elem, Kernel};
use rlc_kernel::lower::{Scoped, lower_block, lower_call, lower_fn};

impl Lowerer<'_> {
    /// The kernel of a `kernel` op: `function` (of `module`, `None` for builtins, operators and
    /// the root module's `fn`s) with `inputs` and `attrs` (numbers) as its named inputs; `None`
    /// for a dataset's `score`, which the runtime implements.
    pub(super) fn call_kernel(
        &mut self,
        at: rlc_check::types::ExprId,
        function: &str,
        module: Option<&str>,
        inputs: &[Input],
        attrs: &BTreeMap<String, String>,
    ) -> Option<u32> {
        if let Some((dataset, "score")) = function.rsplit_once('.')
            && self.program.datasets.contains_key(dataset)
        {
            return None;
        }
        let fail = |detail: String| LowerError {
            message: format!("`{function}` cannot be computed by a kernel: {detail}"),
            kernel_at: Some(at),
        };
        for (name, value) in attrs {
            if value.parse::<f64>().is_err() {
                let e = fail(format!("its argument `{name}` = `{value}` is not a number"));
                self.errors.push(e);
                return None;
            }
        }
        let lowered = match module {
            Some(m) => {
                let given: Vec<&str> = inputs
                    .iter()
                    .map(|i| i.name.as_str())
                    .chain(attrs.keys().map(String::as_str))
                    .collect();
                lower_fn(self.bodies, &format!("{m}.{function}"), &given).map_err(|e| e.to_string())
            }
            None => {
                let mut scope = Vec::new();
                for input in inputs {
                    match self.value_elem(input.value, input.field.as_deref()) {
                        Ok((elem, level)) => {
                            scope.push((input.name.as_str(), Scoped::Tensor { elem, level }))
                        }
                        Err(e) => {
                            let e = fail(e);
                            self.errors.push(e);
                            return None;
                        }
                    }
                }
                for name in attrs.keys() {
                    scope.push((name.as_str(), SCALAR));
                }
                lower_call(self.bodies, function, &scope).map_err(|e| e.to_string())
            }
        };
        match lowered {
            Ok(kernel) => Some(self.intern_kernel(kernel)),
            Err(e) => {
                let e = fail(e);
                self.errors.push(e);
                None
            }
        }
    }

    /// The kernel of an `update`'s loss closure, with its parameter bound to the model output
    /// an update of `kind` trains and `captures` to the values it reads.
    pub(super) fn loss_kernel(
        &mut self,
        role: &str,
        kind: prog::RoleKind,
        loss: &rlc_check::dataflow::Loss,
        captures: &[Input],
    ) -> u32 {
        let param = loss.param.as_str();
        let output_level = match kind {
            prog::RoleKind::RewardModel => 1,
            prog::RoleKind::CausalLM | prog::RoleKind::ValueModel => 2,
        };
        let mut scope: Vec<(String, Scoped)> = vec![(
            param.to_string(),
            Scoped::Tensor {
                elem: Elem::F32,
                level: output_level,
            },
        )];
        let at = loss.at;
        let fail = |detail: String| LowerError {
            message: format!(
                "the loss of `{role}.update` cannot be computed by a kernel: {detail}"
            ),
            kernel_at: Some((loss.file, at.start, at.end)),
        };
        for input in captures {
            // A whole record (`rollout`, read as `rollout.mask`), or one output of a verifier's
            // record (`scores.format`), which the body reads as a field too.
            let (var, scoped) = match (&input.field, input.name.split_once('.')) {
                (Some(_), _) => (input.name.clone(), self.record_scoped(input.value)),
                (None, Some((record, field))) => (
                    record.to_string(),
                    self.value_elem(input.value, None).map(|(elem, level)| {
                        Scoped::Record(vec![(field.to_string(), elem, level)])
                    }),
                ),
                (None, None) => (
                    input.name.clone(),
                    self.value_elem(input.value, None)
                        .map(|(elem, level)| Scoped::Tensor { elem, level }),
                ),
            };
            let scoped = match scoped {
                Ok(s) => s,
                Err(e) => {
                    let e = fail(e);
                    self.errors.push(e);
                    continue;
                }
            };
            match scope.iter_mut().find(|(n, _)| *n == var) {
                Some((_, Scoped::Record(fields))) => {
                    if let Scoped::Record(more) = scoped {
                        for f in more {
                            if !fields.iter().any(|g| g.0 == f.0) {
                                fields.push(f);
                            }
                        }
                    }
                }
                Some(_) => {}
                None => scope.push((var, scoped)),
            }
        }
        let scope: Vec<(&str, Scoped)> =
            scope.iter().map(|(n, s)| (n.as_str(), s.clone())).collect();
        match lower_block(
            self.bodies,
            loss.module,
            "loss",
            &loss.body,
            &scope,
            &loss.consts,
        ) {
            Ok(kernel) => self.intern_kernel(kernel),
            Err(e) => {
                let e = fail(e.to_string());
                self.errors.push(e);
                0
            }
        }
    }

    /// The index of `kernel` in the plan's table, added once.
    fn intern_kernel(&mut self, kernel: Kernel) -> u32 {
        let i = match self.kernels.iter().position(|k| *k == kernel) {
            Some(i) => i,
            None => {
                self.kernels.push(kernel);
                self.kernels.len() - 1
            }
        };
        i as u32
    }

    /// A tensor value (or a record's field) as the kernel IR sees it: its element type and
    /// number of dimensions.
    fn value_elem(&self, value: u32, field: Option<&str>) -> Result<(Elem, usize), String> {
        let v = &self.values[value as usize];
        let ty = match (&v.ty, field) {
            (ValueType::Tensor(t), None) => t,
            (ValueType::Record { fields, .. }, Some(f)) => fields
                .get(f)
                .ok_or_else(|| format!("`{}` has no field `{f}`", v.name))?,
            _ => return Err(format!("`{}` is not a tensor", v.name)),
        };
        elem_level(ty).ok_or_else(|| format!("`{}` is a `{}` tensor", v.name, ty.dtype))
    }

    /// A record value with each of its tensor fields.
    fn record_scoped(&self, value: u32) -> Result<Scoped, String> {
        let v = &self.values[value as usize];
        let ValueType::Record { fields, .. } = &v.ty else {
            return Err(format!("`{}` is not a record", v.name));
        };
        Ok(Scoped::Record(
            fields
                .iter()
                .filter_map(|(f, t)| elem_level(t).map(|(elem, level)| (f.clone(), elem, level)))
                .collect(),
        ))
    }
}

/// A number argument: an `f32` scalar input.
const SCALAR: Scoped = Scoped::Tensor {
    elem: Elem::F32,
    level: 0,
};

fn elem_level(t: &TensorType) -> Option<(Elem, usize)> {
    Some((Elem::of_type_name(&t.dtype)?, t.shape.len()))
}
