//! `generate(…, env: e, max_turns: K, max_obs: M)`: a multi-turn rollout against an
//! environment's worker pool (`docs/environments.md`). The decoder (`generate::generate_turns`)
//! works on token ids; a [`Session`] turns each turn into the protocol's items (text decoded with
//! the dataset's tokenizer or the task alphabet, the episode so far, the row's kept fields),
//! asks the pool, and turns the answers into observation tokens, applying `on_error`.

use std::collections::BTreeMap;

use rlc_plan::model::{EnvTurns, Environment, OnError, Op, OpKind};
use tch::Tensor;

use super::error::{Result, RunError};
use super::rank::Rank;
use super::roles::Model;
use super::rollout::{self, Sampling};
use super::values::Rollout;
use super::verify::{decode_text, row_fields};
use crate::collectives::ReduceOp;
use crate::data::{Sample, Source, tokens};
use crate::generate::{self, GenerateError, Reply, TurnsConfig};
use crate::hf::HfTokenizer;
use crate::verify::Pool;
use crate::verify::environment::{Exchange, Observation, StepItem, StepResult};

/// The metric that counts an environment's failed episodes in a step (over all data ranks).
pub fn failures_key(environment: &str) -> String {
    format!("environment/{environment}/failures")
}

/// A turn's reward and the observation that follows it (text and ids; `None`: the episode is
/// over), or why the environment's answer is a failure.
type Answer = std::result::Result<(f32, Option<(String, Vec<i64>)>), String>;

/// One generate op's episodes on one rank.
pub(super) struct Session<'a> {
    pub pool: &'a Pool,
    pub declaration: &'a Environment,
    pub source: &'a Source,
    pub tokenizer: Option<&'a HfTokenizer>,
    pub dataset: &'a str,
    pub max_turns: i64,
    pub max_obs: i64,
    pub vocab: i64,
    pub step: u64,
    /// This rank's first row in the step's batch (episode numbers count from it).
    pub first_episode: u64,
    /// Each row's prompt (text, ids) and kept fields.
    prompts: Vec<(String, Vec<i64>)>,
    fields: Vec<BTreeMap<String, String>>,
    history: Vec<Vec<Exchange>>,
    /// Each row's environment reward so far.
    pub rewards: Vec<f32>,
    /// Episodes ended by a failure (`on_error: zero`).
    pub failures: u64,
    /// The failure that stops the run (`on_error: fail`).
    pub failed: Option<RunError>,
}

impl<'a> Session<'a> {
    /// A session for the rows of `samples`, each drawn `n` times (rows of one prompt adjacent).
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        pool: &'a Pool,
        declaration: &'a Environment,
        source: &'a Source,
        tokenizer: Option<&'a HfTokenizer>,
        dataset: &'a str,
        samples: &[Sample],
        n: i64,
        (max_turns, max_obs, vocab): (i64, i64, i64),
        step: u64,
        first_episode: u64,
    ) -> Result<Session<'a>> {
        let mut prompts = Vec::new();
        let mut fields = Vec::new();
        for s in samples {
            let text = decode_text(tokenizer, dataset, &s.prompt)?;
            let f = row_fields(
                source,
                tokenizer,
                dataset,
                &declaration.fields,
                &s.target,
                s.row,
            )?;
            for _ in 0..n {
                prompts.push((text.clone(), s.prompt.clone()));
                fields.push(f.clone());
            }
        }
        let rows = prompts.len();
        Ok(Session {
            pool,
            declaration,
            source,
            tokenizer,
            dataset,
            max_turns,
            max_obs,
            vocab,
            step,
            first_episode,
            prompts,
            fields,
            history: vec![Vec::new(); rows],
            rewards: vec![0.0; rows],
            failures: 0,
            failed: None,
        })
    }

    fn encode(&self, text: &str) -> std::result::Result<Vec<i64>, String> {
        match self.tokenizer {
            Some(t) => t
                .encode_plain(text)
                .map_err(|e| format!("cannot encode the observation: {e}")),
            None => tokens::encode(text).map_err(|e| {
                format!("the observation is not in the task alphabet (digits, `+`, `=`): {e}")
            }),
        }
    }

    /// The text of a turn's tokens, up to its end-of-answer token.
    fn response_text(&self, ids: &[i64]) -> std::result::Result<String, GenerateError> {
        let end = self
            .source
            .specials()
            .eos
            .and_then(|eos| ids.iter().position(|&t| t == eos))
            .unwrap_or(ids.len());
        decode_text(self.tokenizer, self.dataset, &ids[..end])
            .map_err(|e| GenerateError::InvalidSetting(e.to_string()))
    }

    /// One answer → the observation's ids (the episode goes on) or `None` (done), the reward
    /// added; or why the answer is a failure.
    fn answer(&mut self, turn: i64, result: std::result::Result<StepResult, String>) -> Answer {
        let (reward, observation, done) = result?.read()?;
        if done || turn + 1 == self.max_turns {
            // No observation follows the last turn.
            return Ok((reward, None));
        }
        let (text, ids) = match observation {
            Observation::Text(text) => {
                let ids = self.encode(&text)?;
                (text, ids)
            }
            Observation::Ids(ids) => {
                if let Some(&id) = ids.iter().find(|&&id| !(0..self.vocab).contains(&id)) {
                    return Err(format!(
                        "observation token {id} is outside the vocabulary of {}",
                        self.vocab
                    ));
                }
                let text =
                    decode_text(self.tokenizer, self.dataset, &ids).map_err(|e| e.to_string())?;
                (text, ids)
            }
            Observation::None => unreachable!("read() refuses an observation-less answer"),
        };
        if ids.len() as i64 > self.max_obs {
            return Err(format!(
                "the observation has {} tokens, more than max_obs {}",
                ids.len(),
                self.max_obs
            ));
        }
        Ok((reward, Some((text, ids))))
    }
}

impl generate::Environment for Session<'_> {
    fn step(
        &mut self,
        turn: i64,
        rows: &[i64],
        responses: &[Vec<i64>],
    ) -> std::result::Result<Vec<Reply>, GenerateError> {
        let mut items = Vec::with_capacity(rows.len());
        for (&r, response) in rows.iter().zip(responses) {
            let r = r as usize;
            items.push(StepItem {
                episode: self.first_episode + r as u64,
                turn: turn as u64,
                prompt: self.prompts[r].0.clone(),
                prompt_ids: self.prompts[r].1.clone(),
                history: self.history[r].clone(),
                response: self.response_text(response)?,
                response_ids: response.clone(),
                fields: self.fields[r].clone(),
            });
        }
        let results = self.pool.call::<StepItem, StepResult>(&items);
        let mut replies = Vec::with_capacity(rows.len());
        for ((&r, result), item) in rows.iter().zip(results).zip(items) {
            let r = r as usize;
            match self.answer(turn, result) {
                Ok((reward, next)) => {
                    self.rewards[r] += reward;
                    match next {
                        Some((text, ids)) => {
                            self.history[r].push(Exchange {
                                response: item.response,
                                response_ids: item.response_ids,
                                observation: text,
                                observation_ids: ids.clone(),
                            });
                            replies.push(Reply::Observe(ids));
                        }
                        None => replies.push(Reply::Done),
                    }
                }
                Err(cause) => match self.declaration.on_error {
                    OnError::Fail => {
                        let sample = self.first_episode + r as u64;
                        let error = RunError::Environment {
                            environment: self.declaration.name.clone(),
                            step: self.step,
                            sample,
                            turn: turn as u64,
                            cause,
                        };
                        let message = error.to_string();
                        self.failed = Some(error);
                        return Err(GenerateError::Environment(message));
                    }
                    OnError::Zero => {
                        self.failures += 1;
                        self.rewards[r] = 0.0;
                        replies.push(Reply::Done);
                    }
                },
            }
        }
        Ok(replies)
    }
}

impl Rank<'_> {
    /// This rank's rows of generate op `op` as episodes against `env`'s environment.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn env_rollout(
        &mut self,
        op: &Op,
        step: u64,
        env: &EnvTurns,
        samples: &[Sample],
        first: i64,
        total: i64,
        how: &Sampling,
        dataset: &str,
    ) -> Result<Rollout> {
        let plan = self.job.plan;
        let OpKind::Generate { role, .. } = &op.kind else {
            return Err(RunError::Plan(format!(
                "`{}` is not a generate op",
                op.label
            )));
        };
        let name = &env.environment;
        let declaration = plan
            .environments
            .iter()
            .find(|e| e.name == *name)
            .ok_or_else(|| RunError::Plan(format!("no environment `{name}`")))?;
        let source = self.job.sources.get(dataset).ok_or_else(|| {
            RunError::Plan(format!("`{}` reads no dataset `{dataset}`", op.label))
        })?;
        let tokenizer = self.job.tokenizers.get(dataset);
        let int = |v: u64, what: &str| {
            i64::try_from(v)
                .ok()
                .filter(|&v| v >= 1)
                .ok_or_else(|| RunError::Plan(format!("`{}`: {what} is {v}", op.label)))
        };
        let turns = TurnsConfig {
            max_turns: int(env.max_turns, "max_turns")?,
            max_obs: int(env.max_obs, "max_obs")?,
        };
        if !self.environments.contains_key(name) {
            let pool = Pool::start_environment(declaration, &self.source_dir)
                .map_err(|message| RunError::VerifierStart { message })?;
            self.environments.insert(name.clone(), pool);
        }
        let state = self.role_in(role, op)?;
        if !matches!(state.model, Model::Whole(_)) {
            return Err(RunError::Unsupported(format!(
                "`{}`: a multi-turn generate (env: {name}) under tensor, fully sharded or \
                 pipeline parallelism (place its role with dp only)",
                op.label
            )));
        }
        let model = state.decode();
        let mut session = Session::new(
            &self.environments[name],
            declaration,
            source,
            tokenizer,
            dataset,
            samples,
            how.n,
            (turns.max_turns, turns.max_obs, model.config().vocab),
            step,
            (first * how.n) as u64,
        )?;
        let made = rollout::env_rollout(
            model,
            samples,
            first,
            total,
            how,
            turns,
            &mut session,
            self.device,
        );
        let mut rollout = match (made, session.failed.take()) {
            (_, Some(failed)) => return Err(failed),
            (made, None) => made?,
        };
        rollout.fields.push((
            "env_reward".into(),
            Tensor::from_slice(&session.rewards).to_device(self.device),
        ));
        let failures = session.failures as f64;
        let failures = self.all_reduce(op, &Tensor::from(failures), ReduceOp::Sum)?;
        let (key, failed) = (failures_key(name), failures.double_value(&[]));
        match self.env_failures.iter_mut().find(|(k, _)| *k == key) {
            Some((_, total)) => *total += failed,
            None => self.env_failures.push((key, failed)),
        }
        Ok(rollout)
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use rlc_plan::model::{VerifierEndpoint, WorkerLimits};
    use tch::{Device, Kind, nn};

    use super::*;
    use crate::data::Specials;
    use crate::generate::SamplingConfig;
    use crate::model::{Heads, ModelConfig, Transformer};
    use crate::rng::Rng;

    /// A scripted environment: logs every item it receives (one JSON line each) to the file
    /// named by its first argument, and answers by `mode`, its second.
    const ENV: &str = r#"
import json, sys
log, mode = sys.argv[1], sys.argv[2]
for line in sys.stdin:
    req = json.loads(line)
    results = []
    for it in req["items"]:
        with open(log, "a") as f:
            f.write(json.dumps(it) + "\n")
        ep, turn = it["episode"], it["turn"]
        if mode == "echo":
            # Text observations in the task alphabet; rows with an odd episode stop after turn 1.
            results.append({"observation": "=" + str(turn + 1), "reward": 0.5,
                            "done": ep % 2 == 1 and turn == 1})
        elif mode == "long":
            # Episode 1's first observation has 7 tokens; the others' 1.
            obs = "1234567" if ep == 1 and turn == 0 else "9"
            results.append({"observation": obs, "reward": 1.0})
        elif mode == "ids":
            results.append({"observation_ids": [11, 7], "reward": 0.25})
    print(json.dumps({"id": req["id"], "results": results}), flush=True)
"#;

    struct Dir(PathBuf);

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn dir(name: &str) -> Dir {
        let d = std::env::temp_dir().join(format!("rlc-env-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("env.py"), ENV).unwrap();
        Dir(d)
    }

    fn declaration(dir: &Path, mode: &str, on_error: OnError) -> Environment {
        let log = dir.join("items.jsonl").to_string_lossy().into_owned();
        Environment {
            name: "calc".into(),
            endpoint: VerifierEndpoint::Program {
                command: vec!["python3".into(), "env.py".into(), log, mode.into()],
            },
            workers: 2,
            batch: 3,
            timeout_ms: 10_000,
            limits: WorkerLimits::default(),
            on_error,
            fields: vec!["answer".into()],
        }
    }

    /// The items the environment received, in the order it logged them.
    fn logged(dir: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(dir.join("items.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    struct Episodes {
        rollout: Rollout,
        rewards: Vec<f32>,
        failures: u64,
    }

    /// Two `add_numbers` prompts, two samples each, against `declaration`'s environment.
    fn play(
        declaration: &Environment,
        dir: &Path,
        turns: TurnsConfig,
        seed: u64,
    ) -> std::result::Result<Episodes, RunError> {
        let vs = nn::VarStore::new(Device::Cpu);
        let config = ModelConfig {
            vocab: tokens::VOCAB,
            ..ModelConfig::tiny()
        };
        let model = Transformer::new(&vs.root(), &config, Heads::POLICY, 31).unwrap();
        let source = Source::task("add_numbers", 2).unwrap();
        let Source::Task(task) = &source else {
            unreachable!()
        };
        let mut rng = Rng::new(4);
        let samples: Vec<Sample> = (0..2).map(|_| task.draw(&mut rng)).collect();
        let pool = Pool::start_environment(declaration, dir).unwrap();
        let how = Sampling {
            n: 2,
            max_new: 4,
            sampling: SamplingConfig::at_temperature(2.0),
            seed,
            specials: Specials::TASK,
        };
        let mut session = Session::new(
            &pool,
            declaration,
            &source,
            None,
            "sums",
            &samples,
            how.n,
            (turns.max_turns, turns.max_obs, tokens::VOCAB),
            7,
            0,
        )?;
        let made = rollout::env_rollout(
            &model,
            &samples,
            0,
            2,
            &how,
            turns,
            &mut session,
            Device::Cpu,
        );
        if let Some(failed) = session.failed.take() {
            return Err(failed);
        }
        Ok(Episodes {
            rollout: made?,
            rewards: session.rewards,
            failures: session.failures,
        })
    }

    fn rows(t: &Tensor) -> Vec<Vec<i64>> {
        Vec::<Vec<i64>>::try_from(t.to_kind(Kind::Int64)).unwrap()
    }

    const TURNS: TurnsConfig = TurnsConfig {
        max_turns: 3,
        max_obs: 3,
    };

    /// The tokens trained on (the response at the mask's positions) are the tokens the policy
    /// sampled, which the environment received as `response_ids`; their text, which drops BOS
    /// and padding and shows the spare token as `?`, would not encode back to them.
    /// Observations are the environment's text in the task alphabet, right-aligned in their
    /// slots and outside the mask.
    #[test]
    fn the_ids_trained_on_are_the_ids_sampled_and_observations_are_masked_out() {
        let d = dir("echo");
        let env = declaration(&d.0, "echo", OnError::Fail);
        let e = play(&env, &d.0, TURNS, 3).unwrap();
        let r = &e.rollout;
        let response = rows(r.field("response").unwrap());
        let mask = rows(r.field("mask").unwrap());
        let turn = rows(r.field("turn").unwrap());
        let attention = rows(&r.attention.narrow(1, r.prompt_len, r.response_len));
        assert_eq!(r.response_len, 3 * 4 + 2 * 3);
        let items = logged(&d.0);
        let mut reencoded_differs = false;
        for item in &items {
            let row = item["episode"].as_u64().unwrap() as usize;
            let k = item["turn"].as_u64().unwrap() as i64;
            let sent: Vec<i64> = serde_json::from_value(item["response_ids"].clone()).unwrap();
            let trained: Vec<i64> = (0..response[row].len())
                .filter(|&j| mask[row][j] != 0 && turn[row][j] == k)
                .map(|j| response[row][j])
                .collect();
            assert_eq!(sent, trained, "episode {row} turn {k}");
            let text = item["response"].as_str().unwrap();
            let upto_eos: Vec<i64> = sent
                .iter()
                .copied()
                .take_while(|&t| t != tokens::EOS)
                .collect();
            if tokens::encode(text).ok() != Some(upto_eos) {
                reencoded_differs = true;
            }
            assert_eq!(
                item["fields"]["answer"].as_str().unwrap().len(),
                3,
                "a 2-digit sum"
            );
            assert_eq!(item["history"].as_array().unwrap().len(), k as usize);
        }
        assert!(
            reencoded_differs,
            "some turn's text does not encode back to its ids (the test needs one)"
        );
        // Observation slot k of a row that went on holds `=` and the digit k + 1, right-aligned.
        for row in 0..4 {
            for k in 0..2usize {
                if e.rollout
                    .field("turns")
                    .map(|t| rows(&t.unsqueeze(1))[row][0])
                    .unwrap()
                    <= k as i64 + 1
                {
                    continue;
                }
                let start = k * 7 + 4;
                assert_eq!(
                    response[row][start..start + 3],
                    [tokens::PAD, tokens::EQUALS, k as i64 + 1]
                );
                assert_eq!(attention[row][start..start + 3], [0, 1, 1]);
                assert_eq!(mask[row][start..start + 3], [0, 0, 0]);
            }
        }
        // Odd episodes stop after turn 1: two turns of 0.5; the others play three.
        let turns: Vec<i64> = Vec::try_from(r.field("turns").unwrap()).unwrap();
        assert_eq!(turns, [3, 2, 3, 2]);
        assert_eq!(e.rewards, [1.5, 1.0, 1.5, 1.0]);
        assert_eq!(e.failures, 0);
        // The history the environment gets is the episode so far, ids as sampled.
        let last = items
            .iter()
            .find(|i| i["episode"] == 0 && i["turn"] == 2)
            .unwrap();
        assert_eq!(last["history"][1]["observation"], "=2");
        assert_eq!(
            last["history"][1]["observation_ids"],
            serde_json::json!([tokens::EQUALS, 2])
        );
        // The same seed plays the same episodes.
        let again = play(&env, &d.0, TURNS, 3).unwrap();
        assert!(again.rollout.ids.equal(&r.ids));
    }

    #[test]
    fn observation_ids_are_used_as_given() {
        let d = dir("ids");
        let env = declaration(&d.0, "ids", OnError::Fail);
        let e = play(&env, &d.0, TURNS, 5).unwrap();
        let response = rows(e.rollout.field("response").unwrap());
        for row in &response {
            assert_eq!(row[4..7], [tokens::PAD, 11, 7]);
            assert_eq!(row[11..14], [tokens::PAD, 11, 7]);
        }
        assert_eq!(e.rewards, [0.75; 4]);
    }

    /// An observation longer than `max_obs`: `on_error: fail` stops the run naming the
    /// environment, the sample and the turn; `zero` ends that episode with reward 0, counted.
    #[test]
    fn an_observation_longer_than_max_obs_fails_or_ends_the_episode() {
        let d = dir("long");
        let fail = declaration(&d.0, "long", OnError::Fail);
        let e = play(&fail, &d.0, TURNS, 1).err().expect("an error");
        let message = e.to_string();
        assert!(
            matches!(
                &e,
                RunError::Environment { environment, sample: 1, turn: 0, .. } if environment == "calc"
            ),
            "{message}"
        );
        assert!(message.contains("more than max_obs 3"), "{message}");
        let zero = declaration(&d.0, "long", OnError::Zero);
        let e = play(&zero, &d.0, TURNS, 1).unwrap();
        let turns: Vec<i64> = Vec::try_from(e.rollout.field("turns").unwrap()).unwrap();
        assert_eq!(turns, [3, 1, 3, 3]);
        assert_eq!(e.rewards, [3.0, 0.0, 3.0, 3.0]);
        assert_eq!(e.failures, 1);
        // Nothing of episode 1 after its first turn.
        let attention = rows(&e.rollout.attention.narrow(
            1,
            e.rollout.prompt_len,
            e.rollout.response_len,
        ));
        assert!(attention[1][4..].iter().all(|&a| a == 0));
    }
}
