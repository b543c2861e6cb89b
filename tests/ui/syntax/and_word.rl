fn f(a: Mask[B], b: Mask[B]) -> Mask[B] {
  a and b //~ E0111
}
