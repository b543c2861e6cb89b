cluster big {
  nodes: 16 //~ E0103
}
