//! Verifier settings out of range: no workers, empty batches, no time, a limit below zero, a
//! timeout without a unit and an unknown error policy.

verifier a = program("python3", "answer.py", workers: 0)  //~ E1002
verifier b = program("python3", "answer.py", batch: 0)  //~ E1002
verifier c = program("python3", "answer.py", timeout: 0s)  //~ E1002
verifier d = program("python3", "answer.py", memory: -1)  //~ E1002
verifier e = program("python3", "answer.py", timeout: 10)  //~ E1002
verifier f = program("python3", "answer.py", on_error: retry)  //~ E1002
verifier g = program("python3", "answer.py", cpu: 0s, processes: 0)  //~ E1002 E1002
