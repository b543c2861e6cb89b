//! Keys and values of the positions already processed, so that decoding one token costs one
//! token's worth of projections instead of a full recompute.
//!
//! A decoder's cache is preallocated ([`KvCache::preallocated`]): each layer's keys and values
//! live in one buffer as long as the whole generation, new positions are written into it in
//! place and attention reads a view of the positions written. Appending by concatenation copies
//! every cached position at every step (quadratic in the length, and a new allocation of a new
//! shape each time, which a captured device graph cannot replay). A differentiated pass (a
//! group's shared prompt, then its responses, in training) keeps concatenation
//! ([`KvCache::new`]): autograd must not see its saved keys overwritten in place.

use tch::{Device, Kind, Tensor};

/// Keys and values of one layer, each `[B, kv_heads, S, head_dim]` (before the GQA repeat).
#[derive(Debug, Default)]
pub struct LayerCache {
    /// The buffers: exactly the `len` positions (concatenated), or `[B, kv_heads, capacity,
    /// head_dim]` with the first `len` positions written (preallocated).
    kv: Option<(Tensor, Tensor)>,
    len: i64,
    /// Positions to allocate at the first append; 0: concatenate instead.
    capacity: i64,
    /// A static step's cache ([`KvCache::at_columns`]): each append writes its `T` positions at
    /// the columns this int64 `[T]` tensor holds and returns the whole buffers.
    columns: Option<Tensor>,
}

impl LayerCache {
    /// Appends the new positions and returns the keys and values of all positions.
    ///
    /// # Panics
    /// If a preallocated cache is given keys or values that require a gradient.
    pub fn append(&mut self, k: Tensor, v: Tensor) -> (Tensor, Tensor) {
        if let (Some(columns), Some((buffer_k, buffer_v))) = (&self.columns, &mut self.kv) {
            let _ = buffer_k.index_copy_(2, columns, &k);
            let _ = buffer_v.index_copy_(2, columns, &v);
            return (buffer_k.shallow_clone(), buffer_v.shallow_clone());
        }
        let steps = k.size()[2];
        if self.capacity == 0 {
            let (k, v) = match self.kv.take() {
                Some((old_k, old_v)) => (Tensor::cat(&[old_k, k], 2), Tensor::cat(&[old_v, v], 2)),
                None => (k, v),
            };
            self.kv = Some((k.shallow_clone(), v.shallow_clone()));
            self.len += steps;
            return (k, v);
        }
        assert!(
            !k.requires_grad() && !v.requires_grad(),
            "a preallocated KV cache is written in place: a differentiated pass needs KvCache::new"
        );
        let needed = self.len + steps;
        let (buffer_k, buffer_v) = match self.kv.take() {
            None => (
                buffer_like(&k, self.capacity.max(steps)),
                buffer_like(&v, self.capacity.max(steps)),
            ),
            // More positions than planned (a caller's hint short): twice the room, so that
            // appends stay amortised constant.
            Some((bk, bv)) if bk.size()[2] < needed => {
                let room = needed.max(2 * bk.size()[2]);
                let grow = |old: &Tensor| {
                    let new = buffer_like(old, room);
                    new.narrow(2, 0, self.len)
                        .copy_(&old.narrow(2, 0, self.len));
                    new
                };
                (grow(&bk), grow(&bv))
            }
            Some(kv) => kv,
        };
        buffer_k.narrow(2, self.len, steps).copy_(&k);
        buffer_v.narrow(2, self.len, steps).copy_(&v);
        self.len = needed;
        let written = (buffer_k.narrow(2, 0, needed), buffer_v.narrow(2, 0, needed));
        self.kv = Some((buffer_k, buffer_v));
        written
    }

    fn len(&self) -> i64 {
        self.len
    }

    fn select_rows(&mut self, rows: &Tensor) {
        if let Some((k, v)) = &self.kv {
            self.kv = Some((k.index_select(0, rows), v.index_select(0, rows)));
        }
    }
}

/// A zeroed buffer for `positions` positions of `like`'s other sizes, kind and device (zeroed:
/// the attention loops read a written prefix of it through a slice of the whole).
fn buffer_like(like: &Tensor, positions: i64) -> Tensor {
    let mut size = like.size();
    size[2] = positions;
    let options: (Kind, Device) = (like.kind(), like.device());
    Tensor::zeros(size, options)
}

/// One [`LayerCache`] per decoder layer.
#[derive(Debug)]
pub struct KvCache {
    layers: Vec<LayerCache>,
}

impl KvCache {
    /// A cache that concatenates: for passes that are differentiated through the cache.
    pub fn new(layers: usize) -> Self {
        Self::with_capacity(layers, 0)
    }

    /// A cache whose buffers hold `positions` positions (prompt and every token to come),
    /// written in place: for decoding, where nothing is differentiated. Should more positions
    /// come, the buffers double.
    pub fn preallocated(layers: usize, positions: i64) -> Self {
        Self::with_capacity(layers, positions.max(1))
    }

    fn with_capacity(layers: usize, capacity: i64) -> Self {
        Self {
            layers: (0..layers)
                .map(|_| LayerCache {
                    capacity,
                    ..LayerCache::default()
                })
                .collect(),
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

    /// Each layer's keys and values as allocated, `[B, kv_heads, room, head_dim]` (a
    /// preallocated cache: its first [`Self::len`] positions written, the rest zero), or `None`
    /// before the first append.
    pub(crate) fn into_buffers(self) -> Option<Vec<(Tensor, Tensor)>> {
        self.layers.into_iter().map(|layer| layer.kv).collect()
    }

    /// A cache over whole `buffers` (views of them: a static decoder's first rows) whose
    /// appends write their new positions at the columns `columns` holds (int64 `[T]` on the
    /// buffers' device, one per new position) and return the whole buffers. Nothing of it
    /// depends on the position on the host: the step of a static decoder, the same work at every
    /// position (on a GPU, one captured graph replayed), attention masking the columns not
    /// written yet.
    pub(crate) fn at_columns(buffers: &[(Tensor, Tensor)], columns: &Tensor) -> Self {
        let layers = buffers
            .iter()
            .map(|(k, v)| LayerCache {
                len: k.size()[2],
                kv: Some((k.shallow_clone(), v.shallow_clone())),
                capacity: k.size()[2],
                columns: Some(columns.shallow_clone()),
            })
            .collect();
        Self { layers }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn positions(rows: i64, steps: i64) -> (Tensor, Tensor) {
        let k = Tensor::randn([rows, 2, steps, 4], (Kind::Float, Device::Cpu));
        (k.shallow_clone(), -k)
    }

    /// Appends the same positions to a concatenating and a preallocated layer cache, checking
    /// that both return the same keys and values at every append.
    fn same_as_concatenation(capacity: i64, appends: &[i64]) -> LayerCache {
        tch::manual_seed(1);
        let mut concatenated = KvCache::new(1);
        let mut preallocated = KvCache::preallocated(1, capacity);
        for &steps in appends {
            let (k, v) = positions(3, steps);
            let want = concatenated.layers_mut()[0].append(k.copy(), v.copy());
            let got = preallocated.layers_mut()[0].append(k, v);
            assert!(got.0.equal(&want.0) && got.1.equal(&want.1));
            assert_eq!(preallocated.len(), concatenated.len());
        }
        preallocated.layers.remove(0)
    }

    #[test]
    fn a_preallocated_cache_writes_in_place_and_reads_what_concatenation_does() {
        let layer = same_as_concatenation(12, &[5, 1, 1, 1]);
        let (k, _) = layer.kv.as_ref().unwrap();
        // One buffer all along, as long as planned; the positions returned are its prefix.
        assert_eq!(k.size(), [3, 2, 12, 4]);
        assert_eq!(layer.len(), 8);
    }

    #[test]
    fn a_preallocated_cache_grows_when_more_positions_come_than_planned() {
        let layer = same_as_concatenation(4, &[3, 1, 1, 6]);
        let (k, _) = layer.kv.as_ref().unwrap();
        // 3 + 1 fit; the fifth position doubles the room to 8; the next six, 11 in all, to 16.
        assert_eq!(k.size()[2], 16);
        assert_eq!(layer.len(), 11);
    }

    #[test]
    fn selected_rows_keep_their_positions_and_room() {
        tch::manual_seed(2);
        let mut cache = KvCache::preallocated(1, 6);
        let (k, v) = positions(3, 2);
        let _ = cache.layers_mut()[0].append(k.copy(), v);
        cache.select_rows(&Tensor::from_slice(&[2i64, 0, 0]));
        let (k2, v2) = positions(3, 1);
        let (all_k, _) = cache.layers_mut()[0].append(k2.copy(), v2);
        let want = Tensor::cat(
            &[k.index_select(0, &Tensor::from_slice(&[2i64, 0, 0])), k2],
            2,
        );
        assert!(all_k.equal(&want));
        assert_eq!(cache.layers[0].kv.as_ref().unwrap().0.size()[2], 6);
    }

    #[test]
    fn a_cache_at_a_column_writes_there_and_returns_the_whole_buffers() {
        tch::manual_seed(3);
        let mut prefilled = KvCache::preallocated(1, 5);
        let (k, v) = positions(2, 3);
        let _ = prefilled.layers_mut()[0].append(k.copy(), v.copy());
        let buffers = prefilled.into_buffers().unwrap();
        let column = Tensor::from_slice(&[3i64]);
        let (k2, v2) = positions(2, 1);
        let (all_k, all_v) =
            KvCache::at_columns(&buffers, &column).layers_mut()[0].append(k2.copy(), v2.copy());
        // The buffers themselves, written in place: positions 0..3, the new one at 3, 4 zero.
        assert_eq!(all_k.data_ptr(), buffers[0].0.data_ptr());
        let written = Tensor::cat(
            &[
                k,
                k2,
                Tensor::zeros([2, 2, 1, 4], (Kind::Float, Device::Cpu)),
            ],
            2,
        );
        assert!(all_k.equal(&written) && buffers[0].0.equal(&written));
        assert!(all_v.narrow(2, 3, 1).equal(&v2));
    }

    #[test]
    #[should_panic(expected = "differentiated pass needs KvCache::new")]
    fn a_preallocated_cache_refuses_keys_with_a_gradient() {
        let (k, v) = positions(1, 1);
        let _ = KvCache::preallocated(1, 4).layers_mut()[0].append(k.set_requires_grad(true), v);
    }
}
