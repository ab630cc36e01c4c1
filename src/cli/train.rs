//! `podc train` and `podc bench train`: the Anakin driver from the command line.

use super::{Failure, load};
use crate::diag::emit_stderr;
use crate::runtime::Runtime;
use crate::train::anakin::{RunShape, Trainer, agent_and_env, record};
use crate::train::{checkpoint, metrics, plot, progress::Progress};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Instant;

pub struct TrainArgs {
    pub file: PathBuf,
    pub agent: Option<String>,
    pub shape: RunShape,
    pub total_steps: u64,
    pub seed: i64,
    pub out: PathBuf,
    pub resume: Option<PathBuf>,
    /// Checkpoint every this many calls (and at the end).
    pub checkpoint_every: u64,
    pub quiet: bool,
}

fn trainer<'c>(
    client: &'c crate::runtime::Client,
    file: &Path,
    agent: Option<&str>,
    shape: RunShape,
) -> Result<Trainer<'c>, Failure> {
    shape.check()?;
    let prog = load(file)?;
    let start = Instant::now();
    let (agent, env) = agent_and_env(&prog, agent, shape).map_err(|e| match e {
        Ok(m) => Failure::Message(format!("`{}`: {m}", file.display())),
        Err(d) => {
            emit_stderr(&prog.map, &[d]);
            Failure::Reported
        }
    })?;
    Ok(Trainer::new(client, &prog, (&agent, &env), shape, start)?)
}

/// The run's settings that a resumed run must share.
fn config(a: &TrainArgs, agent: &str) -> Value {
    json!({
        "file": a.file.display().to_string(),
        "agent": agent,
        "envs": a.shape.envs,
        "rollout": a.shape.rollout,
        "updates_per_call": a.shape.updates_per_call,
        "devices": a.shape.devices,
        "seed": a.seed,
    })
}

pub fn train(a: TrainArgs, plugin: Option<&Path>) -> Result<(), Failure> {
    let client = Runtime::open(plugin, Some(a.shape.devices))?;
    let mut t = trainer(&client, &a.file, a.agent.as_deref(), a.shape)?;
    let cfg = config(&a, &t.agent);
    let (mut calls, mut log) = match &a.resume {
        Some(dir) => {
            let (arrays, meta) = checkpoint::load(dir).map_err(|e| e.to_string())?;
            for (k, v) in cfg.as_object().expect("an object") {
                if k != "file" && meta["config"][k] != *v {
                    let msg = format!(
                        "cannot resume from `{}`: its `{k}` is {}, this run's is {v}; resume with the same flags",
                        dir.display(),
                        meta["config"][k]
                    );
                    return Err(Failure::Message(msg));
                }
            }
            t.restore(&arrays)?;
            let calls = meta["calls"].as_u64().ok_or("the checkpoint has no call count")?;
            let log = metrics::MetricsLog::open_resume(&a.out, calls * a.shape.steps_per_call())?;
            (calls, log)
        }
        None => {
            t.init(a.seed)?;
            (0, metrics::MetricsLog::create(&a.out)?)
        }
    };
    let per_call = a.shape.steps_per_call();
    let total_calls = a.total_steps.div_ceil(per_call);
    if !a.quiet {
        eprintln!(
            "training `{}` ({}): {} envs on {} device(s), {} steps x {} updates per call, compiled in {:.1} s",
            t.agent,
            a.file.display(),
            a.shape.envs,
            a.shape.devices,
            a.shape.rollout,
            a.shape.updates_per_call,
            t.compile_s
        );
    }
    let bar = Progress::new(total_calls * per_call, calls * per_call, a.quiet);
    let start = Instant::now();
    let mut last = Instant::now();
    while calls < total_calls {
        let report = t.step()?;
        calls += 1;
        let now = Instant::now();
        let sps = per_call as f64 / now.duration_since(last).as_secs_f64();
        last = now;
        let env_steps = calls * per_call;
        let updates = calls * a.shape.updates_per_call as u64;
        log.append(&record(&report, env_steps, updates, sps, start.elapsed().as_secs_f64()))?;
        bar.update(env_steps, report.episode_return);
        if calls % a.checkpoint_every == 0 || calls == total_calls {
            save(&t, &a.out, &cfg, calls, env_steps)?;
        }
    }
    bar.finish();
    let records = metrics::read(&a.out)?;
    plot::plot_curve(&a.out.join("curve.png"), &plot::curve_points(&records), &t.agent)?;
    if !a.quiet {
        let last_return = records.iter().rev().find_map(|r| r.get("episode_return").and_then(Value::as_f64));
        eprintln!(
            "done: {} env steps; last mean return {}; wrote {}",
            calls * per_call,
            last_return.map_or("-".into(), |r| format!("{r:.3}")),
            a.out.display()
        );
    }
    Ok(())
}

fn save(t: &Trainer, dir: &Path, cfg: &Value, calls: u64, env_steps: u64) -> Result<(), Failure> {
    let arrays = t.snapshot()?;
    let meta = json!({ "config": cfg, "calls": calls, "env_steps": env_steps });
    checkpoint::save(dir, &arrays, &meta).map_err(|e| format!("cannot write the checkpoint to `{}`: {e}", dir.display()))?;
    Ok(())
}

pub struct BenchTrainArgs {
    pub file: PathBuf,
    pub agent: Option<String>,
    pub shape: RunShape,
    pub runs: usize,
    pub json: bool,
}

/// Compile time, then env steps per second (learning included) as the median of
/// `runs` timed calls after a warm-up call.
pub fn bench(a: BenchTrainArgs, plugin: Option<&Path>) -> Result<(), Failure> {
    let client = Runtime::open(plugin, Some(a.shape.devices))?;
    let mut t = trainer(&client, &a.file, a.agent.as_deref(), a.shape)?;
    t.init(0)?;
    t.step()?;
    let mut runs = vec![];
    for _ in 0..a.runs {
        // A call returns once its metrics are downloaded, so it has finished.
        let t0 = Instant::now();
        t.step()?;
        runs.push(a.shape.steps_per_call() as f64 / t0.elapsed().as_secs_f64());
    }
    let mut sorted = runs.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted[sorted.len() / 2];
    if a.json {
        let s = a.shape;
        println!(
            "{}",
            json!({
                "compile_s": t.compile_s,
                "steps_per_sec": median,
                "runs": runs,
                "envs": s.envs,
                "rollout": s.rollout,
                "updates_per_call": s.updates_per_call,
                "devices": s.devices,
            })
        );
    } else {
        println!("compile: {:.2} s", t.compile_s);
        println!("{median:.0} env steps/s (learning included; median of {} calls)", a.runs);
    }
    Ok(())
}
