//! `update` loss closures as the kernel plan lowering makes of them: through one fused kernel
//! (its loss and its gradient w.r.t. the model's output, seeding the model's backward pass) and
//! run eagerly with autograd, each against the reference evaluator with autograd — the loss and
//! every parameter's gradient of a small model, within 1e-4 relative — on the GRPO example's
//! closure, a PPO closure with a KL penalty (and a batch whitening inside), and a critic's value
//! loss. A closure the fused kernels cannot differentiate (a scan on the way to `logp`) is
//! refused by the fused path, and a job with it still trains, eagerly.

mod common;

use std::path::PathBuf;

use common::kernels::closure_kernel;
use rlc_check::Checked;
use rlc_kernel::KernelError;
use rlc_reference::{Bound, Evaluator};
use rlc_runtime::exec::{self, RunOptions};
use rlc_runtime::kernels::eager::Eager;
use rlc_runtime::kernels::fused::{Fused, FusedError, seed_backward};
use rlc_syntax::ast::{Block, Closure, Expr, ExprKind, ItemKind, StmtKind};
use tch::nn::{self, Module};
use tch::{Device, Kind, Tensor};

/// A small GRPO job (as `runtime/tests/exec.rs`'s); `LOSS` is the policy's loss closure body.
const PROGRAM: &str = r#"
import std.algo { grpo_advantage, ppo_clip, kl_k1, kl_k3, token_mean, whiten, remax_returns, value_loss }
import std.models { tiny_gpt }

dataset reverse = task(kind: "reverse_digits", digits: 3)
cluster local = cpu(devices: 1)

model policy: CausalLM {
  arch  = tiny_gpt(layers: 1, hidden: 32, heads: 2, vocab: 16, max_len: 16)
  init  = random(seed: 3)
  optim = adamw(lr: 1e-2, warmup: 1)
}
model reference: CausalLM = frozen(policy)

place policy    on local[0..1] with dp(1)
place reference on local[0..1] with dp(1)

fn exact(resp: Tokens[B, T], target: Tokens[B, T], mask: Mask[B, T]) -> f32[B] {
  mean(f32(resp == target), over: T, mask: mask)
}

pipeline train(steps = STEPS, prompts = 4, group = 4) {
  loop step in 0..steps {
    let rollout  = policy.generate(reverse.sample(prompts), n: group, max_new: 4, temperature: 1.0)
    let old_logp = policy.logprobs(rollout)
    let ref_logp = reference.logprobs(rollout)
    let reward   = exact(rollout.response, rollout.target, rollout.mask)
    let adv      = grpo_advantage(reward, rollout.group, rollout.mask)
    policy.update(rollout, epochs: 1, minibatch: 8) { logp ->
      LOSS
    }
    log { reward: mean(reward) }
    every STEPS steps { checkpoint policy }
  }
}
"#;

/// A PPO loss with a KL penalty to the reference, the advantage whitened inside the closure.
const PPO_KL: &str = "token_mean(ppo_clip(logp, old_logp, whiten(adv, rollout.mask), eps: 0.2) + 0.1 * kl_k1(logp, ref_logp), rollout.mask)";

/// A loss through a scan of `logp`: the fused kernels have no derivative of scans.
const THROUGH_A_SCAN: &str = "token_mean(ppo_clip(logp, old_logp, adv, eps: 0.2), rollout.mask) + 0.01 * token_mean(remax_returns(logp, rollout.mask), rollout.mask)";

fn program(loss: &str, steps: u64) -> String {
    PROGRAM
        .replace("LOSS", loss)
        .replace("STEPS", &steps.to_string())
}

/// The root module's `update` closures, in source order.
fn closures(checked: &Checked) -> Vec<Closure> {
    fn walk(block: &Block, out: &mut Vec<Closure>) {
        for stmt in &block.stmts {
            match &stmt.kind {
                StmtKind::Let { value, .. } | StmtKind::Expr(value) => expr(value, out),
                StmtKind::Loop { body, .. } | StmtKind::Every { body, .. } => walk(body, out),
                _ => {}
            }
        }
    }
    fn expr(e: &Expr, out: &mut Vec<Closure>) {
        if let ExprKind::Call {
            closure: Some(c), ..
        } = &e.kind
        {
            out.push(c.clone());
        }
    }
    let mut out = Vec::new();
    for item in &checked.modules.get(0).ast.items {
        if let ItemKind::Pipeline(p) = &item.kind {
            walk(&p.body, &mut out);
        }
    }
    out
}

const B: i64 = 12;
const T: i64 = 5;
const VOCAB: i64 = 16;

/// A token model: embedding, a tanh layer, then log-probabilities of the given tokens (or a
/// value per token).
struct Model {
    vs: nn::VarStore,
    embed: nn::Embedding,
    hidden: nn::Linear,
    head: nn::Linear,
}

impl Model {
    fn new(out: i64) -> Model {
        tch::manual_seed(5);
        let vs = nn::VarStore::new(Device::Cpu);
        let root = vs.root();
        let embed = nn::embedding(&root / "embed", VOCAB, 8, Default::default());
        let hidden = nn::linear(&root / "hidden", 8, 8, Default::default());
        let head = nn::linear(&root / "head", 8, out, Default::default());
        Model {
            vs,
            embed,
            hidden,
            head,
        }
    }

    fn features(&self, tokens: &Tensor) -> Tensor {
        self.hidden.forward(&self.embed.forward(tokens)).tanh()
    }

    /// `[B, T]` log-probabilities of `tokens` under a distribution computed from them.
    fn logprobs(&self, tokens: &Tensor) -> Tensor {
        self.head
            .forward(&self.features(tokens))
            .log_softmax(-1, Kind::Float)
            .gather(2, &tokens.unsqueeze(-1), false)
            .squeeze_dim(-1)
    }

    fn values(&self, tokens: &Tensor) -> Tensor {
        self.head.forward(&self.features(tokens)).squeeze_dim(-1)
    }

    /// Every parameter's gradient, by name.
    fn grads(&self) -> Vec<(String, Tensor)> {
        let mut v: Vec<(String, Tensor)> = self
            .vs
            .variables()
            .into_iter()
            .map(|(n, t)| (n, t.grad().copy()))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    fn zero_grad(&self) {
        for (_, mut t) in self.vs.variables() {
            t.zero_grad();
        }
    }
}

/// The rollout record and the captured tensors of the test programs' closures.
fn captures() -> (Tensor, Vec<(&'static str, Bound)>) {
    tch::manual_seed(9);
    let response = Tensor::randint(VOCAB, [B, T], (Kind::Int64, Device::Cpu));
    // Row 0 empty, row 1 full, responses of varying length elsewhere.
    let lengths: Vec<i64> = (0..B).map(|i| [0, T, 3, 1, 4, 2][i as usize % 6]).collect();
    let lengths = Tensor::from_slice(&lengths).unsqueeze(1);
    let mask = Tensor::arange(T, (Kind::Int64, Device::Cpu))
        .unsqueeze(0)
        .lt_tensor(&lengths);
    let next = mask.narrow(1, 1, T - 1).constant_pad_nd([0, 1]);
    let last = mask.logical_and(&next.logical_not());
    let group = Tensor::arange(B, (Kind::Int64, Device::Cpu)).floor_divide_scalar(4);
    let rollout = Bound::Record(vec![
        (
            "prompt".into(),
            Tensor::randint(VOCAB, [B, 3], (Kind::Int64, Device::Cpu)),
        ),
        ("response".into(), response.shallow_clone()),
        ("target".into(), response.flip([1])),
        ("mask".into(), mask.shallow_clone()),
        ("last".into(), last),
        ("group".into(), group),
    ]);
    let noise = || Tensor::randn([B, T], (Kind::Float, Device::Cpu));
    let old = Model::new(VOCAB).logprobs(&response).detach() + 0.3 * noise();
    let reference = &old + 0.2 * noise();
    let adv = noise() * mask.to_kind(Kind::Float);
    let scope = vec![
        ("rollout", rollout),
        ("old_logp", Bound::Tensor(old)),
        ("ref_logp", Bound::Tensor(reference)),
        ("adv", Bound::Tensor(adv)),
    ];
    (response, scope)
}

fn relative(a: &Tensor, b: &Tensor) -> f64 {
    let scale = b.abs().max().double_value(&[]).max(1e-12);
    (a - b).abs().max().double_value(&[]) / scale
}

/// The loss and the parameters' gradients of `body` on `model`'s output, once through the
/// reference evaluator with autograd and once through the fused kernel, must agree.
fn fused_matches_autograd(checked: &Checked, body: &Block, param: &str, critic: bool) {
    let model = Model::new(if critic { 1 } else { VOCAB });
    let (tokens, captures) = captures();
    let output = || {
        if critic {
            model.values(&tokens)
        } else {
            model.logprobs(&tokens)
        }
    };
    let scope = |out: &Tensor| {
        let mut s = vec![(param, Bound::Tensor(out.shallow_clone()))];
        s.extend(captures.iter().map(|(n, b)| (*n, b.shallow())));
        s
    };

    model.zero_grad();
    let out = output();
    let loss = Evaluator::new(&checked.modules)
        .eval_block(body, &scope(&out))
        .expect("the reference evaluates the closure");
    loss.backward();
    let expected = model.grads();
    let expected_loss = loss.double_value(&[]);

    model.zero_grad();
    let out = output();
    let kernel = closure_kernel(checked, body, &scope(&out)).expect("the closure lowers");
    let fused = Fused::with_gradient(&kernel, param).expect("the closure fuses");
    let result = fused.run_scope(&scope(&out), 1).expect("the kernel runs");
    assert_eq!(result.len(), 2, "the loss and its gradient");
    let fused_loss = result[0].double_value(&[]);
    seed_backward(&out, &result[1], 1.0).expect("backward");
    let got = model.grads();

    let loss_err = (fused_loss - expected_loss).abs() / expected_loss.abs().max(1e-12);
    assert!(
        loss_err < 1e-4,
        "loss {fused_loss} vs {expected_loss} ({loss_err:e})"
    );
    assert!(
        expected
            .iter()
            .any(|(_, g)| g.abs().max().double_value(&[]) > 0.0)
    );
    for ((name, e), (_, g)) in expected.iter().zip(&got) {
        let err = relative(g, e);
        assert!(err < 1e-4, "gradient of `{name}`: {err:e} relative");
    }

    // The same kernel run eagerly, with autograd (the path off the CPU, or without a
    // derivative rule): the same loss and gradients.
    model.zero_grad();
    let out = output();
    let loss = Eager::default()
        .run_scope(&kernel, &scope(&out), Device::Cpu)
        .expect("the kernel runs eagerly")
        .remove(0);
    let eager_loss = loss.double_value(&[]);
    loss.backward();
    let got = model.grads();
    let loss_err = (eager_loss - expected_loss).abs() / expected_loss.abs().max(1e-12);
    assert!(
        loss_err < 1e-4,
        "eager loss {eager_loss} vs {expected_loss}"
    );
    for ((name, e), (_, g)) in expected.iter().zip(&got) {
        let err = relative(g, e);
        assert!(err < 1e-4, "eager gradient of `{name}`: {err:e} relative");
    }
}

#[test]
fn the_grpo_example_closure_gives_autograds_loss_and_gradients() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../examples/grpo_digits_by_hand.rl"
    );
    let source = std::fs::read_to_string(path).expect("the GRPO example");
    let checked = common::checked("grpo_digits_by_hand.rl", &source);
    let closure = &closures(&checked)[0];
    fused_matches_autograd(&checked, &closure.body, &closure.params[0].name, false);
}

#[test]
fn a_ppo_closure_with_kl_gives_autograds_loss_and_gradients() {
    let checked = common::checked("ppo_kl.rl", &program(PPO_KL, 1));
    let closure = &closures(&checked)[0];
    fused_matches_autograd(&checked, &closure.body, &closure.params[0].name, false);
}

#[test]
fn a_critics_value_loss_gives_autograds_loss_and_gradients() {
    // The critic's closure in the policy's place: the parameter is the model's value per
    // token, the old values and returns are stood in for by two captured tensors.
    let critic = "token_mean(value_loss(logp, old_logp, ref_logp, clip: 0.5), rollout.mask)";
    let checked = common::checked("critic.rl", &program(critic, 1));
    let closure = &closures(&checked)[0];
    fused_matches_autograd(&checked, &closure.body, &closure.params[0].name, true);
}

/// Trains the test job with `loss` for two steps; the policy's weights after each.
fn train(loss: &str, name: &str) -> [Vec<(String, Tensor)>; 2] {
    let dir = std::env::temp_dir().join(format!("rlc-fused-loss-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let source = program(loss, 2).replace("every 2 steps", "every 1 steps");
    let checked = common::checked("job.rl", &source);
    let plan = rlc_plan::lower::lower(&checked).expect("the test program lowers");
    let options = RunOptions {
        run_dir: dir.clone(),
        source_dir: PathBuf::from("."),
        seed: 11,
        resume: false,
        progress: false,
        stop_after: None,
        threads: Some(1),
        device: rlc_runtime::device::DeviceRequest::Cpu,
        trace: false,
        verify_in_place: false,
    };
    exec::run(&plan, &options).unwrap_or_else(|e| panic!("{name}: {e}"));
    let weights = |step| {
        let ckpt = rlc_runtime::checkpoint::step_dir(&dir.join("checkpoints/policy"), step);
        rlc_runtime::checkpoint::load(&ckpt)
            .expect("checkpoint")
            .weights
    };
    [weights(1), weights(2)]
}

fn moved(a: &[(String, Tensor)], b: &[(String, Tensor)]) -> f64 {
    a.iter()
        .zip(b)
        .map(|((na, x), (nb, y))| {
            assert_eq!(na, nb);
            assert!(
                y.isfinite().all().int64_value(&[]) == 1,
                "`{nb}` is not finite"
            );
            (x - y).abs().max().double_value(&[])
        })
        .fold(0.0, f64::max)
}

#[test]
fn a_closure_the_fused_kernels_cannot_differentiate_trains_eagerly() {
    let checked = common::checked("scan.rl", &program(THROUGH_A_SCAN, 2));
    let closure = &closures(&checked)[0];
    let (tokens, captures) = captures();
    let logp = Model::new(VOCAB).logprobs(&tokens);
    let mut scope = vec![("logp", Bound::Tensor(logp))];
    scope.extend(captures.iter().map(|(n, b)| (*n, b.shallow())));
    let kernel = closure_kernel(&checked, &closure.body, &scope).expect("it lowers");
    let refused = Fused::with_gradient(&kernel, "logp");
    assert!(
        matches!(
            refused,
            Err(FusedError::Kernel(KernelError::NoDerivative(_)))
        ),
        "a derivative through a scan is not the fused path's"
    );
    let [first, second] = train(THROUGH_A_SCAN, "scan");
    let step = moved(&first, &second);
    assert!(step > 1e-4, "the policy did not train ({step})");
    // The same job with a closure the fused path takes trains too, and the scan's term
    // (run eagerly, with autograd) made a difference.
    let [fused_first, fused_second] = train(PPO_KL, "fused");
    let step = moved(&fused_first, &fused_second);
    assert!(
        step > 1e-4,
        "the policy did not train through the fused loss ({step})"
    );
    assert!(moved(&second, &fused_second) > 0.0);
}
