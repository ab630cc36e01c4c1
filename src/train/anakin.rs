//! The Anakin driver on the host: compiles an agent's training program for D devices,
//! keeps the training state on the devices between calls, and turns each call's small
//! metrics into reports.
//!
//! Every call runs `K` updates on every device (see `programs::anakin`); the host only
//! downloads the metrics, which the program has already reduced over the devices. The
//! state's buffers are donated to the next call, so it never leaves the devices except
//! for a checkpoint.

use super::fingerprint::Fingerprint;
use super::run::{Driver, Next, Report, Reported};
use super::state::DeviceState;
use crate::array::{Array, Data};
use crate::distributed::Session;
use crate::elab::agent::{AgentFuncs, agent_names, build_agent};
use crate::elab::env::{EnvFuncs, build_env};
use crate::lower::stablehlo::{lower_module, lower_module_across};
use crate::overrides::Override;
use crate::programs::anakin::{AnakinPrograms, DeviceShape, EPISODE_METRICS, LeafKind, anakin_programs, with_seeds};
use crate::resolve::Program;
use crate::runtime::{Buffer, Client, Executable};
use std::time::Instant;

/// The sizes of a run, fixed for its whole life (a resumed run must use the same).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RunShape {
    /// Environments over all devices.
    pub envs: usize,
    pub rollout: usize,
    pub updates_per_call: usize,
    /// Devices of each process.
    pub devices: usize,
    /// Processes in the job, each with `devices` devices (1 unless training across
    /// processes).
    pub processes: usize,
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

    /// Devices over all processes.
    pub fn total_devices(&self) -> usize {
        self.devices * self.processes
    }

    /// Environments on each device.
    pub fn envs_per_device(&self) -> usize {
        self.envs / self.total_devices()
    }

    pub fn check(&self) -> Result<(), String> {
        if self.seeds == 0 {
            return Err("`--seeds` must be positive".into());
        }
        let d = self.total_devices();
        if self.envs == 0 || d == 0 || !self.envs.is_multiple_of(d) {
            return Err(match self.processes {
                1 => format!("`--envs {}` must be a positive multiple of `--devices {}`", self.envs, self.devices),
                p => format!(
                    "`--envs {}` must be a positive multiple of the job's {d} devices (`--devices {}` on each of {p} processes)",
                    self.envs, self.devices
                ),
            });
        }
        if self.rollout == 0 || self.updates_per_call == 0 {
            return Err("`--rollout` and `--updates-per-call` must be positive".into());
        }
        Ok(())
    }
}

/// A run's programs, built for its shape, with the StableHLO of `train` as it is compiled.
pub struct Lowered {
    pub programs: AnakinPrograms,
    pub train: String,
}

impl Lowered {
    pub fn new(prog: &Program, (agent, env): (&AgentFuncs, &EnvFuncs), shape: RunShape) -> Result<Lowered, String> {
        shape.check()?;
        let per_device =
            DeviceShape { envs: shape.envs_per_device(), steps: shape.rollout, updates: shape.updates_per_call };
        let programs = match anakin_programs(prog, agent, env, per_device) {
            p if shape.seeds > 1 => with_seeds(p, shape.seeds),
            p => p,
        };
        let train = lower_module_across(&programs.train, shape.devices, shape.processes, programs.state.len());
        Ok(Lowered { programs, train })
    }

    /// Adds the run's programs to `f`: `init` (which the reference interpreter runs) and
    /// `train`.
    pub fn fingerprint(&self, f: &mut Fingerprint) {
        f.program("init", &lower_module(&self.programs.init, 1));
        f.program("train", &self.train);
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
    /// The state on devices `0..D`.
    state: DeviceState,
    /// The job, when training across processes.
    job: Option<&'static Session>,
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
    overrides: &[Override],
    name: &str,
    shape: RunShape,
) -> Result<(AgentFuncs, EnvFuncs), Box<crate::diag::Diag>> {
    let per_device = shape.envs_per_device();
    let agent = build_agent(prog, overrides, name, per_device, shape.rollout)?;
    let env = build_env(prog, overrides, &agent.info.env.name)?;
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
        let lowered = Lowered::new(prog, (agent, env), shape)?;
        Trainer::compile(client, lowered, (&agent.info.name, &env.info.name), shape, start)
    }

    /// [`Trainer::new`] from the programs already lowered, of the agent and env named.
    pub fn compile(
        client: &'c Client,
        Lowered { programs, train: mlir }: Lowered,
        (agent, env): (&str, &str),
        shape: RunShape,
        start: Instant,
    ) -> Result<Self, String> {
        let d = shape.devices;
        let train = client.compile(&mlir, d).map_err(|e| e.to_string())?;
        let compile_s = start.elapsed().as_secs_f64();
        let state = DeviceState::new(programs.state.clone(), (0..d).collect());
        Ok(Trainer {
            client,
            programs,
            agent: agent.to_string(),
            env: env.to_string(),
            shape,
            compile_s,
            train,
            state,
            job: None,
        })
    }

    /// This trainer as process `job.rank` of a job: its devices are devices
    /// `rank * D ..` of the job's, and process 0 gathers the checkpoints.
    pub fn in_job(self, job: &'static Session) -> Self {
        let state = self.state.within(job.rank * self.shape.devices, self.shape.total_devices());
        Trainer { state, job: Some(job), ..self }
    }

    /// Whether the train program came from the compilation cache.
    pub fn cache(&self) -> crate::runtime::CacheStatus {
        self.train.cache_status()
    }

    /// Runs one call: `K` updates on every device. Returns its metrics, one report per
    /// seed.
    pub fn step(&mut self) -> Result<Vec<Report>, String> {
        let refs: Vec<Vec<&Buffer>> = self.state.buffers.iter().map(|s| s.iter().collect()).collect();
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
        self.state.buffers = outs;
        let ([returns, lengths, episodes], agent) = metrics.split_at(EPISODE_METRICS.len()) else {
            unreachable!("train returns the episode statistics first")
        };
        let names = &self.programs.metrics[EPISODE_METRICS.len()..];
        Ok((0..self.shape.seeds)
            .map(|s| {
                let mean = |sum: f64| (episodes[s] > 0.0).then(|| sum / episodes[s]);
                Report {
                    episode_return: mean(returns[s]),
                    episode_length: mean(lengths[s]),
                    episodes: episodes[s] as u64,
                    metrics: names.iter().cloned().zip(agent.iter().map(|m| m[s])).collect(),
                }
            })
            .collect())
    }

    /// The learner's arrays on one device.
    pub fn learner_on(&self, device: usize) -> Result<Vec<Array>, String> {
        let n = self.programs.state.iter().filter(|l| l.kind == LeafKind::Shared).count();
        self.state.download(device, n)
    }
}

impl Driver for Trainer<'_> {
    const UNIT: &'static str = "calls";

    fn steps_per_unit(&self) -> u64 {
        self.shape.steps_per_call()
    }

    fn updates_per_unit(&self) -> u64 {
        self.shape.updates_per_call as u64
    }

    fn units_per_report(&self) -> u64 {
        1
    }

    fn seeds(&self) -> usize {
        self.shape.seeds
    }

    fn title(&self) -> String {
        format!("{} on {}", self.agent, self.env)
    }

    /// A fresh state from `seed` (seeds `seed ..` for several): the same learner on every
    /// device, each device's own environments. The init program runs once, so it runs in
    /// the reference interpreter rather than paying an XLA compile (its loops, the
    /// orthogonal inits, cost seconds).
    fn init(&mut self, seed: i64) -> Result<(), String> {
        let key = match self.shape.seeds {
            1 => crate::io::seed_key(seed),
            n => {
                let keys: Vec<u32> = (0..n as i64).flat_map(|i| words(&crate::io::seed_key(seed + i))).collect();
                Array::new(vec![n, 2], Data::U32(keys))
            }
        };
        let first = self.state.span.0;
        let per_device: Vec<Vec<Array>> = (first..first + self.shape.devices)
            .map(|d| {
                crate::ir::eval::eval_func(&self.programs.init, &[key.clone(), Array::i32(vec![], vec![d as i32])])
            })
            .collect();
        self.state.upload(self.client, &per_device)
    }

    /// In a job, every process sends its devices' state to process 0, which returns the
    /// whole; the others return nothing.
    fn snapshot(&self) -> Result<Vec<(String, Array)>, String> {
        let Some(job) = self.job else { return self.state.snapshot() };
        Ok(self.state.gather(job, &job.fresh_key("snapshot"))?.unwrap_or_default())
    }

    fn restore(&mut self, arrays: &[(String, Array)]) -> Result<(), String> {
        self.state.restore(self.client, arrays)
    }

    fn run(
        &mut self,
        _seed: i64,
        start: u64,
        end: u64,
        on_report: &mut dyn FnMut(&Self, Reported) -> Result<Next, String>,
    ) -> Result<(), String> {
        for calls in start + 1..=end {
            let seeds = self.step()?;
            if on_report(self, Reported { units: calls, seeds, extra: Default::default() })? == Next::Stop {
                break;
            }
        }
        Ok(())
    }
}

/// A key's two words.
fn words(key: &Array) -> Vec<u32> {
    match &key.data {
        Data::U32(w) => w.clone(),
        d => unreachable!("a key is u32, not {d:?}"),
    }
}
