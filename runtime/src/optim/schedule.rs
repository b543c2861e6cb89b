//! Linear warm-up followed by cosine decay to a floor, the `cosine_with_min_lr` schedule of
//! `transformers` (which the common RLHF trainers use).

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CosineSchedule {
    pub peak_lr: f64,
    pub min_lr: f64,
    pub warmup_steps: u64,
    pub total_steps: u64,
}

impl CosineSchedule {
    /// Learning rate for optimiser step `step` (0-based): `peak · step / warmup` during warm-up
    /// (so step 0 is 0, as in `transformers`), then cosine from `peak` to `min_lr` at
    /// `total_steps`, and `min_lr` after that (`transformers` would start a new cycle instead).
    pub fn lr(&self, step: u64) -> f64 {
        if step < self.warmup_steps {
            return self.peak_lr * step as f64 / self.warmup_steps as f64;
        }
        let decay_steps = self.total_steps.saturating_sub(self.warmup_steps).max(1);
        let progress = ((step - self.warmup_steps) as f64 / decay_steps as f64).min(1.0);
        let cosine = 0.5 * (1.0 + (std::f64::consts::PI * progress).cos());
        self.min_lr + (self.peak_lr - self.min_lr) * cosine
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_at_known_steps() {
        let schedule = CosineSchedule {
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
        let schedule = CosineSchedule {
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
}
