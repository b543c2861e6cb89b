/// The fraction of response tokens that match the target.
fn exact(resp: Tokens[B, T], target: Tokens[B, T], mask: Mask[B, T]) -> f32[B] {
  let hits = where(mask, f32(resp == target), 0.0)
  let n = count(mask, over: T)  //~ W0202
  sum(hits, over: T)
}
