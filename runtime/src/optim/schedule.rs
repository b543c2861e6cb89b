//! Linear warm-up, then the plan's shape down to a floor: cosine (the `cosine_with_min_lr`
//! schedule of `transformers`, which the common RLHF trainers use), linear, or constant.

use rlc_plan::model::LrSchedule;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    pub shape: LrSchedule,
    pub peak_lr: f64,
    pub min_lr: f64,
    pub warmup_steps: u64,
    pub total_steps: u64,
}

impl Schedule {
    /// The schedule of a plan's optimizer over `total_steps` optimizer steps.
    pub fn of(optimizer: &rlc_plan::model::Optimizer, total_steps: u64) -> Schedule {
        Schedule {
            shape: optimizer.schedule,
            peak_lr: optimizer.lr,
            min_lr: optimizer.lr * optimizer.min_lr_ratio,
            warmup_steps: optimizer.warmup,
            total_steps,
        }
    }

    /// Learning rate for optimiser step `step` (0-based): `peak · step / warmup` during warm-up
    /// (so step 0 is 0, as in `transformers`), then from `peak` to `min_lr` at `total_steps`
    /// along the shape, and `min_lr` after that (`transformers` would start a new cycle
    /// instead). A constant schedule stays at `peak`.
    pub fn lr(&self, step: u64) -> f64 {
        if step < self.warmup_steps {
            return self.peak_lr * step as f64 / self.warmup_steps as f64;
        }
        let decay_steps = self.total_steps.saturating_sub(self.warmup_steps).max(1);
        let progress = ((step - self.warmup_steps) as f64 / decay_steps as f64).min(1.0);
        let remaining = match self.shape {
            LrSchedule::Cosine => 0.5 * (1.0 + (std::f64::consts::PI * progress).cos()),
            LrSchedule::Linear => 1.0 - progress,
            LrSchedule::Constant => return self.peak_lr,
        };
        self.min_lr + (self.peak_lr - self.min_lr) * remaining
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_at_known_steps() {
        let schedule = Schedule {
            shape: LrSchedule::Cosine,
            peak_lr: 1e-3,
            min_lr: 1e-4,
            warmup_steps: 10,
            total_steps: 110,
        };
        let expected = [
            (0, 0.0),
            (5, 5e-4),
            (10, 1e-3),
            // A quarter into the decay: min + (peak - min) · (1 + cos(π/4)) / 2.
            (35, 1e-4 + 9e-4 * 0.853_553_390_593_273_7),
            (60, 5.5e-4),
            (110, 1e-4),
            (500, 1e-4),
        ];
        for (step, lr) in expected {
            let got = schedule.lr(step);
            assert!((got - lr).abs() < 1e-12, "step {step}: {got} vs {lr}");
        }
    }

    #[test]
    fn without_warmup_starts_at_peak_and_decreases() {
        let schedule = Schedule {
            shape: LrSchedule::Cosine,
            peak_lr: 2.0,
            min_lr: 0.0,
            warmup_steps: 0,
            total_steps: 4,
        };
        let lrs: Vec<f64> = (0..=4).map(|s| schedule.lr(s)).collect();
        assert_eq!(lrs[0], 2.0);
        assert!(lrs.windows(2).all(|w| w[1] < w[0]), "{lrs:?}");
        assert!(lrs[4].abs() < 1e-12);
    }

    #[test]
    fn linear_and_constant_shapes() {
        let linear = Schedule {
            shape: LrSchedule::Linear,
            peak_lr: 1.0,
            min_lr: 0.2,
            warmup_steps: 2,
            total_steps: 6,
        };
        let lrs: Vec<f64> = (0..=7).map(|s| linear.lr(s)).collect();
        let expected = [0.0, 0.5, 1.0, 0.8, 0.6, 0.4, 0.2, 0.2];
        for (got, want) in lrs.iter().zip(expected) {
            assert!((got - want).abs() < 1e-12, "{lrs:?}");
        }
        let constant = Schedule {
            shape: LrSchedule::Constant,
            ..linear
        };
        let lrs: Vec<f64> = (0..=7).map(|s| constant.lr(s)).collect();
        assert_eq!(lrs, [0.0, 0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]);
    }
}
