import std.algo.{grpo_advantage} //~ E0101
