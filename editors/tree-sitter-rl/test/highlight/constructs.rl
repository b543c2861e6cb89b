/// A device.
// <- comment.documentation
pub let h100: Device = device(memory: 80GiB, flops: 4x)
// <- keyword
//      ^ variable
//            ^ type
//                     ^ function
//                            ^ variable.parameter
//                                    ^ number
//                                      ^ constant.builtin
//                                                   ^ error
model policy: CausalLM = frozen(base)
//            ^ type.builtin
place policy.train on big[0..8] with dp(2), micro(1)
//                 ^ keyword
//                         ^ operator
//                                   ^ keyword
//                                          ^ keyword
fn f(x: f32[B, T], ok: bool) -> f32[B] {
//      ^ type.builtin
//          ^ type
//                            ^ operator
  scan reverse over T { t -> emit x[t] && true }
//^ keyword
//     ^ keyword
//             ^ keyword
//                  ^ type
//                        ^ operator
//                           ^ keyword
//                                     ^ operator
//                                        ^ boolean
}
pipeline train(steps = 10) {
  loop step in 0..steps {
//     ^ variable
//          ^ keyword
    every 5 steps { log { reward: "x\n" } }
//          ^ keyword
//                  ^ keyword
//                        ^ property
//                                  ^ string.escape
  }
}
pipeline tune(actor: CausalLM, data: Dataset, reward: Fn, steps = 10) {
//                   ^ type.builtin
//                                   ^ type.builtin
//                                                    ^ type.builtin
  loop step in 0..steps { log { n: step } }
}
