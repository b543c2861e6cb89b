//! The α–β model of collectives: a message of `m` bytes over a link costs `α + m/β`. Ring
//! algorithms send `n−1` (or `2(n−1)`) chunks of `m/n`; trees send `⌈log₂ n⌉` (or twice that)
//! messages of the whole (pipelined) payload. NCCL picks the faster, and so does
//! [`all_reduce`].

use super::Link;

fn log2_ceil(n: u32) -> f64 {
    f64::from(n.max(1)).log2().ceil()
}

/// Ring all-reduce of `bytes` on each of `n` ranks: reduce-scatter then all-gather.
pub fn ring_all_reduce(bytes: f64, n: u32, link: Link) -> f64 {
    if n <= 1 {
        return 0.0;
    }
    let n_f = f64::from(n);
    2.0 * (n_f - 1.0) * link.latency + 2.0 * (n_f - 1.0) / n_f * bytes / link.bandwidth
}

/// Tree all-reduce (reduce up a binary tree, broadcast down), pipelined so each level moves the
/// payload once at full bandwidth.
pub fn tree_all_reduce(bytes: f64, n: u32, link: Link) -> f64 {
    if n <= 1 {
        return 0.0;
    }
    2.0 * log2_ceil(n) * link.latency + 2.0 * bytes / link.bandwidth
}

/// The faster of ring and tree: trees win on small messages (latency-bound), rings on large ones.
pub fn all_reduce(bytes: f64, n: u32, link: Link) -> f64 {
    ring_all_reduce(bytes, n, link).min(tree_all_reduce(bytes, n, link))
}

/// Ring all-gather where each of `n` ranks contributes `bytes` (reduce-scatter costs the same).
pub fn all_gather(bytes: f64, n: u32, link: Link) -> f64 {
    if n <= 1 {
        return 0.0;
    }
    let n_f = f64::from(n);
    (n_f - 1.0) * link.latency + (n_f - 1.0) * bytes / link.bandwidth
}

/// One point-to-point message.
pub fn send(bytes: f64, link: Link) -> f64 {
    link.latency + bytes / link.bandwidth
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINK: Link = Link {
        latency: 10e-6,
        bandwidth: 100e9,
    };

    #[test]
    fn tree_wins_small_ring_wins_large() {
        let (small, large) = (1e3, 1e10);
        assert!(tree_all_reduce(small, 64, LINK) < ring_all_reduce(small, 64, LINK));
        assert!(ring_all_reduce(large, 64, LINK) < tree_all_reduce(large, 64, LINK));
        assert_eq!(
            all_reduce(large, 64, LINK),
            ring_all_reduce(large, 64, LINK)
        );
    }

    #[test]
    fn ring_all_reduce_approaches_twice_the_payload() {
        // 2(n−1)/n · m/β → 2m/β for many ranks; nothing to do on one rank.
        let t = ring_all_reduce(1e9, 1024, LINK);
        assert!((t - 2.0 * 1e9 / 100e9).abs() < 0.03, "{t}");
        assert_eq!(all_reduce(1e9, 1, LINK), 0.0);
        assert_eq!(all_gather(1e9, 1, LINK), 0.0);
    }
}
