import std.algo { token_mean }

/// The per-token loss averaged over every real token of the batch.
fn loss(per_token: f32[B, T], mask: Mask[B, T]) -> f32 {
  token_mean(per_token, mask)
}
