//! Options a verifier does not have: a misspelt one, and a process limit on an HTTP server.

verifier answer = program("python3", "answer.py", wokers: 2)  //~ E1001
verifier rm = http("http://127.0.0.1:8000/score", workers: 4, memory: 1GiB)  //~ E1001
