//! `podc train --env URI` and `podc bench train --env URI`: the Sebulba driver.

use super::{
    BenchTrainArgs, Checkpoint, Failure, SebulbaFlags, Sizes, TrainArgs, bind_length, check_job, config, fingerprint,
    finished, prepare, print_fingerprint, resume_read,
};
use crate::binding;
use crate::cli::run_env::{own_env_uri, pod_load};
use crate::cli::{load, load_noted};
use crate::diag::emit_stderr;
use crate::distributed::Session;
use crate::driver::LoadOptions;
use crate::elab::agent::{AgentFuncs, build_agent};
use crate::host::{Packages, pod_programs};
use crate::lower::stablehlo::lower_module;
use crate::overrides::Override;
use crate::resolve::Program;
use crate::train::anakin::pick_agent;
use crate::train::fingerprint::Fingerprint;
use crate::train::run;
use crate::train::sebulba::{Config, Lowered, Sebulba};
use serde_json::{Value, json};
use std::path::Path;
use std::time::Instant;

/// The host env's URI: `--env`, else the agent's own `.pod` env through `pod:`.
fn env_uri(prog: &Program, agent: &AgentFuncs, flags: &SebulbaFlags) -> Result<String, Failure> {
    if let Some(uri) = &flags.env {
        // A malformed URI is reported before anything compiles.
        crate::host::EnvUri::parse(uri)?;
        return Ok(uri.clone());
    }
    let name = &agent.info.env.name;
    own_env_uri(prog, name).ok_or_else(|| {
        Failure::Message(format!("env `{name}` is `extern`: name the host env to train on with `--env URI`"))
    })
}

/// The run's layout from the flags; the rollout as for Anakin. Unless a flag says,
/// actor threads double-buffer their envs only when the actors act on an accelerator:
/// on CPU devices acting and stepping compete for the same cores, and the second batch
/// costs device calls without buying overlap (docs/performance.md measures both).
fn layout(
    (prog, overrides): (&Program, &[Override]),
    agent: &str,
    sizes: &Sizes,
    flags: &SebulbaFlags,
    accelerator: bool,
) -> Result<Config, Failure> {
    if sizes.seeds != 1 {
        return Err(Failure::Message("`--seeds` batches runs in one Anakin program; Sebulba trains one seed".into()));
    }
    if sizes.devices != 1 {
        return Err(Failure::Message(
            "`--devices` is Anakin's: Sebulba takes `--actor-devices` and `--learner-devices`".into(),
        ));
    }
    let rollout = sizes.shape(prog, overrides, agent).rollout;
    let host = host_options(flags);
    let cfg = Config {
        uri: String::new(),
        envs: sizes.envs,
        rollout,
        updates_per_report: sizes.updates_per_call,
        actor_threads: flags.actor_threads.unwrap_or(2 * flags.actor_devices.len()),
        actor_devices: flags.actor_devices.clone(),
        learner_devices: flags.learner_devices.clone(),
        max_policy_lag: flags.max_policy_lag,
        double_buffer: flags.double_buffer || (!flags.single_buffer && accelerator),
        host,
        processes: sizes.processes,
        rank: 0,
    };
    cfg.check()?;
    Ok(cfg)
}

fn host_options(flags: &SebulbaFlags) -> crate::host::Options {
    let mut host = crate::host::Options::new(1);
    host.env_workers = flags.env_workers;
    host.python = flags.python.clone();
    host.env_import = flags.env_import.clone();
    host
}

/// With `--env URI`, the consts that the agent's `extern env` names in its spaces take
/// that env's sizes (see `binding`), alongside the `--set` values. A program that does not
/// check with them is reported with the env named. Also returns the packages of a Python
/// host env, for the run's fingerprint.
fn bind_env(
    file: &Path,
    opts: &LoadOptions,
    agent: Option<&str>,
    flags: &SebulbaFlags,
) -> Result<(LoadOptions, Option<Packages>), Failure> {
    let Some(uri) = &flags.env else { return Ok((opts.clone(), None)) };
    let prog = load(file, opts)?;
    let name = pick_agent(&prog, agent).map_err(|m| format!("`{}`: {m}", file.display()))?;
    let takes_sizes = binding::takes_sizes(&prog, &name);
    let python = crate::host::EnvUri::parse(uri)?.backend != crate::host::Backend::Pod;
    if !takes_sizes && !python {
        return Ok((opts.clone(), None));
    }
    let mut host = host_options(flags);
    host.load = pod_load(uri, file, opts);
    let (spec, packages) = crate::host::describe_uri(uri, &host)?;
    let packages = python.then_some(packages);
    if !takes_sizes {
        return Ok((opts.clone(), packages));
    }
    let bound = binding::bind(&prog, &name, &spec, uri, &opts.overrides)?;
    let mut out = opts.clone();
    out.overrides.extend(bound.iter().cloned());
    load_noted(file, &out, Some(&binding::note(&bound, uri)))?;
    Ok((out, packages))
}

/// Everything up to compiling the driver: the program, the agent's functions, the layout,
/// and the devices the client must have.
struct Setup {
    prog: Program,
    agent: AgentFuncs,
    cfg: Config,
    devices: usize,
    start: Instant,
}

fn setup(
    file: &Path,
    opts: &LoadOptions,
    agent: Option<&str>,
    sizes: &Sizes,
    flags: &SebulbaFlags,
    target: &crate::cli::Target,
) -> Result<Setup, Failure> {
    let start = Instant::now();
    let (prog, name, _) = prepare(file, opts, agent, &Sizes { devices: 1, ..*sizes })?;
    let devices = flags.actor_devices.iter().chain(&flags.learner_devices).max().map_or(1, |d| d + 1);
    let accelerator = target.options.backend != crate::runtime::Backend::Cpu;
    let mut cfg = layout((&prog, &opts.overrides), &name, sizes, flags, accelerator)?;
    let per_device = cfg.local_envs() / cfg.learner_devices.len();
    let agent = build_agent(&prog, &opts.overrides, &name, per_device, cfg.rollout).map_err(|d| {
        emit_stderr(&prog.map, &[*d]);
        Failure::Reported
    })?;
    cfg.uri = env_uri(&prog, &agent, flags)?;
    cfg.host.load = pod_load(&cfg.uri, file, opts);
    Ok(Setup { prog, agent, cfg, devices, start })
}

/// Adds the host env to a run's fingerprint: a Python env's packages, or a `pod:` env's
/// programs at the batch an actor thread steps.
fn fingerprint_env(fp: &mut Fingerprint, packages: Option<&Packages>, cfg: &Config) -> Result<(), Failure> {
    if let Some(p) = packages {
        fp.host(p);
        return Ok(());
    }
    let mut host = cfg.host.clone();
    host.num_envs = cfg.batch();
    if let Some(programs) = pod_programs(&cfg.uri, &host)? {
        for (name, f) in ["env.reset", "env.step", "env.keys"].into_iter().zip(programs) {
            fp.program(name, &lower_module(&f, 1));
        }
    }
    Ok(())
}

fn sebulba_config(a: &TrainArgs, s: &Setup) -> Value {
    let shape = a.sizes.shape(&s.prog, &a.load.overrides, &s.agent.info.name);
    let mut cfg = config(a, &s.agent.info.name, shape);
    let c = &s.cfg;
    let o = cfg.as_object_mut().expect("an object");
    o.insert("arch".into(), json!("sebulba"));
    o.insert("env".into(), json!(c.uri));
    if !c.host.env_import.is_empty() {
        o.insert("env_import".into(), json!(recorded_imports(&c.host.env_import)));
    }
    o.insert("rollout".into(), json!(c.rollout));
    // Over the job, as `envs` is: the same run at any process count has the same config.
    o.insert("devices".into(), json!(1));
    o.insert("actor_threads".into(), json!(c.actor_threads * c.processes));
    o.insert("learner_devices".into(), json!(c.learner_devices.len() * c.processes));
    o.insert("max_policy_lag".into(), json!(c.max_policy_lag));
    o.insert("single_buffer".into(), json!(!c.double_buffer));
    cfg
}

/// `--env-import` as the checkpoint records it, for `podc eval` and `play` to import
/// again: `.py` files as absolute paths, so that they are found from any directory.
fn recorded_imports(modules: &[String]) -> Vec<String> {
    let absolute = |m: &String| std::path::Path::new(m).canonicalize().ok().filter(|_| m.ends_with(".py"));
    modules.iter().map(|m| absolute(m).map_or_else(|| m.clone(), |p| p.display().to_string())).collect()
}

pub fn train(
    mut a: TrainArgs,
    target: &crate::cli::Target,
    job: Option<&'static Session>,
    checkpoint: Option<Checkpoint>,
) -> Result<(), Failure> {
    let flags = a.sebulba.clone().expect("called for Sebulba runs");
    let writes = super::begin_in(&a, job)?;
    let packages;
    (a.load, packages) = bind_env(&a.file, &a.load, a.agent.as_deref(), &flags)?;
    bind_length(&mut a)?;
    let mut s = setup(&a.file, &a.load, a.agent.as_deref(), &a.sizes, &flags, target)?;
    let cfg = sebulba_config(&a, &s);
    let resumed = resume_read(&a, checkpoint, &cfg)?;
    if finished(&a, resumed.as_ref()) {
        return Ok(());
    }
    if let Some(j) = job {
        s.cfg.rank = j.rank;
    }
    let lowered = Lowered::new(&s.prog, &s.agent, &s.cfg)?;
    let mut fp = fingerprint(target)?;
    lowered.fingerprint(&s.agent, &mut fp);
    fingerprint_env(&mut fp, packages.as_ref(), &s.cfg)?;
    if print_fingerprint(&a, &fp) {
        return Ok(());
    }
    let client = super::super::open_runtime(target, Some(s.devices))?;
    if let Some(j) = job {
        let extra = json!({"total_steps": a.total_steps(), "checkpoint_every": a.checkpoint_every, "resume": a.resume.is_some()});
        check_job(j, &a.file, &cfg, extra, &client, s.cfg.learner_devices.len())?;
    }
    let mut t = Sebulba::compile(&client, lowered, &s.agent, s.cfg.clone(), s.start)?;
    if let Some(j) = job {
        t = t.in_job(j);
    }
    if !a.quiet && writes {
        let c = &s.cfg;
        let processes = match c.processes {
            1 => String::new(),
            p => format!(" in each of {p} processes"),
        };
        eprintln!(
            "training `{}` ({}) on `{}` with Sebulba: {} envs in {} actor thread(s) on device(s) {:?}, learner on {:?}{processes}, {} steps per rollout, compiled in {:.1} s",
            s.agent.info.name,
            a.file.display(),
            c.uri,
            c.envs,
            c.actor_threads,
            c.actor_devices,
            c.learner_devices,
            c.rollout,
            t.compile_s
        );
    }
    // A new run's directory names the host env by its ID (`PPO__Acrobot-v1__0__..`), a
    // `pod:` env by its name: the agent's env is often a generic `extern env`.
    let uri = crate::host::EnvUri::parse(&s.cfg.uri)?;
    let env = if uri.backend == crate::host::Backend::Pod { t.spec.name.clone() } else { uri.id.clone() };
    let o = super::options_in(&a, (&s.agent.info.name, &env), (cfg, &fp), job)?;
    let summary = run::train(&mut t, &o, resumed)?;
    super::end_in(&a, &o.out, &summary, job)
}

/// Compile time, then env steps per second as the median over `runs` reports (of
/// `--updates-per-call` updates each) after a warm-up report; plus how the actor threads
/// and the learner spent their time.
pub fn bench(a: BenchTrainArgs, target: &crate::cli::Target) -> Result<(), Failure> {
    let flags = a.sebulba.clone().expect("called for Sebulba runs");
    let (load, _) = bind_env(&a.file, &a.load, a.agent.as_deref(), &flags)?;
    let s = setup(&a.file, &load, a.agent.as_deref(), &a.sizes, &flags, target)?;
    let client = super::super::open_runtime(target, Some(s.devices))?;
    let mut t = Sebulba::new(&client, &s.prog, &s.agent, s.cfg.clone(), s.start)?;
    let runs = run::bench(&mut t, a.runs)?;
    let sps: Vec<f64> = runs.iter().map(|r| r.steps_per_sec).collect();
    let share = |key: &str| {
        crate::stats::median(&runs.iter().map(|r| r.extra[key].as_f64().unwrap_or(f64::NAN)).collect::<Vec<_>>())
    };
    let c = &s.cfg;
    if a.json {
        println!(
            "{}",
            json!({
                "compile_s": t.compile_s,
                "steps_per_sec": crate::stats::median(&sps),
                "runs": sps,
                "envs": c.envs,
                "rollout": c.rollout,
                "updates_per_call": c.updates_per_report,
                "devices": c.learner_devices.len(),
                "arch": "sebulba",
                "env": c.uri,
                "actor_threads": c.actor_threads,
                "actor_idle": share("actor_idle"),
                "actor_acting": share("actor_acting"),
                "actor_stepping": share("actor_stepping"),
                "learner_idle": share("learner_idle"),
            })
        );
    } else {
        println!("compile: {:.2} s", t.compile_s);
        println!(
            "{:.0} env steps/s (learning included; median of {} reports); actors acting {:.0}%, stepping envs {:.0}%, idle {:.0}%; learner idle {:.0}%",
            crate::stats::median(&sps),
            a.runs,
            100.0 * share("actor_acting"),
            100.0 * share("actor_stepping"),
            100.0 * share("actor_idle"),
            100.0 * share("learner_idle")
        );
    }
    Ok(())
}
