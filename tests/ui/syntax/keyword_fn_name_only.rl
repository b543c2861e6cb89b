// A keyword that names an item is reported where it is declared, and parsing goes on.
fn place(x: f32[B]) -> f32[B] { //~ E0105
  x
}

fn ok(x: f32[B]) -> f32[B] {
  x
}
