//! `place` items: which devices and layout each role phase gets.

use crate::eval::Evaluator;
use crate::program::*;
use crate::value::Val;
use rlc_diagnostics::{Code, Diagnostic};
use rlc_syntax::ast::{self, LayoutKind, PlaceTarget};

impl Evaluator<'_> {
    pub(crate) fn place(&mut self, module: usize, index: usize, p: &ast::Place) {
        let m = self.modules().get(module);
        let file = m.file;
        let item_span = m.item(index).span;
        let origin = Origin {
            file,
            span: item_span,
        };
        let mut frame = self.frame(module, false);
        let (model, phase) = match &p.target {
            PlaceTarget::AllRoles(_) => {
                self.program.auto_place = Some(origin);
                self.program.auto_cluster =
                    match p.devices.as_ref().map(|e| self.eval_expr(&mut frame, e)) {
                        Some(Val::Cluster(c) | Val::Devices { cluster: c, .. }) => Some(c),
                        _ => None,
                    };
                return;
            }
            PlaceTarget::Role { role, phase } => {
                let model = match self.lookup_value(&mut frame, role) {
                    Val::Model(m) => m,
                    Val::Error => return,
                    other => {
                        self.diags.push(
                            Diagnostic::new(
                                Code::UnknownPhase,
                                format!("`{}` is {}, not a model", role.name, other.describe()),
                                file,
                                role.span,
                            )
                            .primary_label("not a role")
                            .help("place a model: `place policy.train on …`"),
                        );
                        return;
                    }
                };
                let phase = match phase {
                    None => None,
                    Some(ph) => match Phase::from_name(&ph.name) {
                        Some(phase) => {
                            let mdl = &self.program.models[model];
                            let supported = match phase {
                                Phase::Train => !mdl.frozen,
                                Phase::Generate => mdl.kind.supports(Op::Generate),
                                Phase::Logprobs => mdl.kind.supports(Op::Logprobs),
                                Phase::Values => mdl.kind.supports(Op::Values),
                                Phase::Score => mdl.kind.supports(Op::Score),
                            };
                            if !supported {
                                let why = if phase == Phase::Train {
                                    "it is frozen".to_string()
                                } else {
                                    format!("it is a {}", mdl.kind.as_str())
                                };
                                self.diags.push(
                                    Diagnostic::new(
                                        Code::UnknownPhase,
                                        format!(
                                            "`{}` has no `{}` phase: {why}",
                                            mdl.name,
                                            phase.as_str()
                                        ),
                                        file,
                                        ph.span,
                                    )
                                    .primary_label("no such phase")
                                    .label(
                                        mdl.origin.file,
                                        mdl.origin.span,
                                        "declared here",
                                    ),
                                );
                                return;
                            }
                            Some(phase)
                        }
                        None => {
                            let names = Phase::ALL.map(Phase::as_str);
                            let mut d = Diagnostic::new(
                                Code::UnknownPhase,
                                format!("`{}` is not a phase", ph.name),
                                file,
                                ph.span,
                            )
                            .primary_label("unknown phase");
                            d = crate::hints::suggest(
                                d,
                                &ph.name,
                                names,
                                2,
                                format!("the phases are {}", names.join(", ")),
                            );
                            self.diags.push(d);
                            return;
                        }
                    },
                };
                (model, phase)
            }
        };
        let Some((cluster, devices, devices_origin)) = self.device_set(&mut frame, p, origin)
        else {
            return;
        };
        let layout = match &p.layout {
            ast::Layout::Auto(_) => None,
            ast::Layout::Explicit(items) => match self.layout(&mut frame, items) {
                Some(l) => Some(l),
                None => return,
            },
        };
        if let Some(prev) = self
            .program
            .placements
            .iter()
            .find(|q| q.model == model && q.phase == phase)
        {
            let what = match phase {
                Some(ph) => format!("`{}.{}`", self.program.models[model].name, ph.as_str()),
                None => format!("`{}`", self.program.models[model].name),
            };
            self.diags.push(
                Diagnostic::new(
                    Code::DuplicatePlacement,
                    format!("{what} is placed twice"),
                    file,
                    item_span,
                )
                .primary_label("placed again here")
                .label(prev.origin.file, prev.origin.span, "first placed here"),
            );
            return;
        }
        self.program.placements.push(Placement {
            model,
            phase,
            cluster,
            devices,
            devices_origin,
            auto: layout.is_none(),
            layout: layout.unwrap_or_default(),
            origin,
        });
    }

    /// `on big[0..64]`, `on big`, or nothing (every device of the only cluster).
    fn device_set(
        &mut self,
        frame: &mut crate::eval::Frame,
        p: &ast::Place,
        origin: Origin,
    ) -> Option<(usize, std::ops::Range<u64>, Origin)> {
        let file = origin.file;
        let Some(expr) = &p.devices else {
            return match self.program.clusters.len() {
                1 => Some((0, 0..self.program.clusters[0].device_count(), origin)),
                n => {
                    self.diags.push(
                        Diagnostic::new(
                            Code::MissingSetting,
                            format!(
                                "which devices? There {} {n} clusters",
                                if n == 1 { "is" } else { "are" }
                            ),
                            file,
                            origin.span,
                        )
                        .primary_label("no `on …`")
                        .help("say where: `place policy.train on local[0..2] with dp(2)`"),
                    );
                    None
                }
            };
        };
        let at = Origin {
            file,
            span: expr.span,
        };
        match self.eval_expr(frame, expr) {
            Val::Cluster(c) => Some((c, 0..self.program.clusters[c].device_count(), at)),
            Val::Devices {
                cluster,
                start: Some(a),
                end: Some(b),
            } if a >= 0 && b >= 0 => Some((cluster, a as u64..b as u64, at)),
            Val::Devices { .. } => {
                self.diags.push(
                    Diagnostic::new(
                        Code::NotConstant,
                        "the device range must be known before the job starts",
                        file,
                        expr.span,
                    )
                    .primary_label("not a range of known, non-negative device indices"),
                );
                None
            }
            Val::Error => None,
            other => {
                self.diags.push(
                    Diagnostic::new(
                        Code::TypeMismatch,
                        format!(
                            "`on` takes devices of a cluster, found {}",
                            other.describe()
                        ),
                        file,
                        expr.span,
                    )
                    .primary_label("not devices")
                    .help("write `on cluster[start..end]`"),
                );
                None
            }
        }
    }

    fn layout(
        &mut self,
        frame: &mut crate::eval::Frame,
        items: &[ast::LayoutItem],
    ) -> Option<Layout> {
        let file = frame.file();
        let mut layout = Layout::default();
        let mut ok = true;
        for item in items {
            let v = self.eval_expr(frame, &item.value);
            if let Some(found) = crate::limits::oversized(&v) {
                ok = false;
                self.diags.push(crate::limits::too_large(
                    item.kind.as_str(),
                    &found,
                    file,
                    item.value.span,
                ));
                continue;
            }
            let value = match v.as_int() {
                Some(n) if n >= 1 => n as u64,
                _ if v.is_error() => {
                    ok = false;
                    continue;
                }
                Some(n) => {
                    ok = false;
                    self.diags.push(
                        Diagnostic::new(
                            Code::LayoutProduct,
                            format!(
                                "`{}({n})`: a parallel degree is at least 1",
                                item.kind.as_str()
                            ),
                            file,
                            item.value.span,
                        )
                        .primary_label("not a degree"),
                    );
                    continue;
                }
                None => {
                    ok = false;
                    self.diags.push(
                        Diagnostic::new(
                            Code::NotConstant,
                            format!(
                                "`{}` needs an integer known before the job starts, found {}",
                                item.kind.as_str(),
                                v.describe()
                            ),
                            file,
                            item.value.span,
                        )
                        .primary_label("not a known integer"),
                    );
                    continue;
                }
            };
            let sourced = Some(Sourced {
                value,
                origin: Origin {
                    file,
                    span: item.span,
                },
            });
            let slot = match item.kind {
                LayoutKind::Dp => &mut layout.dp,
                LayoutKind::Tp => &mut layout.tp,
                LayoutKind::Pp => &mut layout.pp,
                LayoutKind::Fsdp => &mut layout.fsdp,
                LayoutKind::Sp => &mut layout.sp,
                LayoutKind::Micro => &mut layout.micro,
            };
            if let Some(prev) = slot {
                ok = false;
                self.diags.push(
                    Diagnostic::new(
                        Code::DuplicateName,
                        format!("`{}` is given twice", item.kind.as_str()),
                        file,
                        item.span,
                    )
                    .primary_label("again here")
                    .label(prev.origin.file, prev.origin.span, "first here"),
                );
            } else {
                *slot = sourced;
            }
        }
        ok.then_some(layout)
    }
}
