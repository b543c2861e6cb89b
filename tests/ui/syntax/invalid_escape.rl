dataset prompts = jsonl("data\prompts.jsonl", field: "prompt") //~ E0114
