fn both(a: Mask[B], b: Mask[B]) -> Mask[B] {
  a & b //~ E0101
}
