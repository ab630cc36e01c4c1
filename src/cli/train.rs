//! `podc train` and `podc bench train`: the Anakin driver from the command line.

use super::{Failure, load};
use crate::diag::emit_stderr;
use crate::distributed::{self, Session};
use crate::driver::LoadOptions;
use crate::overrides::{self, Override};
use crate::programs::anakin::{AnakinPrograms, DeviceShape, anakin_programs};
use crate::resolve::Program;
use crate::runtime::plugin;
use crate::train::anakin::{Lowered, RunShape, Trainer, agent_and_env, pick_agent};
use crate::train::fingerprint::Fingerprint;
use crate::train::run::{self, RunOptions, Summary};
use crate::train::{checkpoint, interrupt, runs};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Instant;

pub(super) mod sebulba;

/// `podc train`'s default `--envs` and `--updates-per-call`.
pub const DEFAULT_ENVS: usize = 32;
pub const DEFAULT_UPDATES_PER_CALL: usize = 10;
/// A new run's length when `--total-steps` does not say (a resumed run keeps its own).
pub const DEFAULT_TOTAL_STEPS: u64 = 500_000;

/// The sizes given on the command line; the rollout defaults to the one the agent fixes,
/// else 16.
#[derive(Clone, Copy)]
pub struct Sizes {
    pub envs: usize,
    pub rollout: Option<usize>,
    pub updates_per_call: usize,
    /// Devices of each process.
    pub devices: usize,
    /// Processes in the job (see `distributed`).
    pub processes: usize,
    pub seeds: usize,
}

impl Sizes {
    pub(super) fn shape(&self, prog: &Program, overrides: &[Override], agent: &str) -> RunShape {
        let rollout = self.rollout.or_else(|| crate::elab::agent::fixed_rollout(prog, overrides, agent)).unwrap_or(16);
        let (envs, updates_per_call, devices, seeds) = (self.envs, self.updates_per_call, self.devices, self.seeds);
        RunShape { envs, rollout, updates_per_call, devices, processes: self.processes, seeds }
    }
}

pub struct TrainArgs {
    pub file: PathBuf,
    /// Library directories and `--set` overrides.
    pub load: LoadOptions,
    pub agent: Option<String>,
    pub sizes: Sizes,
    /// `--total-steps`, else the resumed run's, else [`DEFAULT_TOTAL_STEPS`] (see
    /// [`TrainArgs::total_steps`]).
    pub total_steps: Option<u64>,
    pub seed: i64,
    /// `--out`, else the run's own directory (see `train::runs`).
    pub out: Option<PathBuf>,
    /// Write over the run `out` holds.
    pub force: bool,
    pub resume: Option<PathBuf>,
    /// Checkpoint every this many calls (and at the end).
    pub checkpoint_every: u64,
    pub quiet: bool,
    /// Set when the run is Sebulba's (`--env URI` or `--arch sebulba`).
    pub sebulba: Option<SebulbaFlags>,
    pub distributed: distributed::Flags,
    /// Print the run's fingerprint (`train::fingerprint`) and stop, compiling nothing.
    pub fingerprint: bool,
}

impl TrainArgs {
    /// The run's length in env steps (of each seed's run).
    pub fn total_steps(&self) -> u64 {
        self.total_steps.unwrap_or(DEFAULT_TOTAL_STEPS)
    }
}

/// An agent's Anakin programs at `podc train`'s default sizes, for `podc build`.
pub fn anakin_programs_at_defaults(
    prog: &Program,
    overrides: &[Override],
    agent: &str,
) -> Result<AnakinPrograms, Failure> {
    let sizes = Sizes {
        envs: DEFAULT_ENVS,
        rollout: None,
        updates_per_call: DEFAULT_UPDATES_PER_CALL,
        devices: 1,
        processes: 1,
        seeds: 1,
    };
    let shape = sizes.shape(prog, overrides, agent);
    let (agent, env) = agent_and_env(prog, overrides, agent, shape).map_err(|d| {
        emit_stderr(&prog.map, &[*d]);
        Failure::Reported
    })?;
    let per_device = DeviceShape { envs: shape.envs, steps: shape.rollout, updates: shape.updates_per_call };
    Ok(anakin_programs(prog, &agent, &env, per_device))
}

/// The flags of the Sebulba driver (`podc train --env URI`).
#[derive(clap::Args, Clone)]
pub struct SebulbaFlags {
    /// Train on a host env: `gymnasium:ID[?k=v&..]`, `envpool:ID[?..]`, `ale:GAME[?..]` or
    /// `pod:FILE.pod[?env=NAME]` (the Sebulba driver). Must match the agent's env.
    #[arg(long, value_name = "URI")]
    pub env: Option<String>,
    /// Actor threads (Sebulba; default 2 per actor device), each with `--envs / threads` envs.
    #[arg(long)]
    pub actor_threads: Option<usize>,
    /// Devices the actors run the policy on (Sebulba), e.g. `0` or `0,1`.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    pub actor_devices: Vec<usize>,
    /// Devices the learner is replicated over (Sebulba); may be the actors' own.
    #[arg(long, value_delimiter = ',', default_value = "0")]
    pub learner_devices: Vec<usize>,
    /// Let actors use the newest policy, at most N updates behind the learner (Sebulba;
    /// default: exactly one behind, which keeps runs deterministic).
    #[arg(long, value_name = "N")]
    pub max_policy_lag: Option<u64>,
    /// Step each actor thread's envs as one batch, not two halves that take turns
    /// (Sebulba): half the device calls, but no overlap of stepping and acting. The
    /// default on CPU actor devices, where acting and stepping share the cores.
    #[arg(long, conflicts_with = "double_buffer")]
    pub single_buffer: bool,
    /// Step each actor thread's envs as two halves that take turns, one stepping while
    /// the device acts on the other (Sebulba). The default on accelerator actor devices.
    #[arg(long)]
    pub double_buffer: bool,
    /// Worker processes per batch of host envs (Python backends).
    #[arg(long, default_value_t = 1)]
    pub env_workers: usize,
    /// The Python for env workers (else `PODC_PYTHON`, else `$VIRTUAL_ENV`, else a venv
    /// with pinned packages that podc makes in its cache on first use).
    #[arg(long, value_name = "PATH")]
    pub python: Option<PathBuf>,
    /// A module the workers import before making their envs (e.g. one that registers
    /// Gymnasium envs): a dotted name (found from the working directory) or a `.py` file.
    #[arg(long = "env-import", value_name = "MODULE")]
    pub env_import: Vec<String>,
}

/// The program, the agent's name and the run's sizes.
pub(super) fn prepare(
    file: &Path,
    opts: &LoadOptions,
    agent: Option<&str>,
    sizes: &Sizes,
) -> Result<(Program, String, RunShape), Failure> {
    let prog = load(file, opts)?;
    let agent = pick_agent(&prog, agent).map_err(|m| format!("`{}`: {m}", file.display()))?;
    let shape = sizes.shape(&prog, &opts.overrides, &agent);
    shape.check()?;
    Ok((prog, agent, shape))
}

fn trainer<'c>(
    client: &'c crate::runtime::Client,
    prog: &Program,
    overrides: &[Override],
    agent: &str,
    shape: RunShape,
) -> Result<Trainer<'c>, Failure> {
    let start = Instant::now();
    let (agent, env) = agent_and_env(prog, overrides, agent, shape).map_err(|d| {
        emit_stderr(&prog.map, &[*d]);
        Failure::Reported
    })?;
    Ok(Trainer::new(client, prog, (&agent, &env), shape, start)?)
}

/// The run's settings that a resumed run must share. `overrides` is there only when the
/// run has some, so that the configs of runs without stay as they were.
pub(super) fn config(a: &TrainArgs, agent: &str, shape: RunShape) -> Value {
    let mut cfg = json!({
        "file": a.file.display().to_string(),
        "agent": agent,
        "envs": shape.envs,
        "rollout": shape.rollout,
        "updates_per_call": shape.updates_per_call,
        // Over all processes: the same run at any process count has the same config.
        "devices": shape.total_devices(),
        "seed": a.seed,
    });
    // Only a run of several seeds says so, so that the configs of others stay as they were.
    if shape.seeds > 1 {
        cfg["seeds"] = json!(shape.seeds);
    }
    if !a.load.overrides.is_empty() {
        cfg["overrides"] = overrides::to_json(&a.load.overrides);
    }
    cfg
}

/// A resumed run without `--set` takes the overrides its checkpoint was made with, so
/// that it continues the same program; with `--set`, they must be the same (checked
/// with the other flags).
fn resume_overrides(a: &mut TrainArgs, checkpoint: Option<&Checkpoint>) {
    if let (Some((_, meta)), true) = (checkpoint, a.load.overrides.is_empty()) {
        a.load.overrides = overrides::from_json(&meta["config"]["overrides"]);
    }
}

/// A resumed run without `--total-steps` trains to its checkpoint's length (a checkpoint
/// made before runs recorded it: to the default).
fn resume_length(a: &mut TrainArgs, checkpoint: Option<&Checkpoint>) {
    if let (Some((_, meta)), None) = (checkpoint, a.total_steps) {
        a.total_steps = meta["total_steps"].as_u64();
    }
}

/// Binds the consts that hold the run's length (`binding::bind_run`) into `a.load`'s
/// overrides, checking the program with them.
pub(super) fn bind_length(a: &mut TrainArgs) -> Result<(), Failure> {
    let (prog, agent, shape) = prepare(&a.file, &a.load, a.agent.as_deref(), &a.sizes)?;
    let updates = a.total_steps().div_ceil(shape.steps_per_call()) * shape.updates_per_call as u64;
    let bound = crate::binding::bind_run(&prog, (a.total_steps(), updates), &a.load.overrides)?;
    if bound.is_empty() {
        return Ok(());
    }
    let values: Vec<String> = bound.iter().map(|o| format!("`{} = {}`", o.name, o.value)).collect();
    a.load.overrides.extend(bound);
    let note =
        format!("{} from the run's length (`--total-steps {}`, agent `{agent}`)", values.join(", "), a.total_steps());
    super::load_noted(&a.file, &a.load, Some(&note)).map(drop)
}

/// A checkpoint's arrays and meta.
pub(super) type Checkpoint = (Vec<(String, crate::array::Array)>, Value);

/// The checkpoint `--resume` names, read once; in a job, read by process 0 and sent to
/// the others, so that no file system need be shared.
fn read_resume(a: &TrainArgs, job: Option<&Session>) -> Result<Option<Checkpoint>, Failure> {
    let Some(dir) = &a.resume else { return Ok(None) };
    let Some(job) = job else { return Ok(Some(checkpoint::load(dir).map_err(|e| e.to_string())?)) };
    let mine = match job.rank {
        0 => {
            let (arrays, meta) = checkpoint::load(dir).map_err(|e| e.to_string())?;
            Some(checkpoint::to_bytes(&arrays, &meta)?)
        }
        _ => None,
    };
    let bytes = job.broadcast("resume", mine.as_deref())?;
    Ok(Some(checkpoint::from_bytes(&bytes).map_err(|e| e.to_string())?))
}

/// Joins the job that the flags or the environment describe; `None` for one process.
pub(super) fn join(flags: &distributed::Flags, target: &super::Target) -> Result<Option<&'static Session>, Failure> {
    let Some(t) = distributed::detect(flags, &|k| std::env::var(k).ok())? else { return Ok(None) };
    if target.options.backend != crate::runtime::Backend::Cpu {
        return Err(Failure::Message(
            "training across processes runs on the CPU plugin for now (`--backend cpu`): the CUDA plugin's own multi-process support is not wired in yet".into(),
        ));
    }
    distributed::gloo::available()?;
    let s = Session::start(&t, std::time::Duration::from_secs(flags.distributed_timeout))?;
    Ok(Some(Box::leak(Box::new(s))))
}

/// In a job: every process must run the same program with the same settings; then gloo
/// joins the processes, for the programs' collectives.
pub(super) fn check_job(
    job: &Session,
    file: &Path,
    cfg: &Value,
    extra: Value,
    client: &crate::runtime::Client,
    devices: usize,
) -> Result<(), Failure> {
    use sha2::Digest;
    let source = std::fs::read(file).map_err(|e| format!("cannot read `{}`: {e}", file.display()))?;
    let mut settings = cfg.clone();
    settings["program_sha256"] = json!(format!("{:x}", sha2::Sha256::digest(&source)));
    settings["podc"] = json!(env!("CARGO_PKG_VERSION"));
    if let (Some(s), Some(e)) = (settings.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    job.check_same(&settings)?;
    distributed::gloo::connect(client, job.coordinator, (job.rank, job.processes), devices, job.timeout)?;
    Ok(())
}

/// What the run loop takes of the flags; `env` names the env in a new run's directory.
fn run_options(
    a: &TrainArgs,
    (agent, env): (&str, &str),
    config: Value,
    fingerprint: Value,
) -> Result<RunOptions, Failure> {
    let out = match (&a.out, &a.resume) {
        (Some(out), _) => out.clone(),
        (None, Some(resumed)) => resumed.clone(),
        (None, None) => runs::new_dir(agent, env, a.seed)?,
    };
    Ok(RunOptions {
        out,
        config,
        seed: a.seed,
        total_steps: a.total_steps(),
        checkpoint_every: a.checkpoint_every,
        quiet: a.quiet,
        job: None,
        fingerprint,
    })
}

/// Refuses, before anything is compiled, an `--out` that holds another run; and installs
/// the handlers that let SIGINT and SIGTERM stop the run checkpointed.
pub(super) fn begin(a: &TrainArgs) -> Result<(), Failure> {
    if let Some(out) = &a.out {
        runs::check_out(out, a.resume.as_deref(), a.force)?;
    }
    Ok(interrupt::install()?)
}

/// The checkpoint to resume from (already read), compared with `config` before compiling.
pub(super) fn resume_read(
    a: &TrainArgs,
    checkpoint: Option<Checkpoint>,
    config: &Value,
) -> Result<Option<run::Resume>, Failure> {
    match (&a.resume, checkpoint) {
        (Some(dir), Some(c)) => Ok(Some(run::resume_from(dir, c, config)?)),
        _ => Ok(None),
    }
}

/// Whether the resumed run has already trained its length; then it says so.
pub(super) fn finished(a: &TrainArgs, resumed: Option<&run::Resume>) -> bool {
    let Some(r) = resumed else { return false };
    let done = r.meta["env_steps"].as_u64().unwrap_or(0);
    let finished = done >= a.total_steps();
    if finished {
        eprintln!(
            "`{}` has trained {done} env steps of its {}: nothing to do (to train it further, give a larger `--total-steps`)",
            r.from.display(),
            a.total_steps()
        );
    }
    finished
}

/// The fingerprint's start: the plugin `target` runs on.
pub(super) fn fingerprint(target: &super::Target) -> Result<Fingerprint, Failure> {
    Ok(Fingerprint::new(plugin::identity(target.options.backend, target.plugin.as_deref())?))
}

/// With `--fingerprint`, prints it (and the run stops there).
pub(super) fn print_fingerprint(a: &TrainArgs, f: &Fingerprint) -> bool {
    if a.fingerprint {
        println!("{}", f.to_json());
    }
    a.fingerprint
}

/// The last line of a run; an interrupted run says how to go on, and fails with its signal.
fn done(a: &TrainArgs, out: &Path, s: &Summary, job: bool) -> Result<(), Failure> {
    if let (Some(signal), true) = (s.interrupted, job) {
        eprintln!(
            "stopped by {} at {} env steps, checkpointed in {}; continue by starting the job again with `--resume {}` in place of `--out`",
            interrupt::name(signal),
            s.env_steps,
            out.display(),
            out.display()
        );
        return Err(Failure::Interrupted(signal));
    }
    if let Some(signal) = s.interrupted {
        eprintln!(
            "stopped by {} at {} env steps, checkpointed in {}; continue with:\n  {}",
            interrupt::name(signal),
            s.env_steps,
            out.display(),
            resume_command(out)
        );
        return Err(Failure::Interrupted(signal));
    }
    if !a.quiet {
        eprintln!(
            "done: {} env steps; last mean return {}; wrote {}",
            s.env_steps,
            s.last_return.map_or("-".into(), |r| format!("{r:.3}")),
            out.display()
        );
    }
    Ok(())
}

/// This process's command line with `--resume OUT` in place of any `--out`, `--force` and
/// `--resume` it had: the same run, continued in its directory.
fn resume_command(out: &Path) -> String {
    let mut words = vec![];
    let mut args = std::env::args();
    while let Some(w) = args.next() {
        match w.as_str() {
            "--out" | "--resume" => {
                args.next();
            }
            "--force" => {}
            _ if w.starts_with("--out=") || w.starts_with("--resume=") => {}
            _ => words.push(w),
        }
    }
    words.extend(["--resume".into(), out.display().to_string()]);
    words.iter().map(|w| shell_word(w)).collect::<Vec<_>>().join(" ")
}

/// `w` quoted for a POSIX shell where it needs to be.
fn shell_word(w: &str) -> String {
    match !w.is_empty() && w.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=,@+%".contains(c)) {
        true => w.to_string(),
        false => format!("'{}'", w.replace('\'', "'\\''")),
    }
}

pub fn train(mut a: TrainArgs, target: &super::Target) -> Result<(), Failure> {
    let job = join(&a.distributed, target)?;
    let checkpoint = read_resume(&a, job)?;
    resume_overrides(&mut a, checkpoint.as_ref());
    resume_length(&mut a, checkpoint.as_ref());
    if let Some(j) = job {
        a.sizes.processes = j.processes;
    }
    if a.sebulba.is_some() {
        return sebulba::train(a, target, job, checkpoint);
    }
    let writes = begin_in(&a, job)?;
    bind_length(&mut a)?;
    let (prog, agent, shape) = prepare(&a.file, &a.load, a.agent.as_deref(), &a.sizes)?;
    let cfg = config(&a, &agent, shape);
    let resumed = resume_read(&a, checkpoint, &cfg)?;
    if finished(&a, resumed.as_ref()) {
        return Ok(());
    }
    let start = Instant::now();
    let (agent_f, env_f) = agent_and_env(&prog, &a.load.overrides, &agent, shape).map_err(|d| {
        emit_stderr(&prog.map, &[*d]);
        Failure::Reported
    })?;
    let lowered = Lowered::new(&prog, (&agent_f, &env_f), shape)?;
    let mut fp = fingerprint(target)?;
    lowered.fingerprint(&mut fp);
    if print_fingerprint(&a, &fp) {
        return Ok(());
    }
    let client = super::open_runtime(target, Some(shape.devices))?;
    if let Some(j) = job {
        let extra = json!({"total_steps": a.total_steps(), "checkpoint_every": a.checkpoint_every, "resume": a.resume.is_some()});
        check_job(j, &a.file, &cfg, extra, &client, shape.devices)?;
    }
    let names = (agent_f.info.name.as_str(), env_f.info.name.as_str());
    let mut t = Trainer::compile(&client, lowered, names, shape, start)?;
    if let Some(j) = job {
        t = t.in_job(j);
    }
    if !a.quiet && writes {
        let seeds = match shape.seeds {
            1 => String::new(),
            n => format!("{n} seeds x "),
        };
        let cached = match t.cache() {
            crate::runtime::CacheStatus::Hit => " (loaded from the compilation cache)",
            _ => "",
        };
        let devices = match shape.processes {
            1 => format!("{} device(s)", shape.devices),
            p => format!("{} device(s) in each of {p} processes", shape.devices),
        };
        eprintln!(
            "training `{}` ({}): {seeds}{} envs on {devices}, {} steps x {} updates per call, compiled in {:.1} s{cached}",
            t.agent,
            a.file.display(),
            shape.envs,
            shape.rollout,
            shape.updates_per_call,
            t.compile_s
        );
    }
    let o = options_in(&a, (&t.agent, &t.env), (cfg, &fp), job)?;
    let summary = run::train(&mut t, &o, resumed)?;
    end_in(&a, &o.out, &summary, job)
}

/// [`begin`] for a process of `job`: only process 0 writes a run (the others install the
/// signal handlers only). Returns whether this process writes.
fn begin_in(a: &TrainArgs, job: Option<&Session>) -> Result<bool, Failure> {
    match job.is_none_or(|j| j.rank == 0) {
        true => begin(a).map(|()| true),
        false => interrupt::install().map(|()| false).map_err(Failure::Message),
    }
}

/// [`run_options`] for a process of `job`: the others write nothing, so need no directory.
fn options_in(
    a: &TrainArgs,
    names: (&str, &str),
    (config, fingerprint): (Value, &Fingerprint),
    job: Option<&'static Session>,
) -> Result<RunOptions, Failure> {
    let fingerprint = fingerprint.to_json();
    let mut o = match job.is_none_or(|j| j.rank == 0) {
        true => run_options(a, names, config, fingerprint)?,
        false => RunOptions {
            out: PathBuf::new(),
            config,
            seed: a.seed,
            total_steps: a.total_steps(),
            checkpoint_every: a.checkpoint_every,
            quiet: true,
            job: None,
            fingerprint,
        },
    };
    o.job = job;
    Ok(o)
}

/// [`done`] for a process of `job`, after every process has finished.
fn end_in(a: &TrainArgs, out: &Path, s: &Summary, job: Option<&Session>) -> Result<(), Failure> {
    if let Some(j) = job {
        j.finish()?;
        if j.rank != 0 {
            return Ok(());
        }
    }
    done(a, out, s, job.is_some())
}

pub struct BenchTrainArgs {
    pub file: PathBuf,
    pub load: LoadOptions,
    pub agent: Option<String>,
    pub sizes: Sizes,
    pub runs: usize,
    pub json: bool,
    pub sebulba: Option<SebulbaFlags>,
    pub distributed: distributed::Flags,
}

/// Compile time, then env steps per second (learning included) as the median of
/// `runs` timed calls after a warm-up call.
pub fn bench(a: BenchTrainArgs, target: &super::Target) -> Result<(), Failure> {
    let job = join(&a.distributed, target)?;
    if a.sebulba.is_some() {
        if job.is_some() {
            return Err(Failure::Message("Sebulba does not train across processes yet: run it in one process".into()));
        }
        return sebulba::bench(a, target);
    }
    let mut sizes = a.sizes;
    sizes.processes = job.map_or(1, |j| j.processes);
    let (prog, agent, shape) = prepare(&a.file, &a.load, a.agent.as_deref(), &sizes)?;
    let client = super::open_runtime(target, Some(shape.devices))?;
    if let Some(j) = job {
        let cfg = json!({"agent": agent, "envs": shape.envs, "rollout": shape.rollout, "updates_per_call": shape.updates_per_call, "devices": shape.total_devices(), "seeds": shape.seeds, "runs": a.runs});
        check_job(j, &a.file, &cfg, json!({}), &client, shape.devices)?;
    }
    let mut t = trainer(&client, &prog, &a.load.overrides, &agent, shape)?;
    if let Some(j) = job {
        t = t.in_job(j);
    }
    let began = (Instant::now(), distributed::gloo::time_spent().0);
    let runs: Vec<f64> = run::bench(&mut t, a.runs)?.into_iter().map(|r| r.steps_per_sec).collect();
    // In a job: the share of the devices' time spent waiting in cross-process sums.
    let all_reduce = job.map(|_| {
        let (spent, calls) = distributed::gloo::time_spent();
        ((spent - began.1).as_secs_f64() / (began.0.elapsed().as_secs_f64() * shape.devices as f64), calls)
    });
    if let Some(j) = job {
        j.finish()?;
        if j.rank != 0 {
            return Ok(());
        }
    }
    let median = crate::stats::median(&runs);
    if a.json {
        let s = shape;
        println!(
            "{}",
            json!({
                "compile_s": t.compile_s,
                "cache": t.cache().as_str(),
                "steps_per_sec": median,
                "runs": runs,
                "envs": s.envs,
                "rollout": s.rollout,
                "updates_per_call": s.updates_per_call,
                "devices": s.devices,
                "processes": s.processes,
                "seeds": s.seeds,
                "all_reduce_share": all_reduce.map(|a| a.0),
            })
        );
    } else {
        println!("compile: {:.2} s (compilation cache: {})", t.compile_s, t.cache().as_str());
        println!("{median:.0} env steps/s (learning included; median of {} calls)", a.runs);
        if let Some((share, calls)) = all_reduce {
            println!("{:.1}% of process 0's device time in cross-process sums ({calls} calls)", 100.0 * share);
        }
    }
    Ok(())
}
