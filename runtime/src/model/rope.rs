//! Rotary position embeddings in the Hugging Face layout (the two halves of each head are
//! rotated together, `rotate_half`), computed in float32 the way `transformers` does so that
//! loaded checkpoints reproduce its logits.

use tch::{Device, Kind, Tensor};

use super::config::{ModelConfig, Positions};

/// The rotation of a rotary model, or none (a model with learned positions).
#[derive(Debug)]
pub struct Rope {
    /// `1 / theta^(2i / head_dim)`, shape `[head_dim / 2]`; `None`: no rotation.
    inv_freq: Option<Tensor>,
}

/// cos and sin of the rotation angles, shape `[B, 1, T, head_dim]` (broadcast over heads);
/// `None`: the identity.
pub struct RopeAngles {
    rotation: Option<(Tensor, Tensor)>,
}

impl Rope {
    pub fn new(head_dim: i64, theta: f64, device: Device) -> Self {
        let exponents = Tensor::arange_start_step(0, head_dim, 2, (Kind::Int64, device))
            .to_kind(Kind::Float)
            / head_dim as f64;
        let inv_freq = Tensor::pow_scalar(theta, &exponents).reciprocal();
        Self {
            inv_freq: Some(inv_freq),
        }
    }

    /// The rotation `config` asks for: rotary positions of base `rope_theta`, or none when the
    /// positions are a learned table.
    pub fn for_config(config: &ModelConfig, device: Device) -> Self {
        match config.positions {
            Positions::Rope => Self::new(config.head_dim(), config.rope_theta, device),
            Positions::Learned => Self { inv_freq: None },
        }
    }

    /// Angles for integer `positions` of shape `[B, T]`.
    pub fn angles(&self, positions: &Tensor) -> RopeAngles {
        let rotation = self.inv_freq.as_ref().map(|inv_freq| {
            let freqs = positions.to_kind(Kind::Float).unsqueeze(-1) * inv_freq.view([1, 1, -1]);
            let emb = Tensor::cat(&[&freqs, &freqs], -1).unsqueeze(1);
            (emb.cos(), emb.sin())
        });
        RopeAngles { rotation }
    }
}

impl RopeAngles {
    /// The angles of positions `rows` of the pass.
    pub fn narrow(&self, rows: super::layers::Rows) -> RopeAngles {
        RopeAngles {
            rotation: self.rotation.as_ref().map(|(cos, sin)| {
                (
                    cos.narrow(2, rows.first, rows.len),
                    sin.narrow(2, rows.first, rows.len),
                )
            }),
        }
    }

    /// Rotates `x` of shape `[B, heads, T, head_dim]` (returns it as is without a rotation).
    pub fn apply(&self, x: &Tensor) -> Tensor {
        let Some((cos, sin)) = &self.rotation else {
            return x.shallow_clone();
        };
        let half = x.size().last().copied().unwrap_or(0) / 2;
        let first = x.narrow(-1, 0, half);
        let second = x.narrow(-1, half, half);
        let rotated = Tensor::cat(&[&second.neg(), &first], -1);
        // Angles in float32 (exact positions), the result in `x`'s kind (a bfloat16 model's
        // queries and keys stay bfloat16).
        (x * cos + rotated * sin).to_kind(x.kind())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotation_preserves_norm_and_position_zero_is_identity() {
        let rope = Rope::new(8, 10_000.0, Device::Cpu);
        let x = Tensor::randn([1, 2, 3, 8], (Kind::Float, Device::Cpu));
        let angles = rope.angles(&Tensor::from_slice(&[0i64, 5, 17]).view([1, 3]));
        let y = angles.apply(&x);
        let norm_diff = (y.norm_scalaropt_dim(2, [-1], false)
            - x.norm_scalaropt_dim(2, [-1], false))
        .abs()
        .max()
        .double_value(&[]);
        assert!(norm_diff < 1e-5, "{norm_diff}");
        let at_zero = (y.narrow(2, 0, 1) - x.narrow(2, 0, 1))
            .abs()
            .max()
            .double_value(&[]);
        assert_eq!(at_zero, 0.0);
        let moved = (y.narrow(2, 1, 1) - x.narrow(2, 1, 1))
            .abs()
            .max()
            .double_value(&[]);
        assert!(moved > 1e-3);
    }

    #[test]
    fn attention_scores_depend_only_on_relative_position() {
        let rope = Rope::new(8, 500_000.0, Device::Cpu);
        let q = Tensor::randn([1, 1, 1, 8], (Kind::Float, Device::Cpu));
        let k = Tensor::randn([1, 1, 1, 8], (Kind::Float, Device::Cpu));
        let score = |qp: i64, kp: i64| {
            let rq = rope
                .angles(&Tensor::from_slice(&[qp]).view([1, 1]))
                .apply(&q);
            let rk = rope
                .angles(&Tensor::from_slice(&[kp]).view([1, 1]))
                .apply(&k);
            (rq * rk).sum(Kind::Float).double_value(&[])
        };
        assert!((score(7, 3) - score(14, 10)).abs() < 1e-4);
        assert!((score(7, 3) - score(7, 4)).abs() > 1e-6);
    }
}
