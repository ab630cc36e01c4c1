//! The run loop both drivers share: a fresh or resumed state, each report to the metrics
//! log and the progress bar, checkpoints on schedule and at the end, the learning curve.
//! A driver ([`Driver`]: Anakin's [`Trainer`](super::anakin::Trainer), Sebulba's
//! [`Sebulba`](super::sebulba::Sebulba)) only trains and reports; what a run writes is
//! decided here, once.

use super::tensorboard::EventWriter;
use super::{checkpoint, fingerprint, metrics, plot, progress::Progress};
use crate::array::Array;
use crate::distributed::Session;
use serde_json::{Map, Value, json};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// One seed's metrics over a report's updates.
pub struct Report {
    /// Mean return and length of the episodes that ended (`None` if none).
    pub episode_return: Option<f64>,
    pub episode_length: Option<f64>,
    pub episodes: u64,
    /// The agent's metrics by name, averaged over the updates (and the devices).
    pub metrics: Vec<(String, f64)>,
}

/// What a driver reports every [`Driver::units_per_report`] units.
pub struct Reported {
    /// Units done so far, over the run's whole life.
    pub units: u64,
    /// One report per seed.
    pub seeds: Vec<Report>,
    /// Fields the driver adds to each record, after the common ones.
    pub extra: Map<String, Value>,
}

/// A training driver, as the run loop sees it. Its work comes in units (Anakin: a call
/// of K updates; Sebulba: one update), reported in groups.
pub trait Driver {
    /// The checkpoint's name for the units done: `calls` or `updates`.
    const UNIT: &'static str;
    /// Env steps per unit, of each seed's run.
    fn steps_per_unit(&self) -> u64;
    /// Agent updates per unit.
    fn updates_per_unit(&self) -> u64;
    fn units_per_report(&self) -> u64;
    /// Independent runs batched together (seeds `seed ..`).
    fn seeds(&self) -> usize;
    /// The title of the learning curve.
    fn title(&self) -> String;
    /// A fresh state from `seed`.
    fn init(&mut self, seed: i64) -> Result<(), String>;
    /// The state by name, for a checkpoint.
    fn snapshot(&self) -> Result<Vec<(String, Array)>, String>;
    /// Puts a snapshot back.
    fn restore(&mut self, arrays: &[(String, Array)]) -> Result<(), String>;
    /// Trains from `start` units to `end` (a multiple of [`Driver::units_per_report`]
    /// past `start`), calling `on_report` after each report's units.
    fn run(
        &mut self,
        seed: i64,
        start: u64,
        end: u64,
        on_report: &mut dyn FnMut(&Self, Reported) -> Result<Next, String>,
    ) -> Result<(), String>;
}

/// What a driver does after a report.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Next {
    Go,
    /// Stop now: the run was interrupted (its checkpoint is written).
    Stop,
}

/// A run's settings besides the driver's.
pub struct RunOptions {
    pub out: PathBuf,
    /// The settings a resumed run must share (see [`resume_from`]).
    pub config: Value,
    pub seed: i64,
    pub total_steps: u64,
    /// Checkpoint every this many reports (and at the end).
    pub checkpoint_every: u64,
    pub quiet: bool,
    /// The job, when training across processes: only process 0 writes to `out`.
    pub job: Option<&'static Session>,
    /// The run's fingerprint (`train::fingerprint`), written beside its checkpoint.
    pub fingerprint: Value,
}

/// A checkpoint to continue from, read (and its settings compared) before compiling.
pub struct Resume {
    pub from: PathBuf,
    pub arrays: Vec<(String, Array)>,
    pub meta: Value,
}

/// The checkpoint read from `dir` (or sent by process 0), refused when any of its run's
/// settings differs from this run's `config` (one that either side lacks counts as
/// `null`; the file may move).
pub fn resume_from(
    dir: &Path,
    (arrays, meta): (Vec<(String, Array)>, Value),
    config: &Value,
) -> Result<Resume, String> {
    let saved = &meta["config"];
    let keys = config.as_object().into_iter().chain(saved.as_object()).flat_map(|o| o.keys());
    for k in keys.filter(|k| *k != "file") {
        let (theirs, ours) = (&saved[k], config.get(k).unwrap_or(&Value::Null));
        if theirs != ours {
            return Err(format!(
                "cannot resume from `{}`: its `{k}` is {theirs}, this run's is {ours}; resume with the same flags",
                dir.display()
            ));
        }
    }
    Ok(Resume { from: dir.to_path_buf(), arrays, meta })
}

/// How a run ended.
pub struct Summary {
    pub env_steps: u64,
    /// The mean return of the last report in which episodes ended.
    pub last_return: Option<f64>,
    /// The signal that stopped the run early (see [`interrupt`](super::interrupt)).
    pub interrupted: Option<i32>,
}

/// Trains `d` from a fresh state or `resume` until `total_steps` env steps (rounded up to
/// whole reports), writing the metrics log, checkpoints and the curve into `o.out`. An
/// interrupt (SIGINT, SIGTERM) stops it after the next report, checkpointed.
pub fn train<D: Driver>(d: &mut D, o: &RunOptions, resume: Option<Resume>) -> Result<Summary, String> {
    let per_unit = d.steps_per_unit();
    // In a job, process 0 writes the run; the others train and send it their state.
    let writes = o.job.is_none_or(|j| j.rank == 0);
    let start = match &resume {
        Some(r) => {
            d.restore(&r.arrays)?;
            r.meta[D::UNIT].as_u64().ok_or_else(|| format!("the checkpoint has no {} count", D::UNIT))?
        }
        None => {
            d.init(o.seed)?;
            0
        }
    };
    let mut out = match writes {
        false => None,
        true => {
            let log = match &resume {
                // Resumed into another directory, the log starts with the run's log so far.
                Some(r) => metrics::MetricsLog::open_resume(&r.from, &o.out, start * per_unit),
                None => metrics::MetricsLog::create(&o.out),
            };
            let log = log.map_err(|e| e.to_string())?;
            let from = resume.as_ref().map(|r| r.from.as_path());
            fingerprint::record(&o.out, &o.fingerprint, from, o.quiet)
                .map_err(|e| format!("cannot write to `{}`: {e}", o.out.display()))?;
            let events =
                EventWriter::create(&o.out).map_err(|e| format!("cannot write to `{}`: {e}", o.out.display()))?;
            Some((log, events))
        }
    };
    let k = d.units_per_report();
    let end = o.total_steps.div_ceil(per_unit * k) * k;
    let bar = Progress::new(end * per_unit, start * per_unit, o.quiet || !writes);
    let began = Instant::now();
    let mut last = Instant::now();
    let mut reached = start;
    // The agent's metrics (the loss terms), for the curve's panels.
    let mut terms: Vec<String> = vec![];
    let mut interrupted = None;
    let mut on_report = |d: &D, r: Reported| -> Result<Next, String> {
        let now = Instant::now();
        // Throughput counts every seed's steps; `env_steps` each seed's own.
        let sps = (k * per_unit * d.seeds() as u64) as f64 / now.duration_since(last).as_secs_f64();
        last = now;
        let env_steps = r.units * per_unit;
        let updates = r.units * d.updates_per_unit();
        let wall_s = began.elapsed().as_secs_f64();
        if let Some((log, events)) = &mut out {
            for (i, report) in r.seeds.iter().enumerate() {
                let seed = (r.seeds.len() > 1).then_some(o.seed + i as i64);
                let mut rec = record(report, seed, env_steps, updates, sps, wall_s);
                rec.extend(r.extra.clone());
                log.append(&rec).map_err(|e| e.to_string())?;
                events.scalars(env_steps, &scalars(&rec, seed)).map_err(|e| e.to_string())?;
            }
        }
        terms = r.seeds[0].metrics.iter().map(|(n, _)| metric_key(n)).collect();
        bar.update(env_steps, mean_return(&r.seeds));
        reached = r.units;
        interrupted = super::interrupt::requested();
        if let Some(job) = o.job {
            job.note(&format!("trained to {env_steps} env steps"));
            interrupted = job.any_stop(r.units, interrupted)?;
        }
        if (r.units / k).is_multiple_of(o.checkpoint_every) || r.units == end || interrupted.is_some() {
            let arrays = d.snapshot()?;
            if writes {
                save::<D>(&arrays, o, r.units, env_steps)?;
            }
        }
        Ok(if interrupted.is_some() { Next::Stop } else { Next::Go })
    };
    d.run(o.seed, start, end, &mut on_report)?;
    bar.finish();
    let summary = |last_return| Summary { env_steps: reached * per_unit, last_return, interrupted };
    if !writes {
        return Ok(summary(None));
    }
    let records = metrics::read(&o.out).map_err(|e| e.to_string())?;
    let terms = plot::term_series(&records, &terms);
    plot::plot_run(&o.out.join("curve.png"), &plot::seed_curves(&records), &terms, &d.title())
        .map_err(|e| e.to_string())?;
    Ok(summary(records.iter().rev().find_map(|r| r.get("episode_return").and_then(Value::as_f64))))
}

/// One timed report of [`bench`].
pub struct Timed {
    /// Env steps per second over every seed, learning included.
    pub steps_per_sec: f64,
    /// The driver's extra fields.
    pub extra: Map<String, Value>,
}

/// Times `runs` reports of `d` from a fresh state after a warm-up report (threads and
/// workers start, the first calls run).
pub fn bench<D: Driver>(d: &mut D, runs: usize) -> Result<Vec<Timed>, String> {
    d.init(0)?;
    let k = d.units_per_report();
    let steps = (k * d.steps_per_unit() * d.seeds() as u64) as f64;
    let mut last = Instant::now();
    let mut out = vec![];
    // A report comes once its metrics are downloaded, so its work has finished.
    d.run(0, 0, k * (runs as u64 + 1), &mut |_, r| {
        let dt = last.elapsed().as_secs_f64();
        last = Instant::now();
        if r.units > k {
            out.push(Timed { steps_per_sec: steps / dt, extra: r.extra });
        }
        Ok(Next::Go)
    })?;
    Ok(out)
}

/// A record's numbers as TensorBoard scalars, under `seed S/` for a run of several seeds.
fn scalars(rec: &Map<String, Value>, seed: Option<i64>) -> Vec<(String, f64)> {
    let tag = |k: &str| seed.map_or_else(|| k.to_string(), |s| format!("seed {s}/{k}"));
    let skip = ["seed", "env_steps"];
    rec.iter().filter(|(k, _)| !skip.contains(&k.as_str())).filter_map(|(k, v)| Some((tag(k), v.as_f64()?))).collect()
}

/// The mean over seeds of the mean episode returns (of the seeds whose episodes ended).
fn mean_return(reports: &[Report]) -> Option<f64> {
    let returns: Vec<f64> = reports.iter().filter_map(|r| r.episode_return).collect();
    (!returns.is_empty()).then(|| returns.iter().sum::<f64>() / returns.len() as f64)
}

/// The checkpoint's meta: the config, and how far the run is and how far it goes.
fn save<D: Driver>(arrays: &[(String, Array)], o: &RunOptions, units: u64, env_steps: u64) -> Result<(), String> {
    let mut meta = Map::new();
    meta.insert("config".into(), o.config.clone());
    meta.insert(D::UNIT.into(), json!(units));
    meta.insert("env_steps".into(), json!(env_steps));
    meta.insert("total_steps".into(), json!(o.total_steps));
    checkpoint::save(&o.out, arrays, &Value::Object(meta))
        .map_err(|e| format!("cannot write the checkpoint to `{}`: {e}", o.out.display()))
}

/// An agent metric's name in the log: its `total` is the `loss`.
fn metric_key(name: &str) -> String {
    if name == "total" { "loss".into() } else { name.into() }
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
        r.insert(metric_key(name), json!(v));
    }
    r.insert("steps_per_sec".into(), json!(steps_per_sec));
    r.insert("wall_s".into(), json!(wall_s));
    r
}
