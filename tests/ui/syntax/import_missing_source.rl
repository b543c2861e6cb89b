import { grpo_advantage } //~ E0101
