//! `podc train` and `podc bench train`: the Anakin driver from the command line.

use super::{Failure, load};
use crate::diag::emit_stderr;
use crate::driver::LoadOptions;
use crate::overrides::{self, Override};
use crate::programs::anakin::{AnakinPrograms, DeviceShape, anakin_programs};
use crate::resolve::Program;
use crate::train::anakin::{RunShape, Trainer, agent_and_env, pick_agent};
use crate::train::run::{self, RunOptions, Summary};
use crate::train::{checkpoint, interrupt, runs};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Instant;

pub(super) mod sebulba;

/// `podc train`'s default `--envs` and `--updates-per-call`.
pub const DEFAULT_ENVS: usize = 32;
pub const DEFAULT_UPDATES_PER_CALL: usize = 10;

/// The sizes given on the command line; the rollout defaults to the one the agent fixes,
/// else 16.
#[derive(Clone, Copy)]
pub struct Sizes {
    pub envs: usize,
    pub rollout: Option<usize>,
    pub updates_per_call: usize,
    pub devices: usize,
    pub seeds: usize,
}

impl Sizes {
    pub(super) fn shape(&self, prog: &Program, overrides: &[Override], agent: &str) -> RunShape {
        let rollout = self.rollout.or_else(|| crate::elab::agent::fixed_rollout(prog, overrides, agent)).unwrap_or(16);
        let (envs, updates_per_call, devices, seeds) = (self.envs, self.updates_per_call, self.devices, self.seeds);
        RunShape { envs, rollout, updates_per_call, devices, seeds }
    }
}

pub struct TrainArgs {
    pub file: PathBuf,
    /// Library directories and `--set` overrides.
    pub load: LoadOptions,
    pub agent: Option<String>,
    pub sizes: Sizes,
    pub total_steps: u64,
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
}

/// An agent's Anakin programs at `podc train`'s default sizes, for `podc build`.
pub fn anakin_programs_at_defaults(
    prog: &Program,
    overrides: &[Override],
    agent: &str,
) -> Result<AnakinPrograms, Failure> {
    let sizes =
        Sizes { envs: DEFAULT_ENVS, rollout: None, updates_per_call: DEFAULT_UPDATES_PER_CALL, devices: 1, seeds: 1 };
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
        "devices": shape.devices,
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
fn resume_overrides(a: &mut TrainArgs) -> Result<(), Failure> {
    if let (Some(dir), true) = (&a.resume, a.load.overrides.is_empty()) {
        let (_, meta) = checkpoint::load(dir).map_err(|e| e.to_string())?;
        a.load.overrides = overrides::from_json(&meta["config"]["overrides"]);
    }
    Ok(())
}

/// What the run loop takes of the flags; `env` names the env in a new run's directory.
pub(super) fn run_options(a: &TrainArgs, (agent, env): (&str, &str), config: Value) -> Result<RunOptions, Failure> {
    let out = match (&a.out, &a.resume) {
        (Some(out), _) => out.clone(),
        (None, Some(resumed)) => resumed.clone(),
        (None, None) => runs::new_dir(agent, env, a.seed)?,
    };
    Ok(RunOptions {
        out,
        config,
        seed: a.seed,
        total_steps: a.total_steps,
        checkpoint_every: a.checkpoint_every,
        quiet: a.quiet,
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

/// A checkpoint to resume from, read and compared with `config` before compiling.
pub(super) fn resume(a: &TrainArgs, config: &Value) -> Result<Option<run::Resume>, Failure> {
    Ok(a.resume.as_deref().map(|dir| run::resume_from(dir, config)).transpose()?)
}

/// The last line of a run; an interrupted run says how to go on, and fails with its signal.
pub(super) fn done(a: &TrainArgs, out: &Path, s: &Summary) -> Result<(), Failure> {
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
    resume_overrides(&mut a)?;
    if a.sebulba.is_some() {
        return sebulba::train(a, target);
    }
    begin(&a)?;
    let (prog, agent, shape) = prepare(&a.file, &a.load, a.agent.as_deref(), &a.sizes)?;
    let cfg = config(&a, &agent, shape);
    let resumed = resume(&a, &cfg)?;
    let client = super::open_runtime(target, Some(shape.devices))?;
    let mut t = trainer(&client, &prog, &a.load.overrides, &agent, shape)?;
    if !a.quiet {
        let seeds = match shape.seeds {
            1 => String::new(),
            n => format!("{n} seeds x "),
        };
        let cached = match t.cache() {
            crate::runtime::CacheStatus::Hit => " (loaded from the compilation cache)",
            _ => "",
        };
        eprintln!(
            "training `{}` ({}): {seeds}{} envs on {} device(s), {} steps x {} updates per call, compiled in {:.1} s{cached}",
            t.agent,
            a.file.display(),
            shape.envs,
            shape.devices,
            shape.rollout,
            shape.updates_per_call,
            t.compile_s
        );
    }
    let o = run_options(&a, (&t.agent, &t.env), cfg)?;
    let summary = run::train(&mut t, &o, resumed)?;
    done(&a, &o.out, &summary)
}

pub struct BenchTrainArgs {
    pub file: PathBuf,
    pub load: LoadOptions,
    pub agent: Option<String>,
    pub sizes: Sizes,
    pub runs: usize,
    pub json: bool,
    pub sebulba: Option<SebulbaFlags>,
}

/// Compile time, then env steps per second (learning included) as the median of
/// `runs` timed calls after a warm-up call.
pub fn bench(a: BenchTrainArgs, target: &super::Target) -> Result<(), Failure> {
    if a.sebulba.is_some() {
        return sebulba::bench(a, target);
    }
    let (prog, agent, shape) = prepare(&a.file, &a.load, a.agent.as_deref(), &a.sizes)?;
    let client = super::open_runtime(target, Some(shape.devices))?;
    let mut t = trainer(&client, &prog, &a.load.overrides, &agent, shape)?;
    let runs: Vec<f64> = run::bench(&mut t, a.runs)?.into_iter().map(|r| r.steps_per_sec).collect();
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
                "seeds": s.seeds,
            })
        );
    } else {
        println!("compile: {:.2} s (compilation cache: {})", t.compile_s, t.cache().as_str());
        println!("{median:.0} env steps/s (learning included; median of {} calls)", a.runs);
    }
    Ok(())
}
