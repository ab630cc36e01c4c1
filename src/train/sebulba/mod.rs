//! The Sebulba driver: environments stepped on the host by actor threads, learning on the
//! learner devices.
//!
//! - **Actors.** `actor_threads` threads, spread over the actor devices, each with its own
//!   `envs / actor_threads` host environments, by default in two halves (see [`actor`]). Each runs
//!   the actor program (`programs::sebulba`) on its device and writes rollouts of `T` steps
//!   into a queue of size 1 to the learner.
//! - **Learner** (the calling thread). Each update takes one rollout from every actor
//!   thread, in thread order, joins them along the environment axis, splits them over the
//!   learner devices and runs the learner program there (replicated; the update's `pmean`
//!   averages the gradients). It then publishes the new policy (the leaves the actor
//!   program reads) to a [`policy::PolicyStore`].
//! - **Policy lag.** By default rollout `r` acts with the policy after update `r - 1`
//!   (Cleanba's: the actors run one rollout ahead of the learner, exactly), so with seeded
//!   envs a run is deterministic. With `max_policy_lag = Some(n)` actors take the newest
//!   policy, waiting only when it is more than `n` versions behind; the mean lag is
//!   reported.

pub mod actor;
pub mod policy;
pub mod rollout;

use crate::array::{Array, ArrayTy, DType};
use crate::distributed::Session;
use crate::elab::agent::{AgentFuncs, AgentInfo};
use crate::host::{self, EnvSpec};
use crate::ir::Func;
use crate::lower::stablehlo::{lower_module, lower_module_across, lower_module_donating};
use crate::programs::anakin::{Leaf, LeafKind};
use crate::programs::leaf_names;
use crate::programs::sebulba::{SebulbaPrograms, sebulba_programs};
use crate::resolve::Program;
use crate::runtime::{Buffer, Client, Executable};
use crate::train::fingerprint::Fingerprint;
use crate::train::run::{Driver, Next, Report, Reported};
use crate::train::state::DeviceState;
use policy::PolicyStore;
use rollout::{EpisodeStats, Rollout, TrajectoryLayout};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// How a Sebulba run is laid out; fixed for its life.
#[derive(Clone, Debug)]
pub struct Config {
    /// The host env's URI.
    pub uri: String,
    /// Environments over all actor threads (of all processes, in a job).
    pub envs: usize,
    pub rollout: usize,
    /// Updates per report (and per checkpoint interval unit).
    pub updates_per_report: usize,
    /// Actor threads over all actor devices (spread round-robin), in each process.
    pub actor_threads: usize,
    pub actor_devices: Vec<usize>,
    pub learner_devices: Vec<usize>,
    pub max_policy_lag: Option<u64>,
    /// Whether each actor thread steps its envs as two halves, acting on one while the
    /// other steps; else as one batch (half the device calls, no overlap).
    pub double_buffer: bool,
    /// Host-env options (`num_envs` is set per batch).
    pub host: host::Options,
    /// Processes in the job, each with its own actors and learner devices (1 unless
    /// training across processes), and this one's index.
    pub processes: usize,
    pub rank: usize,
}

impl Config {
    /// Envs per actor thread, checked to split into two equal halves.
    pub fn check(&self) -> Result<(), String> {
        if self.processes == 0 || !self.envs.is_multiple_of(self.processes) {
            return Err(format!("`--envs {}` must be a multiple of the {} processes", self.envs, self.processes));
        }
        let (e, a, l) = (self.local_envs(), self.actor_threads, self.learner_devices.len());
        if a == 0 || self.actor_devices.is_empty() || l == 0 {
            return Err("Sebulba needs at least one actor thread, one actor device and one learner device".into());
        }
        let parts = a * self.buffers();
        if e == 0 || !e.is_multiple_of(parts) {
            return Err(match self.double_buffer {
                true => format!(
                    "`--envs {e}` must be a positive multiple of 2 x `--actor-threads {a}`: each actor thread steps two equal halves"
                ),
                false => format!("`--envs {e}` must be a positive multiple of `--actor-threads {a}`"),
            });
        }
        if !e.is_multiple_of(l) {
            return Err(format!("`--envs {e}` must be a multiple of the {l} learner device(s)"));
        }
        if self.rollout == 0 || self.updates_per_report == 0 {
            return Err("`--rollout` and `--updates-per-call` must be positive".into());
        }
        Ok(())
    }

    /// Env batches per actor thread.
    pub fn buffers(&self) -> usize {
        if self.double_buffer { 2 } else { 1 }
    }

    /// This process's envs.
    pub fn local_envs(&self) -> usize {
        self.envs / self.processes
    }

    /// Envs per batch (what the actor program is compiled for).
    pub fn batch(&self) -> usize {
        self.local_envs() / self.actor_threads / self.buffers()
    }

    pub fn steps_per_update(&self) -> u64 {
        (self.envs * self.rollout) as u64
    }
}

/// The agent's env as a host env spec, to check the host env against.
pub fn agent_spec(agent: &AgentInfo) -> Result<EnvSpec, String> {
    let env = &agent.env;
    let obs = match env.observation.leaves().as_deref() {
        Some([one]) => one.clone(),
        _ => return Err(format!("env `{}` observes `{}`: Sebulba needs one array", env.name, env.observation)),
    };
    Ok(EnvSpec { name: env.name.clone(), obs, action: env.action.clone(), time_limit: env.time_limit })
}

/// A run's programs, built for its layout, with the StableHLO of `learn` and `act` as they
/// are compiled.
pub struct Lowered {
    pub spec: EnvSpec,
    pub programs: SebulbaPrograms,
    pub learn: String,
    pub act: String,
}

impl Lowered {
    pub fn new(prog: &Program, agent: &AgentFuncs, cfg: &Config) -> Result<Lowered, String> {
        cfg.check()?;
        let spec = agent_spec(&agent.info)?;
        let programs = sebulba_programs(prog, agent, cfg.batch());
        let (n, l) = (programs.learner.len(), cfg.learner_devices.len());
        let learn = lower_module_across(&programs.learn, l, cfg.processes, n + 1);
        let act = lower_module_donating(&programs.act, 1, 1);
        Ok(Lowered { spec, programs, learn, act })
    }

    /// Adds the run's programs to `f`: the agent's `init` and the `keys` (which the
    /// reference interpreter runs), `learn` and `act`.
    pub fn fingerprint(&self, agent: &AgentFuncs, f: &mut Fingerprint) {
        f.program("init", &lower_module(&agent.init, 1));
        f.program("keys", &lower_module(&self.programs.keys, 1));
        f.program("learn", &self.learn);
        f.program("act", &self.act);
    }
}

/// The compiled programs and the learner's state on the learner devices.
pub struct Sebulba {
    client: Client,
    pub cfg: Config,
    pub programs: SebulbaPrograms,
    pub spec: EnvSpec,
    pub agent: String,
    pub compile_s: f64,
    /// The agent's `init`.
    init: Func,
    learn: Executable,
    /// One actor program per actor device, in `cfg.actor_devices`' order.
    act: Vec<Arc<Executable>>,
    /// On the learner devices: the learner's leaves, then the update key per device.
    state: DeviceState,
    /// The job, when training across processes.
    job: Option<&'static Session>,
}

impl Sebulba {
    /// Compiles the programs for `agent` (built with `envs / learner devices` envs per
    /// device and the run's rollout). `start` is when building began, for `compile_s`.
    pub fn new(
        client: &Client,
        prog: &Program,
        agent: &AgentFuncs,
        cfg: Config,
        start: Instant,
    ) -> Result<Self, String> {
        let lowered = Lowered::new(prog, agent, &cfg)?;
        Sebulba::compile(client, lowered, agent, cfg, start)
    }

    /// [`Sebulba::new`] from the programs already lowered.
    pub fn compile(
        client: &Client,
        Lowered { spec, programs, learn, act }: Lowered,
        agent: &AgentFuncs,
        cfg: Config,
        start: Instant,
    ) -> Result<Self, String> {
        let l = cfg.learner_devices.len();
        let learn = client.compile_on(&learn, &cfg.learner_devices).map_err(|e| e.to_string())?;
        let act = cfg
            .actor_devices
            .iter()
            .map(|&d| client.compile_on(&act, &[d]).map(Arc::new).map_err(|e| e.to_string()))
            .collect::<Result<_, _>>()?;
        let mut state: Vec<Leaf> = leaf_names(&agent.info.learner, "learner")
            .into_iter()
            .zip(&programs.learner)
            .map(|(name, ty)| Leaf { name, ty: ty.clone(), kind: LeafKind::Shared, seeded: false })
            .collect();
        let rng = ArrayTy::new(DType::U32, vec![2]);
        state.push(Leaf { name: "rng".into(), ty: rng, kind: LeafKind::PerDevice, seeded: false });
        let state = DeviceState::new(state, cfg.learner_devices.clone()).within(cfg.rank * l, cfg.processes * l);
        Ok(Sebulba {
            client: client.clone(),
            cfg,
            programs,
            spec,
            agent: agent.info.name.clone(),
            compile_s: start.elapsed().as_secs_f64(),
            init: agent.init.clone(),
            learn,
            act,
            state,
            job: None,
        })
    }

    /// This driver as process `cfg.rank` of `job`: the episodes of every process are
    /// reported, and process 0 gathers the checkpoints.
    pub fn in_job(self, job: &'static Session) -> Self {
        Sebulba { job: Some(job), ..self }
    }

    /// The policy leaves (what the actor program reads) of the learner on device 0.
    fn policy(&self) -> Result<Vec<Array>, String> {
        let p = &self.programs.policy;
        p.iter().map(|&i| self.state.buffers[0][i].download().map_err(|e| e.to_string())).collect()
    }

    #[allow(clippy::too_many_arguments)]
    fn learn_loop(
        &mut self,
        rxs: Vec<Receiver<Result<Rollout, String>>>,
        layout: &TrajectoryLayout,
        store: &PolicyStore,
        (start, end): (u64, u64),
        restarts: &[Arc<AtomicU64>],
        notes: &Mutex<Vec<String>>,
        on_report: &mut dyn FnMut(&Sebulba, Reported) -> Result<Next, String>,
    ) -> Result<(), String> {
        let k = self.cfg.updates_per_report as u64;
        let n = self.programs.learner.len();
        let traj_tys: Vec<ArrayTy> = self.programs.learn.param_types()[n + 1..].to_vec();
        let mut acc = Acc::default();
        let mut since = Instant::now();
        for u in start..end {
            let t0 = Instant::now();
            let mut parts = vec![];
            for (i, rx) in rxs.iter().enumerate() {
                match rx.recv() {
                    Ok(Ok(r)) => parts.push(r),
                    Ok(Err(e)) => return Err(e),
                    Err(_) => return Err(format!("actor thread {i} stopped without a reason")),
                }
            }
            acc.learner_wait += t0.elapsed().as_secs_f64();
            for note in notes.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
                eprintln!("note: {note}");
            }
            for p in &parts {
                acc.lag += u.saturating_sub(p.version) as f64;
                acc.actor_wait += p.idle_s;
                acc.actor_acting += p.acting_s;
                acc.actor_stepping += p.stepping_s;
                acc.episodes.add(&p.episodes);
            }
            acc.rollouts += parts.len();
            let metrics = self.update(&parts, layout, &traj_tys)?;
            acc.add_metrics(&metrics);
            store.publish(u + 1, self.policy()?);
            if (u + 1 - start).is_multiple_of(k) {
                let wall = since.elapsed().as_secs_f64().max(1e-9);
                since = Instant::now();
                let e = match self.job {
                    Some(job) => job_episodes(job, acc.episodes)?,
                    None => acc.episodes,
                };
                let mean = |s: f64| (e.count > 0).then(|| s / e.count as f64);
                let names = self.metric_names();
                let report = Report {
                    episode_return: mean(e.return_sum),
                    episode_length: mean(e.length_sum),
                    episodes: e.count,
                    metrics: names.into_iter().zip(acc.metrics.iter().map(|m| m / k as f64)).collect(),
                };
                let mut extra = serde_json::Map::new();
                extra.insert("policy_lag".into(), (acc.lag / acc.rollouts.max(1) as f64).into());
                let actors = |s: f64| (s / (self.cfg.actor_threads as f64 * wall)).into();
                extra.insert("actor_idle".into(), actors(acc.actor_wait));
                extra.insert("actor_acting".into(), actors(acc.actor_acting));
                extra.insert("actor_stepping".into(), actors(acc.actor_stepping));
                extra.insert("learner_idle".into(), (acc.learner_wait / wall).into());
                let worker_restarts: u64 = restarts.iter().map(|r| r.load(Ordering::Relaxed)).sum();
                extra.insert("worker_restarts".into(), worker_restarts.into());
                if on_report(self, Reported { units: u + 1, seeds: vec![report], extra })? == Next::Stop {
                    break;
                }
                acc = Acc::default();
            }
        }
        Ok(())
    }

    fn metric_names(&self) -> Vec<String> {
        let n = self.programs.learner.len();
        let count = self.programs.learn.graph.results.len() - n - 1;
        (0..count).map(|i| self.programs.metrics.get(i).cloned().unwrap_or_else(|| format!("metric{i}"))).collect()
    }

    /// One update on the joined rollouts; returns the agent's metrics.
    fn update(&mut self, parts: &[Rollout], layout: &TrajectoryLayout, tys: &[ArrayTy]) -> Result<Vec<f64>, String> {
        let devices = self.cfg.learner_devices.clone();
        let shares = rollout::assemble(parts, layout, devices.len());
        let mut uploads: Vec<Vec<Buffer>> = vec![];
        for (d, share) in devices.iter().zip(&shares) {
            let mut bufs = vec![];
            for (bytes, ty) in share.iter().zip(tys) {
                let a = Array::from_bytes(ty, bytes)
                    .ok_or_else(|| format!("a rollout field of {} bytes is not `{ty}`", bytes.len()))?;
                bufs.push(self.client.upload(&a, *d).map_err(|e| e.to_string())?);
            }
            uploads.push(bufs);
        }
        let args: Vec<Vec<&Buffer>> =
            self.state.buffers.iter().zip(&uploads).map(|(state, traj)| state.iter().chain(traj).collect()).collect();
        let mut outs = self.learn.execute_replicated(&args).map_err(|e| e.to_string())?;
        let keep = self.state.leaves.len();
        let metrics = outs[0][keep..]
            .iter()
            .map(|b| match b.download().map(|a| a.data) {
                Ok(crate::array::Data::F32(v)) => Ok(v[0] as f64),
                Ok(_) => Err("a metric is not f32".to_string()),
                Err(e) => Err(e.to_string()),
            })
            .collect::<Result<Vec<_>, _>>()?;
        for o in &mut outs {
            o.truncate(keep);
        }
        self.state.buffers = outs;
        Ok(metrics)
    }
}

impl Driver for Sebulba {
    const UNIT: &'static str = "updates";

    fn steps_per_unit(&self) -> u64 {
        self.cfg.steps_per_update()
    }

    fn updates_per_unit(&self) -> u64 {
        1
    }

    fn units_per_report(&self) -> u64 {
        self.cfg.updates_per_report as u64
    }

    fn seeds(&self) -> usize {
        1
    }

    fn title(&self) -> String {
        format!("{} on {}", self.agent, self.cfg.uri)
    }

    /// The learner from `init(k)` (the interpreter; it runs once) on every learner device,
    /// with each device's update key.
    fn init(&mut self, seed: i64) -> Result<(), String> {
        let learner = crate::ir::eval::eval_func(&self.init, &[keys(&self.programs.keys, seed, 0, 0)?.0]);
        let first = self.state.span.0;
        let per_device = (first..first + self.cfg.learner_devices.len())
            .map(|i| Ok(learner.iter().cloned().chain([keys(&self.programs.keys, seed, i as i32, 0)?.1]).collect()))
            .collect::<Result<Vec<Vec<Array>>, String>>()?;
        self.state.upload(&self.client, &per_device)
    }

    fn snapshot(&self) -> Result<Vec<(String, Array)>, String> {
        let Some(job) = self.job else { return self.state.snapshot() };
        Ok(self.state.gather(job, &job.fresh_key("snapshot"))?.unwrap_or_default())
    }

    fn restore(&mut self, arrays: &[(String, Array)]) -> Result<(), String> {
        self.state.restore(&self.client, arrays)
    }

    /// Trains from `start` updates to `end`, calling `on_report` every
    /// `updates_per_report` updates. Actor threads start and stop inside.
    fn run(
        &mut self,
        seed: i64,
        start: u64,
        end: u64,
        on_report: &mut dyn FnMut(&Self, Reported) -> Result<Next, String>,
    ) -> Result<(), String> {
        let cfg = self.cfg.clone();
        let threads = cfg.actor_threads;
        let per_thread = cfg.local_envs() / threads;
        // Actor threads are numbered over the job: this process's come after those of
        // the processes before it.
        let first = cfg.rank * threads;
        let layout = TrajectoryLayout::new(&self.programs.trajectory, cfg.rollout, per_thread);
        let store = Arc::new(PolicyStore::new(start, self.policy()?));
        let stop = Arc::new(AtomicBool::new(false));
        let restarts: Vec<Arc<AtomicU64>> = (0..threads).map(|_| Arc::new(AtomicU64::new(0))).collect();
        let notes = Arc::new(Mutex::new(vec![]));
        let actor_keys = (0..threads)
            .map(|k| keys(&self.programs.keys, seed, (first + k) as i32, start).map(|k| k.2))
            .collect::<Result<Vec<_>, _>>()?;
        std::thread::scope(|s| {
            let mut rxs = vec![];
            for k in 0..threads {
                let (tx, rx) = sync_channel(1);
                rxs.push(rx);
                let mut opts = cfg.host.clone();
                opts.num_envs = cfg.batch();
                // A worker that hangs must not hold up the end of the run.
                opts.cancel = Some(stop.clone());
                let a = actor::Actor {
                    thread: k,
                    buffers: cfg.buffers(),
                    device: cfg.actor_devices[k % cfg.actor_devices.len()],
                    client: self.client.clone(),
                    act: self.act[k % self.act.len()].clone(),
                    uri: cfg.uri.clone(),
                    opts,
                    // Env `i` of the whole batch is seeded `seed + i` (Gymnasium's vector
                    // convention), moved on by each resumption's start.
                    env_seed: (seed as u64)
                        .wrapping_add(((first + k) * per_thread) as u64)
                        .wrapping_add(start * cfg.envs as u64),
                    key: actor_keys[k].clone(),
                    expected: self.spec.clone(),
                    layout: layout.clone(),
                    initial_carry: self.programs.initial_carry.clone(),
                    policy: store.clone(),
                    max_lag: cfg.max_policy_lag,
                    start_version: start,
                    tx,
                    stop: stop.clone(),
                    restarts: restarts[k].clone(),
                    notes: notes.clone(),
                };
                s.spawn(move || a.run());
            }
            let result = self.learn_loop(rxs, &layout, &store, (start, end), &restarts, &notes, on_report);
            // The receivers are gone, so blocked senders return; waiting actors wake, and
            // so do those waiting on a worker.
            stop.store(true, Ordering::Relaxed);
            store.stop();
            result
        })
    }
}

/// What a report accumulates over its updates.
#[derive(Default)]
struct Acc {
    episodes: EpisodeStats,
    metrics: Vec<f64>,
    lag: f64,
    rollouts: usize,
    actor_wait: f64,
    actor_acting: f64,
    actor_stepping: f64,
    learner_wait: f64,
}

impl Acc {
    fn add_metrics(&mut self, m: &[f64]) {
        self.metrics.resize(m.len(), 0.0);
        for (s, x) in self.metrics.iter_mut().zip(m) {
            *s += x;
        }
    }
}

/// The episodes that ended in every process of `job` since the last report.
fn job_episodes(job: &Session, mine: EpisodeStats) -> Result<EpisodeStats, String> {
    let key = job.fresh_key("episodes");
    let bytes: Vec<u8> =
        [mine.count as f64, mine.return_sum, mine.length_sum].iter().flat_map(|x| x.to_le_bytes()).collect();
    job.coordinator.put(&format!("{key}/{}", job.rank), &bytes)?;
    let mut all = EpisodeStats::default();
    for r in 0..job.processes {
        let b = job.coordinator.get(&format!("{key}/{r}"), job.timeout)?;
        let x: Vec<f64> = b.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().expect("8 bytes"))).collect();
        let [count, return_sum, length_sum] = x[..] else { return Err("a malformed episode count".into()) };
        all.add(&EpisodeStats { count: count as u64, return_sum, length_sum });
    }
    Ok(all)
}

/// The keys of [`SebulbaPrograms::keys`] for `seed`, learner device or actor thread `i`
/// and a run starting at update `start`.
fn keys(f: &Func, seed: i64, i: i32, start: u64) -> Result<(Array, Array, Array), String> {
    let start = i32::try_from(start).map_err(|_| format!("cannot resume at update {start}"))?;
    let args = [crate::io::seed_key(seed), Array::i32(vec![], vec![i]), Array::i32(vec![], vec![start])];
    let [init, learn, act] = crate::ir::eval::eval_func(f, &args).try_into().expect("three keys");
    Ok((init, learn, act))
}
