import "./lib/rewards.rl as rewards //~ E0106
