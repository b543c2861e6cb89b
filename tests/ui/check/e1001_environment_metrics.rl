//! An environment has no metrics (its rewards are summed into `env_reward`), and a typo'd
//! option gets the closest of an environment's options.

environment calc = program("python3", "calc.py", metrics: ["format"])  //~ E1001
environment web = http("http://127.0.0.1:8000/step", worker: 2)  //~ E1001
