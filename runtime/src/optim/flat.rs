//! One flat buffer per optimizer: every parameter's data becomes a view into it, so one step of
//! AdamW (and the all-reduce and clipping before it) is a handful of kernels over the buffer,
//! not a handful per parameter — what `torch.optim.AdamW(fused=True)` and FSDP's flat
//! parameters do. The element-wise arithmetic is the per-parameter path's, op for op.

use tch::Tensor;

/// Where each parameter lives in the flat buffers (elements, in the parameters' order).
#[derive(Debug)]
pub(super) struct FlatLayout {
    spans: Vec<(i64, i64)>,
    /// The parameters' shapes, to view a span as its parameter.
    shapes: Vec<Vec<i64>>,
    /// 1 where the element's parameter is decayed, 0 elsewhere; `None` when all or none are.
    decay_mask: Option<Tensor>,
    all_decayed: bool,
    /// The buffer every parameter's data is a view of.
    params: Tensor,
}

impl FlatLayout {
    /// Moves the data of `params` into one buffer and points each parameter at its span.
    /// `None` (nothing changed) when they differ in kind or device, or there are none.
    pub(super) fn adopt(params: &[(&Tensor, bool)]) -> Option<FlatLayout> {
        let (first, _) = params.first()?;
        let (kind, device) = (first.kind(), first.device());
        if params
            .iter()
            .any(|(p, _)| p.kind() != kind || p.device() != device)
        {
            return None;
        }
        let mut spans = Vec::with_capacity(params.len());
        let mut start = 0;
        for (p, _) in params {
            let n = p.numel() as i64;
            spans.push((start, n));
            start += n;
        }
        let tensors: Vec<&Tensor> = params.iter().map(|(p, _)| *p).collect();
        let flat = into_one_buffer(&tensors);
        let shapes: Vec<Vec<i64>> = params.iter().map(|(p, _)| p.size()).collect();
        let decayed = params.iter().filter(|(_, d)| *d).count();
        let decay_mask = (decayed != 0 && decayed != params.len()).then(|| {
            Tensor::cat(
                &params
                    .iter()
                    .map(|(p, d)| {
                        Tensor::full([p.numel() as i64], i64::from(*d), (tch::Kind::Bool, device))
                    })
                    .collect::<Vec<_>>(),
                0,
            )
        });
        Some(FlatLayout {
            spans,
            shapes,
            decay_mask,
            all_decayed: decayed == params.len(),
            params: flat,
        })
    }

    pub(super) fn zeros(&self) -> Tensor {
        self.params.zeros_like()
    }

    /// Parameter `i`'s span of a flat buffer, in the parameter's shape (a view).
    pub(super) fn view(&self, flat: &Tensor, i: usize) -> Tensor {
        let (s, n) = self.spans[i];
        flat.narrow(0, s, n).view(self.shapes[i].as_slice())
    }

    /// The gradients of `params` (in the layout's order) as one flat tensor of the buffer's
    /// kind (float32 gradients of lower-precision weights, under mixed precision); `None` when
    /// one has none (the per-parameter path skips it).
    pub(super) fn gather_grads(&self, params: &[&Tensor]) -> Option<Tensor> {
        let grads: Vec<Tensor> = params.iter().map(|p| p.grad()).collect();
        if grads.iter().any(|g| !g.defined()) {
            return None;
        }
        Some(tch::no_grad(|| {
            Tensor::cat(
                &grads.iter().map(|g| g.reshape([-1])).collect::<Vec<_>>(),
                0,
            )
            .to_kind(self.params.kind())
        }))
    }

    /// Elements in the buffers.
    pub(super) fn numel(&self) -> i64 {
        self.params.numel() as i64
    }

    /// Multiplies the decayed parameters among elements `span` (start, length) by `factor`
    /// (the others by exactly 1).
    pub(super) fn decay(&mut self, factor: f64, (start, len): (i64, i64)) {
        let mut params = self.params.narrow(0, start, len);
        match &self.decay_mask {
            Some(mask) => {
                let options = (params.kind(), params.device());
                let scale = Tensor::scalar_tensor(factor, options).where_self(
                    &mask.narrow(0, start, len),
                    &Tensor::scalar_tensor(1.0, options),
                );
                let _ = params.f_mul_(&scale).expect("weight decay");
            }
            None if self.all_decayed => {
                let _ = params.f_mul_scalar_(factor).expect("weight decay");
            }
            None => {}
        }
    }

    pub(super) fn params(&self) -> &Tensor {
        &self.params
    }
}

/// Moves the data of `params` (one kind and device) into one new buffer, in their order, and
/// points each at its span: the buffer, whose views they now are.
pub(super) fn into_one_buffer(params: &[&Tensor]) -> Tensor {
    let flat = tch::no_grad(|| {
        Tensor::cat(
            &params
                .iter()
                .map(|p| p.detach().reshape([-1]))
                .collect::<Vec<_>>(),
            0,
        )
    });
    let mut start = 0;
    for p in params {
        let (n, shape) = (p.numel() as i64, p.size());
        let mut p = p.shallow_clone();
        p.set_data(&flat.narrow(0, start, n).view(shape.as_slice()));
        start += n;
    }
    flat
}
