// Errors in several items are all reported in one run.
model policy: CausalLM {
  arch: tiny_gpt(layers: 2) //~ E0103
}

fn f(x: f32[B]) -> f32[B] {
  let y = x; //~ E0110
  y
}

place policy.train on local[0..2] with ddp(2) //~ E0119

fn ok(x: f32[B]) -> f32[B] {
  x
}

fn g(x: f32[B]) -> f32[B] {
  where(x = 1.0, x, 0.0) //~ E0104
}
