//! The Anakin driver on the host: compiles an agent's training program for D devices,
//! keeps the training state on the devices between calls, and turns each call's small
//! metrics into reports.
//!
//! Every call runs `K` updates on every device (see `elab::anakin`); the host only
//! downloads the metrics, which the program has already reduced over the devices. The
//! state's buffers are donated to the next call, so it never leaves the devices except
//! for a checkpoint.

use crate::array::{Array, ArrayTy, Data};
use crate::elab::agent::{AgentFuncs, agent_names, build_agent};
use crate::elab::anakin::{AnakinPrograms, Leaf, LeafKind, Shape, anakin_programs, with_seeds};
use crate::elab::env::{EnvFuncs, build_env};
use crate::lower::stablehlo::lower_module_donating;
use crate::resolve::Program;
use crate::runtime::{Buffer, Client, Executable};
use serde_json::{Map, Value, json};
use std::time::Instant;

/// The sizes of a run, fixed for its whole life (a resumed run must use the same).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunShape {
    /// Environments over all devices.
    pub envs: usize,
    pub rollout: usize,
    pub updates_per_call: usize,
    pub devices: usize,
    /// Independent runs batched in one program (seeds `seed .. seed + seeds - 1`), each
    /// with `envs` environments.
    pub seeds: usize,
}

impl RunShape {
    /// Env steps per call of each seed's run, over all devices (what `env_steps` and
    /// `--total-steps` count).
    pub fn steps_per_call(&self) -> u64 {
        (self.envs * self.rollout * self.updates_per_call) as u64
    }

    pub fn check(&self) -> Result<(), String> {
        if self.seeds == 0 {
            return Err("`--seeds` must be positive".into());
        }
        if self.envs == 0 || self.devices == 0 || !self.envs.is_multiple_of(self.devices) {
            return Err(format!("`--envs {}` must be a positive multiple of `--devices {}`", self.envs, self.devices));
        }
        if self.rollout == 0 || self.updates_per_call == 0 {
            return Err("`--rollout` and `--updates-per-call` must be positive".into());
        }
        Ok(())
    }
}

/// An agent's training programs, compiled, with their state on the devices.
pub struct Trainer<'c> {
    client: &'c Client,
    pub programs: AnakinPrograms,
    pub agent: String,
    pub env: String,
    pub shape: RunShape,
    pub compile_s: f64,
    train: Executable,
    /// Per device, the state's buffers.
    state: Vec<Vec<Buffer>>,
}

/// One call's metrics for one seed, reduced over the devices.
pub struct Report {
    /// Mean return and length of the episodes that ended during the call (`None` if none).
    pub episode_return: Option<f64>,
    pub episode_length: Option<f64>,
    pub episodes: u64,
    /// The agent's metrics by name, averaged over the call's updates and the devices.
    pub metrics: Vec<(String, f64)>,
}

/// The agent to train: `name`, or the file's only one.
pub fn pick_agent(prog: &Program, name: Option<&str>) -> Result<String, String> {
    let names = agent_names(prog);
    match (name, &names[..]) {
        (Some(n), _) => Ok(n.to_string()),
        (None, [only]) => Ok(only.clone()),
        (None, []) => Err("the file declares no `agent`".into()),
        (None, _) => Err(format!("the file declares several agents ({}): choose one with `--agent`", names.join(", "))),
    }
}

/// Builds the agent's functions and its env's.
pub fn agent_and_env(
    prog: &Program,
    name: &str,
    shape: RunShape,
) -> Result<(AgentFuncs, EnvFuncs), Box<crate::diag::Diag>> {
    let per_device = shape.envs / shape.devices;
    let agent = build_agent(prog, name, per_device, shape.rollout)?;
    let env = build_env(prog, &agent.info.env.name)?;
    Ok((agent, env))
}

impl<'c> Trainer<'c> {
    /// Builds and compiles the programs; the state is empty until `init` or `restore`.
    /// `compile_s` counts from `start`, which the caller takes before building the
    /// agent's functions, so that it covers all of compilation, as JAX's
    /// `jit(f).lower(..).compile()` does.
    pub fn new(
        client: &'c Client,
        prog: &Program,
        (agent, env): (&AgentFuncs, &EnvFuncs),
        shape: RunShape,
        start: Instant,
    ) -> Result<Self, String> {
        shape.check()?;
        let per_device =
            Shape { envs: shape.envs / shape.devices, steps: shape.rollout, updates: shape.updates_per_call };
        let programs = match anakin_programs(prog, agent, env, per_device) {
            p if shape.seeds > 1 => with_seeds(p, shape.seeds),
            p => p,
        };
        let d = shape.devices;
        let donated = programs.state.len();
        let train =
            client.compile(&lower_module_donating(&programs.train, d, donated), d).map_err(|e| e.to_string())?;
        let compile_s = start.elapsed().as_secs_f64();
        Ok(Trainer {
            client,
            programs,
            agent: agent.info.name.clone(),
            env: env.info.name.clone(),
            shape,
            compile_s,
            train,
            state: vec![],
        })
    }

    /// Whether the train program came from the compilation cache.
    pub fn cache(&self) -> crate::runtime::CacheStatus {
        self.train.cache_status()
    }

    /// A fresh state from `seed` (seeds `seed ..` for several): the same learner on every
    /// device, each device's own environments. The init program runs once, so it runs in
    /// the reference interpreter rather than paying an XLA compile (its loops, the
    /// orthogonal inits, cost seconds).
    pub fn init(&mut self, seed: i64) -> Result<(), String> {
        let key = match self.shape.seeds {
            1 => crate::io::seed_key(seed),
            n => {
                let keys: Vec<u32> = (0..n as i64).flat_map(|i| words(&crate::io::seed_key(seed + i))).collect();
                Array::new(vec![n, 2], Data::U32(keys))
            }
        };
        let mut state = vec![];
        for d in 0..self.shape.devices {
            let values =
                crate::ir::eval::eval_func(&self.programs.init, &[key.clone(), Array::i32(vec![], vec![d as i32])]);
            state.push(
                values.iter().map(|v| self.client.upload(v, d).map_err(|e| e.to_string())).collect::<Result<_, _>>()?,
            );
        }
        self.state = state;
        Ok(())
    }

    /// Runs one call: `K` updates on every device. Returns its metrics, one report per
    /// seed.
    pub fn step(&mut self) -> Result<Vec<Report>, String> {
        let refs: Vec<Vec<&Buffer>> = self.state.iter().map(|s| s.iter().collect()).collect();
        let mut outs = self.train.execute_replicated(&refs).map_err(|e| e.to_string())?;
        let n = self.programs.state.len();
        // Each metric: one value per seed.
        let metrics: Vec<Vec<f64>> = outs[0][n..]
            .iter()
            .map(|b| match b.download().map(|a| a.data) {
                Ok(Data::F32(v)) => Ok(v.iter().map(|&x| f64::from(x)).collect()),
                Ok(_) => Err("a metric is not f32".to_string()),
                Err(e) => Err(e.to_string()),
            })
            .collect::<Result<_, _>>()?;
        for o in &mut outs {
            o.truncate(n);
        }
        self.state = outs;
        let names = &self.programs.metrics[3..];
        Ok((0..self.shape.seeds)
            .map(|s| {
                let episodes = metrics[2][s];
                let mean = |sum: f64| (episodes > 0.0).then(|| sum / episodes);
                Report {
                    episode_return: mean(metrics[0][s]),
                    episode_length: mean(metrics[1][s]),
                    episodes: episodes as u64,
                    metrics: names.iter().cloned().zip(metrics[3..].iter().map(|m| m[s])).collect(),
                }
            })
            .collect())
    }

    /// The learner's arrays on one device.
    pub fn learner_on(&self, device: usize) -> Result<Vec<Array>, String> {
        let n = self.programs.state.iter().filter(|l| l.kind == LeafKind::Shared).count();
        self.state[device][..n].iter().map(|b| b.download().map_err(|e| e.to_string())).collect()
    }

    /// The whole state by name: the learner once (it is the same on every device; checked),
    /// and each per-device array with the devices' parts joined along the first axis
    /// (environments), or stacked for the PRNG keys.
    pub fn snapshot(&self) -> Result<Vec<(String, Array)>, String> {
        let per_device: Vec<Vec<Array>> = self
            .state
            .iter()
            .map(|s| s.iter().map(|b| b.download().map_err(|e| e.to_string())).collect::<Result<Vec<_>, _>>())
            .collect::<Result<_, _>>()?;
        let mut out = vec![];
        for (i, leaf) in self.programs.state.iter().enumerate() {
            let parts: Vec<&Array> = per_device.iter().map(|d| &d[i]).collect();
            let value = if leaf.kind == LeafKind::Shared {
                if parts.iter().any(|p| *p != parts[0]) {
                    return Err(format!(
                        "`{}` differs between devices: the update must average its gradients with `pmean`",
                        leaf.name
                    ));
                }
                parts[0].clone()
            } else {
                join_parts(&parts, leaf)
            };
            out.push((leaf.name.clone(), value));
        }
        Ok(out)
    }

    /// Puts a snapshot back on the devices.
    pub fn restore(&mut self, arrays: &[(String, Array)]) -> Result<(), String> {
        let d = self.shape.devices;
        let mut state: Vec<Vec<Buffer>> = (0..d).map(|_| vec![]).collect();
        for leaf in &self.programs.state {
            let (_, a) = arrays
                .iter()
                .find(|(n, _)| *n == leaf.name)
                .ok_or_else(|| format!("the checkpoint has no array `{}`", leaf.name))?;
            let want = saved_ty(leaf, d);
            if a.ty() != want {
                return Err(format!("`{}` in the checkpoint is {:?}, the program expects {want:?}", leaf.name, a.ty()));
            }
            let parts = match leaf.kind {
                LeafKind::Shared => vec![a.clone(); d],
                LeafKind::PerEnv | LeafKind::PerDevice => split_parts(a, leaf, d),
            };
            for (dev, p) in parts.iter().enumerate() {
                state[dev].push(self.client.upload(p, dev).map_err(|e| e.to_string())?);
            }
        }
        self.state = state;
        Ok(())
    }
}

/// A state array's type in a checkpoint: the devices' parts joined along the environment
/// axis or stacked (PRNG keys); the learner once.
pub fn saved_ty(leaf: &Leaf, devices: usize) -> ArrayTy {
    let mut shape = leaf.ty.shape.clone();
    match leaf.kind {
        LeafKind::Shared => {}
        LeafKind::PerEnv => shape[usize::from(leaf.seeded)] *= devices,
        LeafKind::PerDevice => shape.insert(0, devices),
    }
    ArrayTy::new(leaf.ty.dtype, shape)
}

/// How many seeds' rows the devices' parts of `leaf` interleave when joined: with a seed
/// axis, a per-environment array is joined seed by seed.
fn seed_rows(leaf: &Leaf) -> usize {
    match (leaf.kind, leaf.seeded) {
        (LeafKind::PerEnv, true) => leaf.ty.shape[0],
        _ => 1,
    }
}

/// Joins the devices' parts of an array into its [`saved_ty`].
pub fn join_parts(parts: &[&Array], leaf: &Leaf) -> Array {
    let rows = seed_rows(leaf);
    let bytes: Vec<Vec<u8>> = parts.iter().map(|p| p.to_bytes()).collect();
    let chunk = bytes[0].len() / rows;
    let joined: Vec<u8> =
        (0..rows).flat_map(|r| bytes.iter().flat_map(move |b| &b[r * chunk..(r + 1) * chunk])).copied().collect();
    Array::from_bytes(&saved_ty(leaf, parts.len()), &joined).expect("each part has the leaf's type")
}

/// The inverse of [`join_parts`], for an array already checked to have the saved type: the
/// devices' parts.
pub fn split_parts(a: &Array, leaf: &Leaf, devices: usize) -> Vec<Array> {
    let (bytes, rows) = (a.to_bytes(), seed_rows(leaf));
    let chunk = bytes.len() / rows / devices;
    (0..devices)
        .map(|d| {
            let part: Vec<u8> = (0..rows)
                .flat_map(|r| &bytes[(r * devices + d) * chunk..(r * devices + d + 1) * chunk])
                .copied()
                .collect();
            Array::from_bytes(&leaf.ty, &part).expect("checked size")
        })
        .collect()
}

/// A key's two words.
fn words(key: &Array) -> Vec<u32> {
    match &key.data {
        Data::U32(w) => w.clone(),
        d => unreachable!("a key is u32, not {d:?}"),
    }
}

/// A report as a `metrics.jsonl` record; `seed` is the run's, for a run of several.
pub fn record(
    report: &Report,
    seed: Option<i64>,
    env_steps: u64,
    updates: u64,
    steps_per_sec: f64,
    wall_s: f64,
) -> Map<String, Value> {
    let mut r = Map::new();
    if let Some(s) = seed {
        r.insert("seed".into(), json!(s));
    }
    r.insert("env_steps".into(), json!(env_steps));
    r.insert("updates".into(), json!(updates));
    r.insert("episode_return".into(), json!(report.episode_return));
    r.insert("episode_length".into(), json!(report.episode_length));
    r.insert("episodes".into(), json!(report.episodes));
    for (name, v) in &report.metrics {
        let key = if name == "total" { "loss".to_string() } else { name.clone() };
        r.insert(key, json!(v));
    }
    r.insert("steps_per_sec".into(), json!(steps_per_sec));
    r.insert("wall_s".into(), json!(wall_s));
    r
}
