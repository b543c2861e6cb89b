//! Keys and values of the positions already processed, so that decoding one token costs one
//! token's worth of projections instead of a full recompute.

use tch::Tensor;

/// Keys and values of one layer, each `[B, kv_heads, S, head_dim]` (before the GQA repeat).
#[derive(Debug, Default)]
pub struct LayerCache {
    kv: Option<(Tensor, Tensor)>,
}

impl LayerCache {
    /// Appends the new positions and returns the keys and values of all positions.
    pub fn append(&mut self, k: Tensor, v: Tensor) -> (Tensor, Tensor) {
        let (k, v) = match self.kv.take() {
            Some((old_k, old_v)) => (Tensor::cat(&[old_k, k], 2), Tensor::cat(&[old_v, v], 2)),
            None => (k, v),
        };
        self.kv = Some((k.shallow_clone(), v.shallow_clone()));
        (k, v)
    }

    fn len(&self) -> i64 {
        self.kv.as_ref().map_or(0, |(k, _)| k.size()[2])
    }

    fn select_rows(&mut self, rows: &Tensor) {
        if let Some((k, v)) = &self.kv {
            self.kv = Some((k.index_select(0, rows), v.index_select(0, rows)));
        }
    }
}

/// One [`LayerCache`] per decoder layer.
#[derive(Debug)]
pub struct KvCache {
    layers: Vec<LayerCache>,
}

impl KvCache {
    pub fn new(layers: usize) -> Self {
        Self {
            layers: (0..layers).map(|_| LayerCache::default()).collect(),
        }
    }

    /// Number of positions cached.
    pub fn len(&self) -> i64 {
        self.layers.first().map_or(0, LayerCache::len)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keeps (or repeats) the batch rows listed in `rows` (int64 indices), e.g. to draw several
    /// samples from one prefilled prompt.
    pub fn select_rows(&mut self, rows: &Tensor) {
        self.layers
            .iter_mut()
            .for_each(|layer| layer.select_rows(rows));
    }

    pub(crate) fn layers_mut(&mut self) -> &mut [LayerCache] {
        &mut self.layers
    }
}
