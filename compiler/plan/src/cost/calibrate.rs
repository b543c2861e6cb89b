//! Calibration: the cost model's parameters fitted to a measured run (`rlc plan --calibrate
//! run/metrics.jsonl`).
//!
//! A run's `metrics.jsonl` gives each step's `seconds` and, from a runtime that times its ops,
//! the seconds rank 0 spent in each kind of op ([`BarKind`]: `time/generate`, `time/forward`,
//! `time/train`, `time/kernel`, `time/transfer`, `time/other`).
//!
//! - [`fit_speed`]: one number from the step time alone — how much slower the device runs than
//!   the model assumes (every efficiency divided and every fixed overhead multiplied by it);
//!   what older metrics files, without per-op times, give.
//! - [`fit_ops`]: one slow-down per [`Knob`] (compute, memory, per-layer overhead, per-op
//!   overhead, links) from the per-kind times. Each predicted time is piecewise linear in the
//!   knobs (a sum of terms each proportional to one knob, and maxima of such sums: the roofline,
//!   waits for other ranks), so around the current knobs it is `F + Σ sᵢ·Bᵢ` with `Bᵢ` the
//!   knob's share found by a small finite difference. Levenberg–Marquardt on those pieces
//!   (Gauss–Newton first: inside one piece a step lands on the least squares) minimises the
//!   kinds' relative errors with their total held to the measured one, from the single speed
//!   factor and from a start the per-kind ratios suggest (a minimum in another piece is
//!   possible: the lower one is kept). A knob the kinds hardly depend on keeps the single speed
//!   factor; one the fit would take below a hundredth of that factor stays at the hundredth (a
//!   bound, not a reset: the prior there can be a hundred times off what the kinds say), and
//!   the others are fitted again.

use std::collections::BTreeMap;

use super::CostParams;
use crate::simulate::BarKind;

/// Measured times of a run: every `metrics.jsonl` line's `seconds` and `time/…` fields.
#[derive(Clone, Debug, PartialEq)]
pub struct MeasuredRun {
    pub step_seconds: Vec<f64>,
    /// Per step, the seconds of each kind of op (empty for lines without `time/…` keys).
    pub op_seconds: Vec<BTreeMap<BarKind, f64>>,
}

/// The median of `values` (not empty).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

impl MeasuredRun {
    /// Reads `metrics.jsonl` text: one JSON object per line with a `seconds` field and, where
    /// the runtime wrote them, `time/<kind>` fields (keys of other kinds are left alone).
    pub fn parse(text: &str) -> Result<MeasuredRun, String> {
        let mut step_seconds = Vec::new();
        let mut op_seconds = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let value: serde_json::Value = serde_json::from_str(line)
                .map_err(|e| format!("line {}: not JSON ({e})", i + 1))?;
            let seconds = value
                .get("seconds")
                .and_then(serde_json::Value::as_f64)
                .ok_or_else(|| format!("line {}: no number `seconds`", i + 1))?;
            if !(seconds.is_finite() && seconds > 0.0) {
                return Err(format!("line {}: `seconds` is {seconds}", i + 1));
            }
            step_seconds.push(seconds);
            let mut ops = BTreeMap::new();
            if let Some(object) = value.as_object() {
                for (key, v) in object {
                    let Some(kind) = BarKind::of_time_key(key) else {
                        continue;
                    };
                    match v.as_f64() {
                        Some(t) if t.is_finite() && t >= 0.0 => {
                            ops.insert(kind, t);
                        }
                        _ => return Err(format!("line {}: `{key}` is {v}", i + 1)),
                    }
                }
            }
            op_seconds.push(ops);
        }
        if step_seconds.is_empty() {
            return Err("no steps".into());
        }
        Ok(MeasuredRun {
            step_seconds,
            op_seconds,
        })
    }

    /// The steps the typical figures are taken over: all but the first (warm-up: allocation,
    /// lazy initialisation, kernel compilation) when there are others.
    fn typical_range(&self) -> std::ops::Range<usize> {
        usize::from(self.step_seconds.len() > 1)..self.step_seconds.len()
    }

    /// How many steps the typical figures are the median of.
    pub fn typical_steps(&self) -> usize {
        self.typical_range().len()
    }

    /// The typical step: the median, leaving out the first step when there are others.
    pub fn typical_step(&self) -> f64 {
        median(self.step_seconds[self.typical_range()].to_vec())
    }

    /// The typical seconds of each kind of op over the same steps (the median per kind, a step
    /// without a kind counting 0 for it); `None` when the file has no `time/…` keys (a runtime
    /// from before they were written).
    pub fn typical_ops(&self) -> Option<BTreeMap<BarKind, f64>> {
        let steps = &self.op_seconds[self.typical_range()];
        let kinds: std::collections::BTreeSet<BarKind> =
            steps.iter().flat_map(|s| s.keys().copied()).collect();
        if kinds.is_empty() {
            return None;
        }
        Some(
            kinds
                .into_iter()
                .map(|k| {
                    let values = steps
                        .iter()
                        .map(|s| s.get(&k).copied().unwrap_or(0.0))
                        .collect();
                    (k, median(values))
                })
                .collect(),
        )
    }
}

/// A group of parameters the fit scales together: each knob's slow-down `s` divides its
/// efficiencies and multiplies its fixed costs, so every term of the model that depends on it
/// takes `s` times as long.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Knob {
    /// `compute_efficiency`: FLOP-bound work (prefill, forward passes, training).
    Compute,
    /// `bandwidth_efficiency`: memory-bound work (decode, optimizer, kernels, local copies).
    Memory,
    /// `layer_overhead`: the fixed cost of each layer of each forward call.
    Layer,
    /// `op_overhead`: the fixed cost of each op.
    Op,
    /// `link_efficiency`, `intra_latency` and `inter_latency` together: collectives, transfers
    /// and weight syncs (one time per kind cannot tell α from β).
    Link,
}

impl Knob {
    pub const ALL: [Knob; 5] = [
        Knob::Compute,
        Knob::Memory,
        Knob::Layer,
        Knob::Op,
        Knob::Link,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Knob::Compute => "compute",
            Knob::Memory => "memory",
            Knob::Layer => "per layer",
            Knob::Op => "per op",
            Knob::Link => "links",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// A slow-down per [`Knob`] relative to some base parameters (1: as the base says).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Scales(pub [f64; 5]);

impl Scales {
    /// The single speed factor `k` of [`fit_speed`]: the device's knobs slowed by `k`; the
    /// links too where `links` (CPU ranks, whose messages the CPUs themselves move), else as
    /// they are (a GPU's network is not the GPU).
    pub fn uniform(k: f64, links: bool) -> Scales {
        Scales([k, k, k, k, if links { k } else { 1.0 }])
    }

    pub fn get(&self, knob: Knob) -> f64 {
        self.0[knob.index()]
    }

    /// `base` with each knob's parameters scaled.
    pub fn apply(&self, base: &CostParams) -> CostParams {
        let [compute, memory, layer, op, link] = self.0;
        CostParams {
            compute_efficiency: base.compute_efficiency / compute,
            bandwidth_efficiency: base.bandwidth_efficiency / memory,
            layer_overhead: base.layer_overhead * layer,
            op_overhead: base.op_overhead * op,
            link_efficiency: base.link_efficiency / link,
            intra_latency: base.intra_latency * link,
            inter_latency: base.inter_latency * link,
            ..base.clone()
        }
    }
}

/// Fits the device speed so that `predict` matches the measured step. One equation (the step
/// time) fits one number: how much slower (or faster) the device runs than the model assumes.
/// `predict` is the predicted step time under given parameters; it grows with the slow-down,
/// so a bisection on the factor finds it. The links are slowed too where `links`
/// ([`Scales::uniform`]: on CPUs, whose thread ranks' messages a faster machine also passes
/// faster; held, their time alone can exceed a fast machine's step). Returns the parameters
/// and the factor.
pub fn fit_speed(
    base: &CostParams,
    measured: f64,
    links: bool,
    predict: impl Fn(&CostParams) -> f64,
) -> Result<(CostParams, f64), String> {
    let at = |k: f64| predict(&Scales::uniform(k, links).apply(base));
    let (mut lo, mut hi) = (1e-4f64, 1e4f64);
    if !(at(lo) <= measured && measured <= at(hi)) {
        return Err(format!(
            "a measured step of {measured:.3} s is outside what the model can fit ({:.3e} s to {:.3e} s)",
            at(lo),
            at(hi)
        ));
    }
    // Bisection in log space: the prediction is monotone in the slow-down factor.
    for _ in 0..100 {
        let mid = (lo * hi).sqrt();
        if at(mid) < measured {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    let k = (lo * hi).sqrt();
    Ok((Scales::uniform(k, links).apply(base), k))
}

/// One kind of op of one run: its measured typical seconds and what the fitted model predicts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct KindFit {
    /// Which of the fitted runs (0 for [`fit_ops`]'s one).
    pub run: usize,
    pub kind: BarKind,
    pub measured: f64,
    pub predicted: f64,
}

/// What became of a knob in [`fit_ops`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KnobStatus {
    /// Fitted to the measured kinds.
    Fitted,
    /// The measured kinds hardly depend on it: it keeps the prior.
    Unused,
    /// The fit would take it below [`FLOOR`] of the prior — the measured kinds want that term
    /// (nearly) gone — so it stays at that bound.
    AtFloor,
}

/// What [`fit_ops`] found.
#[derive(Clone, Debug, PartialEq)]
pub struct OpsFit {
    /// The fitted parameters (`scales` applied to the base).
    pub params: CostParams,
    pub scales: Scales,
    /// Per knob: whether it was fitted, or why it keeps the prior's scale.
    pub status: [KnobStatus; 5],
    /// Per run, per measured kind, in [`BarKind`] order.
    pub kinds: Vec<KindFit>,
}

/// A kind below this share of the measured ops' total is weighed as if it were this large: the
/// fit keeps each kind's relative error small without letting a few microseconds of sampling
/// or logging decide the per-op overhead for everything else.
pub const SMALL_KIND: f64 = 0.01;
/// A knob is fitted when, at the prior, it makes at least this share of some measured kind's
/// time (as weighed).
const MATERIAL: f64 = 1e-3;
/// A knob the fit takes below this fraction of its prior is held there
/// ([`KnobStatus::AtFloor`]) and the others are fitted again.
pub const FLOOR: f64 = 1e-2;
/// The kinds' total is held to this relative error (a residual weighed so).
const TOTAL: f64 = 1e-3;
/// An error (sum of squared weighed residuals) below which the kinds are fitted as well as
/// rounding allows.
const EXACT: f64 = 1e-24;
/// Relative step of the finite differences that find each knob's share (within one linear
/// piece they are exact but for rounding, which this keeps near 1e-11).
const STEP: f64 = 1e-5;

/// Fits one slow-down per [`Knob`] so that `predict` — the seconds of each kind of op on the
/// measured rank under given parameters — matches `measured` (kinds with no measured time are
/// left out): the least squares of each kind's relative error, with the kinds' total held to
/// the measured total (the step comes out as measured whatever the model's shape gets wrong
/// between kinds). Knobs the measured kinds hardly depend on keep `prior` (the single speed
/// factor); knobs the fit would take below [`FLOOR`] of the prior stay at that bound. Errors when nothing was
/// measured or `predict` fails.
pub fn fit_ops(
    base: &CostParams,
    measured: &BTreeMap<BarKind, f64>,
    prior: Scales,
    predict: impl Fn(&CostParams) -> Result<BTreeMap<BarKind, f64>, String>,
) -> Result<OpsFit, String> {
    fit_runs(base, std::slice::from_ref(measured), prior, |p| {
        Ok(vec![predict(p)?])
    })
}

/// [`fit_ops`] over several runs at once (of other programs, or other layouts of one): one set
/// of knobs for all, each run's kinds weighed against that run's total, and each run's total
/// held. Runs whose passes differ in shape tell apart knobs that one run's kinds move together
/// (a run whose every pass has the same rows cannot tell compute from per-layer overhead).
/// `predict` gives each run's kinds, in the order of `measured`.
pub fn fit_runs(
    base: &CostParams,
    measured: &[BTreeMap<BarKind, f64>],
    prior: Scales,
    predict: impl Fn(&CostParams) -> Result<Vec<BTreeMap<BarKind, f64>>, String>,
) -> Result<OpsFit, String> {
    let kinds: Vec<(usize, BarKind, f64)> = measured
        .iter()
        .enumerate()
        .flat_map(|(run, kinds)| {
            kinds
                .iter()
                .filter(|(k, m)| **m > 0.0 && m.is_finite() && **k != BarKind::Offload)
                .map(move |(k, m)| (run, *k, *m))
        })
        .collect();
    if kinds.is_empty() {
        return Err("the run timed no ops".into());
    }
    let runs = measured.len();
    let mut totals = vec![0.0; runs];
    for (run, _, m) in &kinds {
        totals[*run] += m;
    }
    // Every kept kind took some time: a run with none has a total of 0.
    if let Some(run) = totals.iter().position(|t| *t == 0.0) {
        return Err(format!("run {} timed no ops", run + 1));
    }
    let target: Vec<f64> = kinds.iter().map(|(_, _, m)| *m).collect();
    let run_of: Vec<usize> = kinds.iter().map(|(r, _, _)| *r).collect();
    let problem = Problem {
        scale: kinds
            .iter()
            .map(|(r, _, m)| m.max(SMALL_KIND * totals[*r]))
            .collect(),
        target,
        run_of,
        totals,
        prior,
    };
    let row = |s: &Scales| -> Result<Vec<f64>, String> {
        let p = predict(&s.apply(base))?;
        if p.len() != runs {
            return Err(format!("{} runs predicted for {runs}", p.len()));
        }
        Ok(kinds
            .iter()
            .map(|(r, k, _)| p[*r].get(k).copied().unwrap_or(0.0))
            .collect())
    };
    // Knobs held at the floor: those the fit would take below it. Fitting the others again
    // with them there finds where the rest goes.
    let mut held = [false; 5];
    let (scales, y, status) = loop {
        let anchor = problem.anchor(held);
        // From the prior and from the kinds' ratios: the error can have a minimum in more than
        // one linear piece; the lower one is kept.
        let from_prior = problem.descend(&row, anchor, held)?;
        let start = problem.ratio_start(&row, held)?;
        let from_ratios = problem.descend(&row, start, held)?;
        let (mut scales, mut y, mut value, fitted, depends) = if from_ratios.2 < from_prior.2 {
            from_ratios
        } else {
            from_prior
        };
        let floored: Vec<usize> = (0..5)
            .filter(|&i| fitted[i] && scales.0[i] < FLOOR * prior.0[i])
            .collect();
        if floored.is_empty() {
            // A knob the kinds no longer depend on where the fit ended (past a roofline's
            // corner, off the path a wait follows) goes back to the prior where that leaves
            // the error as it is.
            let mut status = [KnobStatus::Unused; 5];
            for i in 0..5 {
                if held[i] {
                    status[i] = KnobStatus::AtFloor;
                    continue;
                }
                if depends[i] {
                    status[i] = KnobStatus::Fitted;
                    continue;
                }
                if scales.0[i] == prior.0[i] {
                    continue;
                }
                let mut reset = scales;
                reset.0[i] = prior.0[i];
                let y_reset = row(&reset)?;
                let v = problem.error(&y_reset);
                if v <= value * (1.0 + 1e-9) + EXACT {
                    (scales, y, value) = (reset, y_reset, v);
                } else {
                    status[i] = KnobStatus::Fitted;
                }
            }
            break (scales, y, status);
        }
        for i in floored {
            held[i] = true;
        }
    };
    Ok(OpsFit {
        params: scales.apply(base),
        scales,
        status,
        kinds: kinds
            .iter()
            .zip(y)
            .map(|(&(run, kind, measured), predicted)| KindFit {
                run,
                kind,
                measured,
                predicted,
            })
            .collect(),
    })
}

/// Predicted seconds of each measured kind under some knobs.
type Row<'a> = dyn Fn(&Scales) -> Result<Vec<f64>, String> + 'a;

/// The measured side of [`fit_ops`]: per kind its seconds and the size its error is relative
/// to, and the knobs' prior.
struct Problem {
    target: Vec<f64>,
    scale: Vec<f64>,
    /// The run each kind belongs to, and each run's measured total.
    run_of: Vec<usize>,
    totals: Vec<f64>,
    prior: Scales,
}

impl Problem {
    /// The prior with the `held` knobs at their floor.
    fn anchor(&self, held: [bool; 5]) -> Scales {
        Scales(std::array::from_fn(|i| {
            self.prior.0[i] * if held[i] { FLOOR } else { 1.0 }
        }))
    }

    /// The residuals of predictions `y`: each kind's error relative to its size, then each
    /// run's total's relative to [`TOTAL`] of it.
    fn residuals(&self, y: &[f64]) -> Vec<f64> {
        let mut r: Vec<f64> = y
            .iter()
            .zip(&self.target)
            .zip(&self.scale)
            .map(|((y, m), w)| (y - m) / w)
            .collect();
        for (run, total) in self.totals.iter().enumerate() {
            r.push((self.run_sum(run, y.iter().copied()) - total) / (TOTAL * total));
        }
        r
    }

    /// The sum of `values` (one per kind) over the kinds of `run`.
    fn run_sum(&self, run: usize, values: impl IntoIterator<Item = f64>) -> f64 {
        values
            .into_iter()
            .zip(&self.run_of)
            .filter(|(_, r)| **r == run)
            .map(|(v, _)| v)
            .sum()
    }

    /// The sum of the squared residuals.
    fn error(&self, y: &[f64]) -> f64 {
        self.residuals(y).iter().map(|r| r * r).sum()
    }

    /// Levenberg–Marquardt on the knobs from `start` (within one linear piece an undamped step
    /// lands on the least squares), the `held` knobs and those no kind depends on at the
    /// prior's size kept where they are, no knob more than ten times smaller or larger in one
    /// step: the knobs, the predictions there, the error, which knobs it moved, and which the
    /// kinds depend on where it ended.
    #[allow(clippy::type_complexity)]
    fn descend(
        &self,
        row: &Row,
        start: Scales,
        held: [bool; 5],
    ) -> Result<(Scales, Vec<f64>, f64, [bool; 5], [bool; 5]), String> {
        let mut scales = start;
        let mut u: [f64; 5] = std::array::from_fn(|i| start.0[i].ln());
        let mut y = row(&scales)?;
        let mut value = self.error(&y);
        let mut fitted = [false; 5];
        // Gauss-Newton first: the kinds' weights make the normal equations ill-conditioned, and
        // damping of a thousandth already bends the step far from the least squares.
        let mut damping = 1e-12;
        for _ in 0..200 {
            if value < EXACT {
                break;
            }
            // ∂residual/∂knob: each knob's share of each kind, as weighed.
            let shares = shares(row, &scales, &self.prior, &y)?;
            let free: [bool; 5] = std::array::from_fn(|i| {
                !held[i]
                    && shares
                        .iter()
                        .zip(&self.scale)
                        .any(|(b, w)| b[i] * self.prior.0[i] >= MATERIAL * w)
            });
            for i in 0..5 {
                fitted[i] |= free[i];
            }
            let idx: Vec<usize> = (0..5).filter(|&i| free[i]).collect();
            if idx.is_empty() {
                break;
            }
            let mut jac: Vec<Vec<f64>> = shares
                .iter()
                .zip(&self.scale)
                .map(|(b, w)| idx.iter().map(|&i| b[i] / w).collect())
                .collect();
            for (run, total) in self.totals.iter().enumerate() {
                jac.push(
                    idx.iter()
                        .map(|&i| self.run_sum(run, shares.iter().map(|b| b[i])) / (TOTAL * total))
                        .collect(),
                );
            }
            let r = self.residuals(&y);
            let n = idx.len();
            let mut normal = vec![vec![0.0; n]; n];
            let mut gradient = vec![0.0; n];
            for (row_j, r) in jac.iter().zip(&r) {
                for p in 0..n {
                    gradient[p] += row_j[p] * r;
                    for q in 0..n {
                        normal[p][q] += row_j[p] * row_j[q];
                    }
                }
            }
            // Damped steps until one lowers the error (a step into another linear piece can
            // overshoot); none at any damping: a minimum.
            let mut accepted = None;
            while damping < 1e12 {
                let mut a = normal.clone();
                for (p, row) in a.iter_mut().enumerate() {
                    row[p] += damping * (normal[p][p] + 1e-30);
                }
                let b: Vec<f64> = gradient.iter().map(|g| -g).collect();
                let Some(delta) = gauss(a, b) else {
                    damping *= 4.0;
                    continue;
                };
                let mut trial = scales;
                for (p, &i) in idx.iter().enumerate() {
                    let s = scales.0[i];
                    trial.0[i] = (s + delta[p]).clamp(s / 10.0, s * 10.0);
                }
                let u_trial: [f64; 5] = std::array::from_fn(|i| trial.0[i].ln());
                let y_trial = row(&trial)?;
                let v = self.error(&y_trial);
                if v < value {
                    let moved = (0..5).fold(0.0f64, |m, i| m.max((u_trial[i] - u[i]).abs()));
                    accepted = Some((trial, u_trial, y_trial, v, moved));
                    damping = (damping / 10.0).max(1e-12);
                    break;
                }
                damping *= 4.0;
            }
            let Some((trial, u_trial, y_trial, v, moved)) = accepted else {
                break;
            };
            (scales, u, y, value) = (trial, u_trial, y_trial, v);
            if moved < 1e-12 {
                break;
            }
        }
        // Which knobs the kinds depend on where the descent ended.
        let shares = shares(row, &scales, &self.prior, &y)?;
        let depends: [bool; 5] = std::array::from_fn(|i| {
            shares
                .iter()
                .zip(&self.scale)
                .any(|(b, w)| b[i] * self.prior.0[i] >= MATERIAL * w)
        });
        Ok((scales, y, value, fitted, depends))
    }

    /// A second start for [`Problem::descend`], nearer the measurements than the prior when the
    /// model's shape is right: each knob moved by the geometric mean of its kinds'
    /// measured-to-predicted ratios at the prior, weighed by its share of each kind.
    fn ratio_start(&self, row: &Row, held: [bool; 5]) -> Result<Scales, String> {
        let prior = self.anchor(held);
        let y = row(&prior)?;
        let shares = shares(row, &prior, &self.prior, &y)?;
        Ok(Scales(std::array::from_fn(|i| {
            let (mut sum, mut weight) = (0.0, 0.0);
            for (c, b) in shares.iter().enumerate() {
                let part = b[i] * self.prior.0[i] / self.scale[c];
                if part > 0.0 && y[c] > 0.0 {
                    sum += part * (self.target[c] / y[c]).ln();
                    weight += part;
                }
            }
            let material = shares
                .iter()
                .zip(&self.scale)
                .any(|(b, w)| b[i] * self.prior.0[i] >= MATERIAL * w);
            if held[i] || !material || weight == 0.0 {
                prior.0[i]
            } else {
                prior.0[i] * (sum / weight).exp()
            }
        })))
    }
}

/// Each knob's share of each kind around `scales` (where `row` gives `y`): `B[c][i]`, seconds
/// of kind `c` per unit of knob `i`'s slow-down.
fn shares(row: &Row, scales: &Scales, prior: &Scales, y: &[f64]) -> Result<Vec<[f64; 5]>, String> {
    let mut shares = vec![[0.0f64; 5]; y.len()];
    for knob in Knob::ALL {
        let i = knob.index();
        let mut up = *scales;
        // Relative to the prior where the knob has gone far below it: a step that the
        // predictions' rounding would swallow finds no share.
        let h = scales.0[i].max(FLOOR * prior.0[i]) * STEP;
        up.0[i] += h;
        let y_up = row(&up)?;
        for (c, share) in shares.iter_mut().enumerate() {
            share[i] = ((y_up[c] - y[c]) / h).max(0.0);
        }
    }
    Ok(shares)
}

/// Solves `a·x = b` by Gaussian elimination with partial pivoting; `None` when singular.
fn gauss(mut a: Vec<Vec<f64>>, mut b: Vec<f64>) -> Option<Vec<f64>> {
    let n = b.len();
    for col in 0..n {
        let pivot = (col..n).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[pivot][col] == 0.0 || a[pivot][col].is_nan() {
            return None;
        }
        a.swap(col, pivot);
        b.swap(col, pivot);
        let (top, rest) = a.split_at_mut(col + 1);
        let pivot_row = &top[col];
        for (r, row) in rest.iter_mut().enumerate() {
            let f = row[col] / pivot_row[col];
            for (x, p) in row[col..].iter_mut().zip(&pivot_row[col..]) {
                *x -= f * p;
            }
            b[col + 1 + r] -= f * b[col];
        }
    }
    let mut x = vec![0.0; n];
    for r in (0..n).rev() {
        let sum: f64 = (r + 1..n).map(|k| a[r][k] * x[k]).sum();
        x[r] = (b[r] - sum) / a[r][r];
    }
    x.iter().all(|v| v.is_finite()).then_some(x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cost::work::{self, PhaseWork, RoleShape, Sequences};
    use crate::cost::{Hardware, Placed, collective};
    use crate::model::Layout;

    #[test]
    fn typical_step_skips_warm_up() {
        let run = MeasuredRun::parse(
            "{\"step\":0,\"seconds\":5.0}\n{\"step\":1,\"seconds\":1.0}\n{\"step\":2,\"seconds\":3.0}\n",
        )
        .unwrap();
        assert_eq!(run.typical_step(), 2.0);
        assert_eq!(run.typical_ops(), None);
        assert!(MeasuredRun::parse("{\"step\":0}").is_err());
        assert!(MeasuredRun::parse("").is_err());
    }

    #[test]
    fn typical_ops_are_medians_per_kind_after_the_warm_up() {
        let run = MeasuredRun::parse(
            "{\"step\":0,\"seconds\":9.0,\"time/generate\":8.0}\n\
             {\"step\":1,\"seconds\":1.0,\"time/generate\":0.5,\"time/train\":0.25,\"time/x\":1}\n\
             {\"step\":2,\"seconds\":1.0,\"time/generate\":0.7}\n\
             {\"step\":3,\"seconds\":1.0,\"time/generate\":0.6,\"time/train\":0.25}\n",
        )
        .unwrap();
        let ops = run.typical_ops().unwrap();
        assert_eq!(
            ops.into_iter().collect::<Vec<_>>(),
            [(BarKind::Generate, 0.6), (BarKind::Train, 0.25)]
        );
        assert!(MeasuredRun::parse("{\"seconds\":1.0,\"time/train\":-1}").is_err());
        assert!(MeasuredRun::parse("{\"seconds\":1.0,\"time/train\":null}").is_err());
    }

    #[test]
    fn the_speed_factor_recovers_a_slow_down() {
        let base = CostParams::default();
        let predict = |p: &CostParams| 2.0 / p.compute_efficiency + 1000.0 * p.op_overhead;
        let truth = predict(&Scales::uniform(3.0, false).apply(&base));
        let (fitted, k) = fit_speed(&base, truth, false, predict).unwrap();
        assert!((k - 3.0).abs() < 1e-6, "{k}");
        assert!((predict(&fitted) - truth).abs() < 1e-9);
    }

    #[test]
    fn on_cpus_the_speed_factor_slows_the_links_too() {
        // A step mostly of messages between ranks: held, the links alone take longer than the
        // measured step, and no factor of the device fits it.
        let base = CostParams::cpu();
        let predict = |p: &CostParams| 1e-3 / p.compute_efficiency + 100.0 * p.intra_latency;
        let truth = predict(&Scales::uniform(0.5, true).apply(&base));
        assert!(fit_speed(&base, truth, false, predict).is_err());
        let (fitted, k) = fit_speed(&base, truth, true, predict).unwrap();
        assert!((k - 0.5).abs() < 1e-6, "{k}");
        assert_eq!(fitted.intra_latency, base.intra_latency * k);
        assert_eq!(fitted.link_efficiency, base.link_efficiency / k);
    }

    fn cpu() -> Hardware {
        Hardware {
            flops: 50e9,
            memory_bandwidth: 20e9,
            memory: 16.0 * 1024f64.powi(3),
            intra_bandwidth: 10e9,
            inter_bandwidth: 10e9,
            devices_per_node: 2,
        }
    }

    /// A small model on two data ranks, each kind of op as the cost model times it: a step of
    /// generation, two forward passes, an update, kernels over a few MB, a 4 MB transfer and two
    /// bookkeeping ops.
    fn small_step(p: &CostParams) -> BTreeMap<BarKind, f64> {
        let shape = RoleShape {
            params: 2e6,
            layers: 4.0,
            hidden: 256.0,
            heads: 4.0,
            kv_heads: 4.0,
            bytes: 4.0,
            trainable: true,
            recompute: false,
            reads_tokens: true,
        };
        let placed = Placed::aligned(cpu(), Layout::new(2, 1, 1, 1));
        let phase = |w: PhaseWork| work::seconds(p, &shape, &placed, &w) + p.op_overhead;
        let seq = Sequences {
            prompt: 32.0,
            response: 16.0,
            group: 8.0,
        };
        let generate = phase(PhaseWork::Generate { batch: 64.0, seq });
        let forward = 2.0 * phase(PhaseWork::Forward { batch: 64.0, seq });
        let train = phase(PhaseWork::Update {
            batch: 64.0,
            seq,
            minibatch: 32.0,
            epochs: 2.0,
        });
        let kernel = 3.0
            * (4e6 / (cpu().memory_bandwidth * p.bandwidth_efficiency) + p.op_overhead)
            + collective::all_reduce(8.0, 2, cpu().link(false, p));
        let transfer = collective::send(4e6, cpu().link(false, p)) + p.op_overhead;
        let other = 2.0 * p.op_overhead;
        BTreeMap::from([
            (BarKind::Generate, generate),
            (BarKind::Forward, forward),
            (BarKind::Train, train),
            (BarKind::Kernel, kernel),
            (BarKind::Communication, transfer),
            (BarKind::Other, other),
        ])
    }

    #[test]
    fn per_kind_times_from_the_model_give_back_its_parameters() {
        let base = CostParams::cpu();
        for truth in [
            Scales([8.0, 0.5, 2.5, 0.2, 3.0]),
            Scales([0.3, 4.0, 0.7, 6.0, 0.5]),
            Scales([1.0; 5]),
        ] {
            let measured = small_step(&truth.apply(&base));
            let fit = fit_ops(&base, &measured, Scales::uniform(2.0, false), |p| {
                Ok(small_step(p))
            })
            .unwrap();
            assert_eq!(fit.status, [KnobStatus::Fitted; 5], "{truth:?}");
            for knob in Knob::ALL {
                let (got, want) = (fit.scales.get(knob), truth.get(knob));
                assert!(
                    (got / want - 1.0).abs() < 1e-9,
                    "{}: {got} for {want}",
                    knob.name()
                );
            }
            for k in &fit.kinds {
                assert!((k.predicted / k.measured - 1.0).abs() < 1e-9, "{k:?}");
            }
        }
    }

    #[test]
    fn knobs_the_run_does_not_time_keep_the_speed_factor() {
        // No transfers, no kernels, and links so fast that the update's gradient all-reduce
        // costs nothing: the links keep the prior's scale (1), the rest is fitted.
        let base = CostParams {
            link_efficiency: 1e6,
            intra_latency: 0.0,
            inter_latency: 0.0,
            ..CostParams::cpu()
        };
        let truth = Scales([5.0, 2.0, 0.5, 0.1, 1.0]);
        let mut measured = small_step(&truth.apply(&base));
        measured.remove(&BarKind::Communication);
        measured.remove(&BarKind::Kernel);
        let prior = Scales::uniform(3.0, false);
        let fit = fit_ops(&base, &measured, prior, |p| Ok(small_step(p))).unwrap();
        assert_eq!(fit.status[Knob::Link.index()], KnobStatus::Unused);
        assert_eq!(fit.scales.get(Knob::Link), 1.0);
        for k in &fit.kinds {
            assert!((k.predicted / k.measured - 1.0).abs() < 1e-6, "{k:?}");
        }
        assert!(fit_ops(&base, &BTreeMap::new(), prior, |p| Ok(small_step(p))).is_err());
    }

    #[test]
    fn runs_of_other_shapes_pin_the_knobs_one_run_moves_together() {
        // Run A's kinds are all 3 parts compute to 1 part per-layer overhead (passes of one
        // shape), run B's 1 to 4: alone, A fits any (compute, layer) pair on a line and the
        // speed factor lands on one; with B there is one pair.
        let base = CostParams::cpu();
        let parts = |p: &CostParams| {
            (
                1e-3 * base.compute_efficiency / p.compute_efficiency,
                1e-3 * p.layer_overhead / base.layer_overhead,
            )
        };
        let run_a = |p: &CostParams| {
            let (c, l) = parts(p);
            BTreeMap::from([
                (BarKind::Forward, 3.0 * c + l),
                (BarKind::Train, 9.0 * c + 3.0 * l),
            ])
        };
        let run_b = |p: &CostParams| {
            let (c, l) = parts(p);
            BTreeMap::from([(BarKind::Forward, c + 4.0 * l)])
        };
        let truth = Scales([2.0, 1.0, 0.5, 1.0, 1.0]).apply(&base);
        let measured = [run_a(&truth), run_b(&truth)];
        let step = |p: &CostParams| run_a(p).values().chain(run_b(p).values()).sum::<f64>();
        let (_, k) = fit_speed(&base, step(&truth), false, step).unwrap();
        let prior = Scales::uniform(k, false);

        let joint = fit_runs(&base, &measured, prior, |p| Ok(vec![run_a(p), run_b(p)])).unwrap();
        for knob in [Knob::Compute, Knob::Layer] {
            let want = [2.0, 1.0, 0.5][knob.index()];
            let got = joint.scales.get(knob);
            assert!((got / want - 1.0).abs() < 1e-6, "{}: {got}", knob.name());
            assert_eq!(joint.status[knob.index()], KnobStatus::Fitted);
        }
        assert_eq!(joint.status[Knob::Memory.index()], KnobStatus::Unused);
        let runs: Vec<usize> = joint.kinds.iter().map(|k| k.run).collect();
        assert_eq!(runs, [0, 0, 1]);
        for k in &joint.kinds {
            assert!((k.predicted / k.measured - 1.0).abs() < 1e-9, "{k:?}");
        }

        // A alone: its kinds come out exact, B's step twice what it is.
        let alone = fit_ops(&base, &measured[0], prior, |p| Ok(run_a(p))).unwrap();
        for k in &alone.kinds {
            assert!((k.predicted / k.measured - 1.0).abs() < 1e-9, "{k:?}");
        }
        let b = run_b(&alone.params)[&BarKind::Forward] / measured[1][&BarKind::Forward];
        assert!(b > 1.5, "run B under A's fit: {b}");

        // A run with nothing timed is refused, by its number.
        let err = fit_runs(&base, &[measured[0].clone(), BTreeMap::new()], prior, |p| {
            Ok(vec![run_a(p), run_b(p)])
        })
        .unwrap_err();
        assert_eq!(err, "run 2 timed no ops");
    }

    #[test]
    fn a_knob_the_fit_would_take_to_zero_stays_at_its_floor() {
        // Every kind measured without its per-op overhead (the model's other terms as they
        // are): no positive per-op overhead fits, so it stays at its floor, and every kind comes
        // out within the floor's small overhead.
        let base = CostParams::cpu();
        let no_overhead = CostParams {
            op_overhead: 0.0,
            ..base.clone()
        };
        let measured = small_step(&no_overhead);
        let prior = Scales::uniform(1.0, false);
        let fit = fit_ops(&base, &measured, prior, |p| Ok(small_step(p))).unwrap();
        assert_eq!(fit.status[Knob::Op.index()], KnobStatus::AtFloor, "{fit:?}");
        assert_eq!(fit.scales.get(Knob::Op), FLOOR);
        assert!(
            fit.scales.0.iter().all(|s| s.is_finite() && *s > 0.0),
            "{fit:?}"
        );
        // Kept at the prior, the per-op overhead would put kernels and transfers far off.
        for kind in &fit.kinds {
            let error = kind.predicted / kind.measured - 1.0;
            assert!(error.abs() < 0.05, "{kind:?}: {:+.2} %", error * 100.0);
        }
    }
}
