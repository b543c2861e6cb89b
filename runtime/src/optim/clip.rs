//! Global gradient-norm clipping, split into its two halves so that data-parallel ranks can
//! all-reduce the squared norm in between.

use tch::{Kind, Tensor};

/// Euclidean norm of all gradients together (parameters without a gradient count as zero).
pub fn grad_norm(params: &[Tensor]) -> f64 {
    sum_of_squares(params.iter().map(Tensor::grad)).sqrt()
}

/// Σ x² over the elements of every tensor of `tensors` (undefined ones count as zero): each
/// tensor's sum in `f64` where it lies, all read back at once — on a GPU one wait for the queue
/// rather than one a parameter — and added in order on the host.
pub fn sum_of_squares(tensors: impl IntoIterator<Item = Tensor>) -> f64 {
    let sums: Vec<Tensor> = tensors
        .into_iter()
        .filter(Tensor::defined)
        .map(|t| t.pow_tensor_scalar(2).sum(Kind::Double))
        .collect();
    let Some(device) = sums.first().map(Tensor::device) else {
        return 0.0;
    };
    let together: Vec<Tensor> = sums.iter().map(|s| s.to_device(device)).collect();
    let on_host = Tensor::stack(&together, 0).to_device(tch::Device::Cpu);
    Vec::<f64>::try_from(&on_host)
        .expect("a float64 vector reads back")
        .into_iter()
        .sum()
}

/// `clip_grad_norm_`'s factor `max_norm / (norm + 1e-6)`, when it is below 1 (`None`: the
/// gradients stay as they are).
fn clip_factor(norm: f64, max_norm: f64) -> Option<f64> {
    let factor = max_norm / (norm + 1e-6);
    (factor < 1.0).then_some(factor)
}

/// Multiplies every gradient by `factor` in place.
pub fn scale_grads(params: &[Tensor], factor: f64) {
    tch::no_grad(|| {
        for mut grad in params.iter().map(|p| p.grad()).filter(Tensor::defined) {
            let _ = grad
                .f_mul_scalar_(factor)
                .expect("scaling a gradient in place");
        }
    });
}

/// Scales the gradients so that their global norm is at most `max_norm`, as
/// `torch.nn.utils.clip_grad_norm_` does (`max_norm / (norm + 1e-6)`), and returns the norm before
/// clipping.
pub fn clip_grad_norm(params: &[Tensor], max_norm: f64) -> f64 {
    let norm = grad_norm(params);
    clip_to(params, norm, max_norm);
    norm
}

/// Scales the gradients of `params`, whose global norm is `norm` (summed over ranks however the
/// layout shards them), by `clip_grad_norm_`'s factor `max_norm / (norm + 1e-6)` when it is
/// below 1.
pub fn clip_to(params: &[Tensor], norm: f64, max_norm: f64) {
    if let Some(factor) = clip_factor(norm, max_norm) {
        scale_grads(params, factor);
    }
}

/// [`clip_to`] on one flat gradient (every parameter's, concatenated) whose global norm is
/// `norm` (summed over ranks however the layout spreads the parameters).
pub fn clip_flat_to(grads: &mut Tensor, norm: f64, max_norm: f64) {
    if let Some(factor) = clip_factor(norm, max_norm) {
        tch::no_grad(|| {
            let _ = grads
                .f_mul_scalar_(factor)
                .expect("scaling a gradient in place");
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parameters whose gradients are exactly `grads` (loss = Σ p · g).
    fn params_with_grads(grads: &[&[f32]]) -> Vec<Tensor> {
        let params: Vec<Tensor> = grads
            .iter()
            .map(|g| {
                Tensor::zeros([g.len() as i64], (Kind::Float, tch::Device::Cpu))
                    .set_requires_grad(true)
            })
            .collect();
        let loss = params
            .iter()
            .zip(grads)
            .map(|(p, g)| (p * Tensor::from_slice(g)).sum(Kind::Float))
            .fold(
                Tensor::zeros([], (Kind::Float, tch::Device::Cpu)),
                |a, b| a + b,
            );
        loss.backward();
        params
    }

    #[test]
    fn clipping_rescales_to_the_maximum_norm() {
        let params = params_with_grads(&[&[3.0, 4.0], &[12.0]]);
        let before = clip_grad_norm(&params, 6.5);
        assert!((before - 13.0).abs() < 1e-9);
        assert!((grad_norm(&params) - 6.5).abs() < 1e-5);
        let first = Vec::<f32>::try_from(params[0].grad()).unwrap();
        assert!(
            (first[0] - 1.5).abs() < 1e-5 && (first[1] - 2.0).abs() < 1e-5,
            "{first:?}"
        );
    }

    #[test]
    fn gradients_within_the_limit_are_left_alone() {
        let params = params_with_grads(&[&[3.0, 4.0]]);
        assert!((clip_grad_norm(&params, 10.0) - 5.0).abs() < 1e-9);
        assert_eq!(Vec::<f32>::try_from(params[0].grad()).unwrap(), [3.0, 4.0]);
    }
}
