// Non-ASCII text before the error must not shift the label: données, μ, 日本.
dataset d = jsonl("données/μ/日本.jsonl" field: "q") //~ E0101
