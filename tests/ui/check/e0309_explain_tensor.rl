/// 1 for each response token that matches the target, averaged over the response.
fn exact(resp: Tensor[B, T], target: Tokens[B, T], mask: Mask[B, T]) -> f32[B] {  //~ E0309
  mean(where(mask, f32(resp == target), 0.0), over: T)
}
