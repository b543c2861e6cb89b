struct Sample {
  tokens: Tokens[B, T],
  score //~ E0101
}
