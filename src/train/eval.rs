//! Looking at a trained agent: its learner read back from a checkpoint, exactly `N`
//! whole episodes run through the compiled programs of `programs::episodes` and their returns
//! summarised, and one episode played frame by frame; for a `.pod` env all on the device,
//! for a host env (`host::HostEnv`, as the Sebulba actors step it) with the policy on the
//! device and the env on the host.

use crate::array::{Array, Data};
use crate::elab::agent::PolicyFuncs;
use crate::elab::env::EnvFuncs;
use crate::host::{HostEnv, StepOut};
use crate::ir::Func;
use crate::ir::eval::eval_func;
use crate::lower::stablehlo::{lower_module, lower_module_donating};
use crate::programs::act::{Policy, act_program};
use crate::programs::episodes::{eval_chunk, eval_start, play_start, play_step};
use crate::programs::leaf_names;
use crate::resolve::Program;
use crate::runtime::{Buffer, Client, Executable};
use serde_json::{Value, json};

/// An episode without a time limit that runs this long is taken to never end.
pub const MAX_EPISODE_STEPS: u64 = 100_000;

/// One trained learner: its seed, and its arrays in the order the policy takes them.
pub struct Trained {
    pub seed: i64,
    pub learner: Vec<Array>,
}

/// The learners in a checkpoint's arrays, one per seed of its run: a `--seeds N` run's
/// arrays have a leading seed axis, seed `config.seed + i` at index `i`.
pub fn learners(arrays: &[(String, Array)], config: &Value, policy: &PolicyFuncs) -> Result<Vec<Trained>, String> {
    let seeds = config["seeds"].as_u64().unwrap_or(1) as usize;
    let first = config["seed"].as_i64().unwrap_or(0);
    let names = leaf_names(&policy.info.learner, "learner");
    let mut per_seed: Vec<Vec<Array>> = vec![vec![]; seeds];
    for (name, &v) in names.iter().zip(&policy.act.graph.params) {
        let want = policy.act.ty(v);
        let Some((_, a)) = arrays.iter().find(|(n, _)| n == name) else {
            return Err(format!(
                "the checkpoint has no array `{name}`, which agent `{}`'s learner has: was it trained with this agent?",
                policy.info.name
            ));
        };
        let mut shape = want.shape.clone();
        if seeds > 1 {
            shape.insert(0, seeds);
        }
        if a.dtype() != want.dtype || a.shape != shape {
            return Err(format!(
                "`{name}` in the checkpoint is `{}`, but agent `{}` has `{}`{}: was it trained with other `--set` values?",
                a.ty(),
                policy.info.name,
                crate::array::ArrayTy::new(want.dtype, shape),
                if seeds > 1 { format!(" ({seeds} seeds)") } else { String::new() }
            ));
        }
        let bytes = a.to_bytes();
        let chunk = bytes.len() / seeds;
        for (s, learner) in per_seed.iter_mut().enumerate() {
            let part = Array::from_bytes(want, &bytes[s * chunk..(s + 1) * chunk]).expect("checked shape");
            learner.push(part);
        }
    }
    Ok(per_seed.into_iter().enumerate().map(|(i, learner)| Trained { seed: first + i as i64, learner }).collect())
}

/// The returns and lengths of whole episodes, in the order they ended.
#[derive(Debug, Default)]
pub struct Episodes {
    pub returns: Vec<f64>,
    pub lengths: Vec<u64>,
}

/// The compiled evaluation programs for `envs` environments and chunks of `steps` steps.
pub struct Evaluator<'c> {
    client: &'c Client,
    start: Func,
    chunk: Executable,
    envs: usize,
    time_limit: Option<u64>,
    env: String,
}

impl<'c> Evaluator<'c> {
    pub fn new(
        client: &'c Client,
        prog: &Program,
        (policy, env): (&PolicyFuncs, &EnvFuncs),
        which: Policy,
        envs: usize,
        steps: usize,
    ) -> Result<Self, String> {
        let start = eval_start(prog, policy, env, envs);
        let chunk = eval_chunk(prog, policy, env, which, envs, steps);
        let donated = start.graph.results.len();
        let chunk = client.compile(&lower_module_donating(&chunk, 1, donated), 1).map_err(|e| e.to_string())?;
        let (time_limit, env) = (env.info.time_limit, env.info.name.clone());
        Ok(Evaluator { client, start, chunk, envs, time_limit, env })
    }

    /// Exactly `episodes` whole episodes with `learner`, from `key(seed)` (see [`Tally`]).
    pub fn run(&self, learner: &[Array], episodes: usize, seed: i64) -> Result<Episodes, String> {
        let err = |e: crate::runtime::RuntimeError| e.to_string();
        let b = self.envs;
        let upload = |a: &Array| self.client.upload(a, 0).map_err(err);
        let mut state: Vec<Buffer> =
            eval_func(&self.start, &[crate::io::seed_key(seed)]).iter().map(upload).collect::<Result<_, _>>()?;
        let learner: Vec<Buffer> = learner.iter().map(upload).collect::<Result<_, _>>()?;
        let mut tally = Tally::new(episodes, b, self.time_limit, &self.env);
        while !tally.finished() {
            tally.check_time()?;
            let args: Vec<&Buffer> = state.iter().chain(&learner).collect();
            let mut outs = self.chunk.execute(&args).map_err(err)?;
            let (rewards, dones) = match (outs[outs.len() - 2].download(), outs[outs.len() - 1].download()) {
                (Ok(Array { data: Data::F32(r), .. }), Ok(Array { data: Data::Bool(d), .. })) => (r, d),
                _ => return Err("the evaluation program gave no rewards".into()),
            };
            outs.truncate(outs.len() - 2);
            state = outs;
            for (r, d) in rewards.chunks(b).zip(dones.chunks(b)) {
                tally.step(r, d);
            }
        }
        Ok(tally.out)
    }
}

/// Counts exactly `N` whole episodes of `B` auto-resetting environments: environment `i`
/// contributes its first `quota(i)` episodes, the quotas adding up to `N`, so that no
/// episode is cut short and none is picked for being short.
struct Tally<'a> {
    episodes: usize,
    taken: Vec<usize>,
    ret: Vec<f64>,
    len: Vec<u64>,
    steps: u64,
    /// Steps after which the episodes are taken to never end, and the env's name.
    limit: u64,
    env: &'a str,
    out: Episodes,
}

impl<'a> Tally<'a> {
    fn new(episodes: usize, envs: usize, time_limit: Option<u64>, env: &'a str) -> Tally<'a> {
        let mut t = Tally {
            episodes,
            taken: vec![0; envs],
            ret: vec![0.0; envs],
            len: vec![0; envs],
            steps: 0,
            limit: 0,
            env,
            out: Episodes::default(),
        };
        t.limit = time_limit.unwrap_or(MAX_EPISODE_STEPS) * t.quota(0) as u64;
        t
    }

    fn quota(&self, i: usize) -> usize {
        let b = self.taken.len();
        self.episodes / b + usize::from(i < self.episodes % b)
    }

    fn finished(&self) -> bool {
        self.out.returns.len() >= self.episodes
    }

    /// One step of every environment: its reward and whether its episode ended.
    fn step(&mut self, rewards: &[f32], dones: &[bool]) {
        self.steps += 1;
        for (i, (&r, &d)) in rewards.iter().zip(dones).enumerate() {
            if self.taken[i] == self.quota(i) {
                continue;
            }
            self.ret[i] += f64::from(r);
            self.len[i] += 1;
            if d {
                self.out.returns.push(std::mem::take(&mut self.ret[i]));
                self.out.lengths.push(std::mem::take(&mut self.len[i]));
                self.taken[i] += 1;
            }
        }
    }

    /// An error once the episodes have run longer than any should.
    fn check_time(&self) -> Result<(), String> {
        if self.steps <= self.limit {
            return Ok(());
        }
        let left = self.episodes - self.out.returns.len();
        Err(format!(
            "{left} of {} episodes had not ended after {} steps, and env `{}` has no `time_limit`",
            self.episodes, self.steps, self.env
        ))
    }
}

/// The distribution of episode returns.
#[derive(Debug)]
pub struct Summary {
    pub episodes: usize,
    pub mean: f64,
    /// The population standard deviation (NumPy's default, `ddof=0`).
    pub std: f64,
    pub min: f64,
    pub p25: f64,
    pub median: f64,
    pub p75: f64,
    pub max: f64,
    pub mean_length: f64,
    /// `HISTOGRAM_BINS` equal bins from `min` to `max` (the last one closed): their edges
    /// and counts.
    pub edges: Vec<f64>,
    pub counts: Vec<usize>,
}

pub const HISTOGRAM_BINS: usize = 10;

impl Summary {
    pub fn of(e: &Episodes) -> Summary {
        let n = e.returns.len().max(1) as f64;
        let mean = e.returns.iter().sum::<f64>() / n;
        let std = (e.returns.iter().map(|r| (r - mean).powi(2)).sum::<f64>() / n).sqrt();
        let mut sorted = e.returns.clone();
        sorted.sort_by(f64::total_cmp);
        // Linear interpolation between the closest ranks, as NumPy's default.
        let quantile = |q: f64| {
            let pos = q * (sorted.len().max(1) - 1) as f64;
            let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
            match (sorted.get(lo), sorted.get(hi)) {
                (Some(a), Some(b)) => a + (b - a) * (pos - lo as f64),
                _ => f64::NAN,
            }
        };
        let (min, max) = (quantile(0.0), quantile(1.0));
        let width = (max - min) / HISTOGRAM_BINS as f64;
        let edges: Vec<f64> = (0..=HISTOGRAM_BINS).map(|i| min + width * i as f64).collect();
        let mut counts = vec![0; HISTOGRAM_BINS];
        for r in &sorted {
            let bin = if width > 0.0 { ((r - min) / width) as usize } else { 0 };
            counts[bin.min(HISTOGRAM_BINS - 1)] += 1;
        }
        Summary {
            episodes: e.returns.len(),
            mean,
            std,
            min,
            p25: quantile(0.25),
            median: quantile(0.5),
            p75: quantile(0.75),
            max,
            mean_length: e.lengths.iter().sum::<u64>() as f64 / n,
            edges,
            counts,
        }
    }

    pub fn to_json(&self) -> Value {
        json!({
            "episodes": self.episodes,
            "mean_return": self.mean,
            "std_return": self.std,
            "min_return": self.min,
            "p25_return": self.p25,
            "median_return": self.median,
            "p75_return": self.p75,
            "max_return": self.max,
            "mean_length": self.mean_length,
            "histogram": { "edges": self.edges, "counts": self.counts },
        })
    }

    /// A few lines for a person: the statistics, then the histogram as bars.
    pub fn show(&self) -> String {
        let mut s = format!(
            "return: mean {:.4}, std {:.4} over {} episodes (mean length {:.1})\n\
             min {:.4}, 25% {:.4}, median {:.4}, 75% {:.4}, max {:.4}\n",
            self.mean, self.std, self.episodes, self.mean_length, self.min, self.p25, self.median, self.p75, self.max
        );
        let most = self.counts.iter().copied().max().unwrap_or(0).max(1);
        for (i, &c) in self.counts.iter().enumerate() {
            let bar = "#".repeat((c * 40).div_ceil(most));
            s += &format!(
                "  [{:>9.3}, {:>9.3}{} {c:>6} {bar}\n",
                self.edges[i],
                self.edges[i + 1],
                if i + 1 == self.counts.len() { "]" } else { ")" }
            );
        }
        s
    }
}

/// One episode, played and rendered.
pub struct Played {
    /// `f32[H, W, 3]` each: the first state, then the state after each step.
    pub frames: Vec<Array>,
    pub episode_return: f64,
    /// Whether the episode ended (rather than reaching `max_steps`).
    pub ended: bool,
}

/// Plays one episode from `key(seed)` with `learner`, at most `max_steps` steps.
pub fn play(
    client: &Client,
    prog: &Program,
    (policy, env): (&PolicyFuncs, &EnvFuncs),
    which: Policy,
    learner: &[Array],
    seed: i64,
    max_steps: u64,
) -> Result<Played, String> {
    let err = |e: crate::runtime::RuntimeError| e.to_string();
    let start = play_start(prog, policy, env);
    let step = play_step(prog, policy, env, which);
    let exe = client.compile(&lower_module(&step, 1), 1).map_err(err)?;
    let mut first = eval_func(&start, &[crate::io::seed_key(seed)]);
    let mut frames = vec![first.pop().expect("play_start gives a frame")];
    let upload = |a: &Array| client.upload(a, 0).map_err(err);
    let mut state: Vec<Buffer> = first.iter().map(upload).collect::<Result<_, _>>()?;
    let learner: Vec<Buffer> = learner.iter().map(upload).collect::<Result<_, _>>()?;
    let limit = env.info.time_limit.unwrap_or(u64::MAX).min(max_steps);
    let (mut t, mut episode_return) = (0, 0.0);
    let scalar = |b: &Buffer| b.download().map(|a| a.data).map_err(err);
    loop {
        let args: Vec<&Buffer> = state.iter().chain(&learner).collect();
        let mut outs = exe.execute(&args).map_err(err)?;
        // outs: state.., obs, carry.., key, reward, terminated, truncated, frame
        frames.push(outs.pop().expect("a frame").download().map_err(err)?);
        let ends: Vec<Data> = outs.split_off(outs.len() - 3).iter().map(scalar).collect::<Result<_, _>>()?;
        state = outs;
        t += 1;
        let (reward, terminated, truncated) = match &ends[..] {
            [Data::F32(r), Data::Bool(a), Data::Bool(b)] => (r[0], a[0], b[0]),
            _ => return Err("the play program gave no reward".into()),
        };
        episode_return += f64::from(reward);
        if terminated || truncated || t >= limit {
            let ended = terminated || truncated || env.info.time_limit.is_some_and(|l| t >= l);
            return Ok(Played { frames, episode_return, ended });
        }
    }
}

/// The policy compiled for a batch of host envs ([`act_program`]).
pub struct HostPolicy<'c> {
    client: &'c Client,
    exe: Executable,
    envs: usize,
    /// The learner's leaves the program takes, by index.
    policy: Vec<usize>,
    /// How many arrays of the behaviour record come after the action (none for `greedy`).
    behaviour: usize,
    /// One environment's carry at an episode's start (empty without a carry).
    initial_carry: Vec<Array>,
}

/// One run's acting state: the key, the policy on the device, each env's carry.
struct Acting {
    key: Buffer,
    policy: Vec<Buffer>,
    carry: Vec<Array>,
}

impl<'c> HostPolicy<'c> {
    pub fn new(
        client: &'c Client,
        prog: &Program,
        policy: &PolicyFuncs,
        which: Policy,
        envs: usize,
    ) -> Result<Self, String> {
        let f = match which {
            Policy::Sample => &policy.act,
            Policy::Greedy => policy.greedy.as_ref().ok_or("the agent has no `greedy`")?,
        };
        let sizes = (policy.learner_len(), policy.carry_len());
        let p = act_program(prog, f, which, sizes, envs);
        let exe = client.compile(&lower_module(&p.func, 1), 1).map_err(|e| e.to_string())?;
        let initial_carry = policy.initial_carry.as_ref().map_or(vec![], |f| eval_func(f, &[]));
        let behaviour = p.func.graph.results.len() - 2 - initial_carry.len();
        Ok(HostPolicy { client, exe, envs, policy: p.policy, behaviour, initial_carry })
    }

    /// The acting state of a run with `learner` from `key(seed)`.
    fn start(&self, learner: &[Array], seed: i64) -> Result<Acting, String> {
        let upload = |a: &Array| self.client.upload(a, 0).map_err(|e| e.to_string());
        let carry = self.initial_carry.iter().map(|c| c.stacked(self.envs)).collect();
        Ok(Acting {
            key: upload(&crate::io::seed_key(seed))?,
            policy: self.policy.iter().map(|&i| upload(&learner[i])).collect::<Result<_, _>>()?,
            carry,
        })
    }

    /// The actions for the observations `obs` (`[envs, ..]`); the carries move on.
    fn act(&self, a: &mut Acting, obs: &Array) -> Result<Array, String> {
        let err = |e: crate::runtime::RuntimeError| e.to_string();
        let upload = |x: &Array| self.client.upload(x, 0).map_err(err);
        let carry: Vec<Buffer> = a.carry.iter().map(upload).collect::<Result<_, _>>()?;
        let obs = upload(obs)?;
        let args: Vec<&Buffer> = std::iter::once(&a.key).chain(&a.policy).chain(&carry).chain([&obs]).collect();
        let mut outs = self.exe.execute(&args).map_err(err)?.into_iter();
        a.key = outs.next().ok_or("the policy program returned no key")?;
        let action = outs.next().ok_or("the policy program returned no action")?.download().map_err(err)?;
        let outs = outs.skip(self.behaviour);
        a.carry = outs.map(|b| b.download().map_err(err)).collect::<Result<_, _>>()?;
        Ok(action)
    }

    /// Starts the carry afresh for the environments whose episode ended.
    fn reset_carries(&self, a: &mut Acting, out: &StepOut) {
        for i in (0..self.envs).filter(|&i| out.done(i)) {
            for (c, fresh) in a.carry.iter_mut().zip(&self.initial_carry) {
                c.set_row(i, fresh);
            }
        }
    }
}

/// Exactly `episodes` whole episodes of the host envs `env` (a batch of the policy's
/// size, reset with `seed`: env `i` is seeded `seed + i`) with `learner`, acting from
/// `key(seed)`; counted as [`Evaluator::run`] counts them.
pub fn host_episodes(
    p: &HostPolicy,
    env: &mut dyn HostEnv,
    learner: &[Array],
    episodes: usize,
    seed: i64,
    name: &str,
) -> Result<Episodes, String> {
    let spec = env.spec().clone();
    let mut out = StepOut::new(&spec, p.envs);
    env.reset(seed as u64, &mut out).map_err(|e| e.to_string())?;
    let mut acting = p.start(learner, seed)?;
    let mut tally = Tally::new(episodes, p.envs, spec.time_limit, name);
    while !tally.finished() {
        tally.check_time()?;
        let action = p.act(&mut acting, &out.obs_array(&spec).map_err(|e| e.to_string())?)?;
        env.step(&action, &mut out).map_err(|e| e.to_string())?;
        p.reset_carries(&mut acting, &out);
        let dones: Vec<bool> = (0..p.envs).map(|i| out.done(i)).collect();
        tally.step(&out.reward, &dones);
    }
    Ok(tally.out)
}

/// How an episode played on a host env went.
pub struct HostPlayed {
    pub frames: usize,
    pub episode_return: f64,
    /// Whether the episode ended (rather than reaching `max_steps`).
    pub ended: bool,
}

/// Plays one episode of env 0 of `env` (opened to draw) from `seed` with `learner`, at
/// most `max_steps` steps, handing each frame (`u8[H, W, 3]`: the first state, then the
/// state after each step) to `frame`.
pub fn host_play(
    p: &HostPolicy,
    env: &mut dyn HostEnv,
    learner: &[Array],
    seed: i64,
    max_steps: u64,
    frame: &mut dyn FnMut(Array) -> Result<(), String>,
) -> Result<HostPlayed, String> {
    let spec = env.spec().clone();
    let mut out = StepOut::new(&spec, p.envs);
    let host = |e: crate::host::HostError| e.to_string();
    env.reset(seed as u64, &mut out).map_err(host)?;
    let mut acting = p.start(learner, seed)?;
    frame(env.frame().map_err(host)?)?;
    let (mut frames, mut episode_return) = (1, 0.0);
    for _ in 0..max_steps {
        let action = p.act(&mut acting, &out.obs_array(&spec).map_err(host)?)?;
        env.step(&action, &mut out).map_err(host)?;
        frame(env.frame().map_err(host)?)?;
        frames += 1;
        episode_return += f64::from(out.reward[0]);
        if out.done(0) {
            return Ok(HostPlayed { frames, episode_return, ended: true });
        }
    }
    Ok(HostPlayed { frames, episode_return, ended: false })
}
