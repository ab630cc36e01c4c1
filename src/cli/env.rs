//! `podc sim` and `podc bench env`: stepping one environment, and timing many.

use super::{Failure, load};
use crate::array::{Array, Data};
use crate::diag::emit_stderr;
use crate::elab::env::{EnvFuncs, build_env, pick_env};
use crate::lower::stablehlo::lower_module;
use crate::overrides::Override;
use crate::programs::env::{bench_program, fold_in_program, render_step_program};
use crate::resolve::Program;
use crate::runtime::{Buffer, Client, Executable};
use crate::space::ActionSpace;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Instant;

/// Compiles the env named `name` (or the root module's only env).
fn env_funcs(prog: &Program, overrides: &[Override], file: &Path, name: Option<&str>) -> Result<EnvFuncs, Failure> {
    let name = pick_env(prog, file, name, "`--env`")?;
    build_env(prog, overrides, &name).map_err(|d| {
        emit_stderr(&prog.map, &[*d]);
        Failure::Reported
    })
}

fn compile(client: &Client, f: &crate::ir::Func, replicas: usize) -> Result<Executable, Failure> {
    Ok(client.compile(&lower_module(f, replicas), replicas)?)
}

fn download(bufs: &[Buffer]) -> Result<Vec<Array>, Failure> {
    Ok(bufs.iter().map(|b| b.download()).collect::<Result<_, _>>()?)
}

pub struct SimArgs<'a> {
    pub file: &'a Path,
    pub source: &'a crate::driver::LoadOptions,
    pub env: Option<&'a str>,
    pub seed: i64,
    pub state: Option<&'a str>,
    pub actions: Option<&'a str>,
    pub steps: Option<usize>,
    /// `--gif FILE` and its frames per second.
    pub gif: Option<(&'a Path, u32)>,
}

/// `podc sim`: resets with `key(seed)`, optionally overrides state fields, then takes one
/// step per action with key `fold_in(key(seed), t + 1)`, printing one JSON line per step
/// with the step's observation (the final one when the episode ends; the env then
/// auto-resets for the next step). With `--gif`, it also renders the states into an
/// animated GIF: the first, then the one each step ends in (before an auto-reset); with
/// neither `--actions` nor `--steps` it then stops when the first episode ends.
pub fn sim(a: SimArgs, target: &super::Target) -> Result<(), Failure> {
    let prog = load(a.file, a.source)?;
    let env = env_funcs(&prog, &a.source.overrides, a.file, a.env)?;
    if a.gif.is_some() {
        super::eval::needs_render(&env)?;
    }
    let one_episode = a.gif.is_some() && a.actions.is_none() && a.steps.is_none();
    let space = &env.info.action;
    let actions: Vec<Array> = match a.actions {
        Some(s) => parse_actions(space, s)?,
        None => {
            let mut rng = SplitMix(a.seed as u64);
            let n = match one_episode {
                true => env.info.time_limit.unwrap_or(u64::MAX).min(super::eval::PLAY_MAX_STEPS) as usize,
                false => a.steps.unwrap_or(10),
            };
            (0..n).map(|_| unbatched(random_actions(space, 1, &mut rng))).collect()
        }
    };
    let n = a.steps.map_or(actions.len(), |s| s.min(actions.len()));
    let client = super::open_runtime(target, None)?;
    let reset = compile(&client, &env.reset, 1)?;
    let step = compile(&client, &env.step, 1)?;
    let base = crate::io::seed_key(a.seed);
    let n_state = env.state_len();
    let out = download(&reset.execute(&[&client.upload(&base, 0)?])?)?;
    let mut state: Vec<Array> = out[..n_state + 1].to_vec();
    if let Some(s) = a.state {
        let v: Value = serde_json::from_str(s)
            .or_else(|_| {
                std::fs::read_to_string(s)
                    .map_err(|e| e.to_string())
                    .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
            })
            .map_err(|e| format!("`--state` is neither JSON nor a readable JSON file: {e}"))?;
        crate::io::override_fields(&env.info.state, &mut state[..n_state], &v)?;
    }
    let keys = fold_in_program(&prog);
    // With `--gif`: the frames so far, and the program that draws where a step ends.
    let mut frames = vec![];
    let render_step = match (&env.render, render_step_program(&prog, &env)) {
        (Some(render), Some(f)) if a.gif.is_some() => {
            frames.push(crate::ir::eval::eval_func(render, &state[..n_state]).remove(0));
            Some(compile(&client, &f, 1)?)
        }
        _ => None,
    };
    for (t, act) in actions[..n].iter().enumerate() {
        let k = crate::ir::eval::eval_func(&keys, &[base.clone(), Array::i32(vec![], vec![t as i32 + 1])]).remove(0);
        if let Some(exe) = &render_step {
            let args: Vec<Array> = state[..n_state].iter().chain([act, &k]).cloned().collect();
            let bufs = args.iter().map(|x| client.upload(x, 0)).collect::<Result<Vec<_>, _>>()?;
            frames.extend(download(&exe.execute(&bufs.iter().collect::<Vec<_>>())?)?);
        }
        let mut args: Vec<Array> = state.clone();
        args.push(act.clone());
        args.push(k);
        let bufs = args.iter().map(|x| client.upload(x, 0)).collect::<Result<Vec<_>, _>>()?;
        let out = download(&step.execute(&bufs.iter().collect::<Vec<_>>())?)?;
        // out: state.., t, obs, reward, terminated, truncated, final_obs
        state = out[..n_state + 1].to_vec();
        let line = json!({
            "t": t,
            "obs": crate::io::nested_json(&out[n_state + 5]),
            "reward": crate::io::nested_json(&out[n_state + 2]),
            "terminated": crate::io::nested_json(&out[n_state + 3]),
            "truncated": crate::io::nested_json(&out[n_state + 4]),
        });
        println!("{line}");
        let ended = [&out[n_state + 3], &out[n_state + 4]].iter().any(|x| matches!(&x.data, Data::Bool(b) if b[0]));
        if one_episode && ended {
            break;
        }
    }
    if let Some((path, fps)) = a.gif {
        crate::animation::write(path, &frames, fps)?;
        eprintln!("wrote {}: {} frames", path.display(), frames.len());
    }
    Ok(())
}

/// `--actions`: `0,1,1` for `discrete(n)`; for `box(n)` a JSON list of actions, each a
/// list of `n` numbers (or a number when `n` is 1): `[[0.5, -1], [2, 0]]`, `[0.5, -1.5]`.
fn parse_actions(space: &ActionSpace, s: &str) -> Result<Vec<Array>, Failure> {
    match space {
        ActionSpace::Discrete(k) => {
            let parse = |x: &str| x.trim().parse::<i32>().map_err(|_| format!("`--actions`: `{x}` is not an integer"));
            let actions: Vec<i32> =
                s.split(',').filter(|x| !x.trim().is_empty()).map(parse).collect::<Result<_, _>>()?;
            if let Some(bad) = actions.iter().find(|&&x| x < 0 || x as u64 >= *k) {
                return Err(Failure::Message(format!("action {bad} is outside `discrete({k})`")));
            }
            Ok(actions.into_iter().map(|x| Array::i32(vec![], vec![x])).collect())
        }
        ActionSpace::Box { n, .. } => {
            let n = *n as usize;
            let bad = || {
                let one = if n == 1 { " (or a number)" } else { "" };
                let example = vec!["0.5"; n].join(", ");
                let msg = format!("`--actions` for `{space}`: a JSON list of actions, each a list of {n} numbers{one}");
                Failure::Message(format!("{msg}, e.g. `[[{example}], [{example}]]`"))
            };
            let v: Value = serde_json::from_str(s).map_err(|_| bad())?;
            let rows = v.as_array().ok_or_else(bad)?;
            rows.iter()
                .map(|r| {
                    let xs: Vec<f32> = match r {
                        Value::Array(xs) => xs.iter().map(|x| x.as_f64().map(|x| x as f32)).collect::<Option<_>>(),
                        x => x.as_f64().map(|x| vec![x as f32]),
                    }
                    .filter(|xs| xs.len() == n)
                    .ok_or_else(bad)?;
                    Ok(Array::f32(vec![n], xs))
                })
                .collect()
        }
    }
}

/// splitmix64: a host generator for random actions, so that runs reproduce.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut x = self.0;
        x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        x ^ (x >> 31)
    }

    /// Uniform in [0, 1), from the top 24 bits.
    fn uniform(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 24) as f32
    }
}

/// Random actions for `envs` envs, `[envs, ..]`: uniform over `discrete(n)` or within a
/// `box`'s bounds, standard normal (Box-Muller) for an unbounded `box`.
fn random_actions(space: &ActionSpace, envs: usize, rng: &mut SplitMix) -> Array {
    match space {
        ActionSpace::Discrete(k) => Array::i32(vec![envs], (0..envs).map(|_| (rng.next() % k) as i32).collect()),
        ActionSpace::Box { n, bounds } => {
            let n = *n as usize;
            let xs = (0..envs * n)
                .map(|i| match bounds {
                    Some((lo, hi)) => lo[i % n] + (hi[i % n] - lo[i % n]) * rng.uniform(),
                    None => {
                        let (u1, u2) = (1.0 - rng.uniform(), rng.uniform());
                        (-2.0 * u1.ln()).sqrt() * (std::f32::consts::TAU * u2).cos()
                    }
                })
                .collect();
            Array::f32(vec![envs, n], xs)
        }
    }
}

/// One env's action out of a batch of one.
fn unbatched(a: Array) -> Array {
    Array::new(a.shape[1..].to_vec(), a.data)
}

pub struct BenchArgs<'a> {
    /// A `.pod` file, or a host env URI (`gymnasium:`, `envpool:`, `ale:`, `pod:`).
    pub file: &'a Path,
    pub source: &'a crate::driver::LoadOptions,
    pub env: Option<&'a str>,
    pub envs: usize,
    pub steps: usize,
    pub devices: usize,
    pub runs: usize,
    pub json: bool,
    /// Host URIs: worker processes the envs are split over, the workers' Python, and
    /// modules they import.
    pub env_workers: usize,
    pub python: Option<std::path::PathBuf>,
    pub env_import: Vec<String>,
}

/// The URI when `file` names a host env (`gymnasium:`, `envpool:`, `ale:`, `pod:`) rather
/// than a `.pod` file.
fn host_uri(file: &Path) -> Option<&str> {
    let s = file.to_str()?;
    let (scheme, _) = s.split_once(':')?;
    crate::host::Backend::from_scheme(scheme).map(|_| s)
}

/// `podc bench env`: compiles one program running `steps` steps of `envs` environments
/// (split over `devices`) with random actions, then times it: the median of `runs` runs
/// after a warm-up. A host URI is timed through [`bench_host`].
pub fn bench(a: BenchArgs, target: &super::Target) -> Result<(), Failure> {
    if let Some(uri) = host_uri(a.file) {
        return bench_host(uri, &a, target);
    }
    if a.envs == 0 || a.devices == 0 || !a.envs.is_multiple_of(a.devices) {
        let msg = format!("`--envs {}` must be a positive multiple of `--devices {}`", a.envs, a.devices);
        return Err(Failure::Message(msg));
    }
    let prog = load(a.file, a.source)?;
    let env = env_funcs(&prog, &a.source.overrides, a.file, a.env)?;
    let client = super::open_runtime(target, Some(a.devices.max(1)))?;
    let start = Instant::now();
    let program = bench_program(&prog, &env, a.envs / a.devices, a.steps);
    let exe = compile(&client, &program, a.devices)?;
    let compile_s = start.elapsed().as_secs_f64();
    let keys: Vec<Buffer> =
        (0..a.devices).map(|d| client.upload(&crate::io::seed_key(d as i64), d)).collect::<Result<_, _>>()?;
    let args: Vec<Vec<&Buffer>> = keys.iter().map(|k| vec![k]).collect();
    let mut times = vec![];
    let mut episodes = 0;
    for run in 0..=a.runs {
        let t0 = Instant::now();
        let outs = exe.execute_replicated(&args)?;
        // Downloading the two scalars waits for the device to finish.
        let results: Vec<Vec<Array>> = outs.iter().map(|o| download(o)).collect::<Result<_, _>>()?;
        if run > 0 {
            times.push(t0.elapsed().as_secs_f64());
        }
        episodes = results.iter().map(|r| if let Data::I32(v) = &r[1].data { v[0] as i64 } else { 0 }).sum();
    }
    let median = crate::stats::median(&times);
    let steps_per_sec = (a.envs * a.steps) as f64 / median;
    if a.json {
        println!(
            "{}",
            json!({"steps_per_sec": steps_per_sec, "compile_s": compile_s, "cache": exe.cache_status().as_str(), "envs": a.envs, "steps": a.steps, "devices": a.devices})
        );
    } else {
        println!("env {}: {} envs x {} steps on {} device(s)", env.info.name, a.envs, a.steps, a.devices);
        println!("  compile: {compile_s:.3} s (compilation cache: {})", exe.cache_status().as_str());
        println!(
            "  median of {} runs: {:.4} s, {:.3e} env steps/s ({episodes} episodes ended per run)",
            a.runs, median, steps_per_sec
        );
    }
    Ok(())
}

/// `podc bench env URI` for a host env: `steps` batch steps of `envs` envs with random
/// actions ([`random_actions`], drawn beforehand, so that drawing them is not timed), through the same
/// [`crate::host::HostEnv::step`] the Sebulba actors call: worker processes and shared
/// memory for Python envs, same-step auto-reset included. The median of `runs` runs after a
/// warm-up run, as for `.pod` files; `compile_s` is the start-up (workers started, envs
/// made or the `pod:` env compiled, first reset).
fn bench_host(uri: &str, a: &BenchArgs, target: &super::Target) -> Result<(), Failure> {
    if a.devices != 1 {
        return Err(Failure::Message(format!(
            "`--devices {}`: a host env steps on the host; `--devices` applies to `.pod` files",
            a.devices
        )));
    }
    if a.env.is_some() {
        return Err(Failure::Message(
            "`--env` chooses an env of a `.pod` file; for a host URI write `pod:FILE.pod?env=NAME`".into(),
        ));
    }
    if a.envs == 0 || a.steps == 0 {
        return Err(Failure::Message("`--envs` and `--steps` must be positive".into()));
    }
    let mut opts = crate::host::Options::new(a.envs);
    // A `pod:` URI's file is this command's root file.
    opts.load = a.source.clone();
    opts.env_workers = a.env_workers.max(1);
    opts.python = a.python.clone();
    opts.env_import = a.env_import.clone();
    opts.plugin = target.plugin.clone();
    opts.client = target.options.clone();
    let start = Instant::now();
    let mut env = crate::host::open(uri, &opts, None)?;
    let spec = env.spec().clone();
    let mut out = crate::host::StepOut::new(&spec, a.envs);
    env.reset(0, &mut out)?;
    let compile_s = start.elapsed().as_secs_f64();
    // A table of random actions, cycled.
    let rows = a.steps.min(256);
    let mut rng = SplitMix(0);
    let actions: Vec<Array> = (0..rows).map(|_| random_actions(&spec.action, a.envs, &mut rng)).collect();
    let mut times = vec![];
    let mut episodes = 0;
    let mut t = 0;
    for run in 0..=a.runs {
        let mut ended = 0;
        let t0 = Instant::now();
        for _ in 0..a.steps {
            env.step(&actions[t % rows], &mut out)?;
            t += 1;
            ended += out.terminated.iter().zip(&out.truncated).filter(|&(&te, &tr)| te || tr).count();
        }
        if run > 0 {
            times.push(t0.elapsed().as_secs_f64());
        }
        episodes = ended;
    }
    let median = crate::stats::median(&times);
    let steps_per_sec = (a.envs * a.steps) as f64 / median;
    if a.json {
        println!(
            "{}",
            json!({"steps_per_sec": steps_per_sec, "compile_s": compile_s, "envs": a.envs, "steps": a.steps, "devices": 1})
        );
    } else {
        let how = match uri.split_once(':') {
            Some(("pod", _)) => "stepped through PJRT".to_string(),
            _ => format!("through {} worker(s)", opts.env_workers.min(a.envs)),
        };
        println!("env {uri} ({spec}): {} envs x {} steps {how}", a.envs, a.steps);
        println!("  start-up: {compile_s:.3} s");
        println!(
            "  median of {} runs: {:.4} s, {:.3e} env steps/s ({episodes} episodes ended per run{})",
            a.runs,
            median,
            steps_per_sec,
            match env.restarts() {
                0 => String::new(),
                r => format!(", {r} worker restarts"),
            }
        );
    }
    Ok(())
}

/// `podc env install PACKAGE..`: into podc's own venv; says where it is, for a user who
/// wants to run its Python.
pub fn install(packages: &[String]) -> Result<(), Failure> {
    let python = crate::host::python::install(packages)?;
    eprintln!("{} installed for host envs; podc's Python is {}", packages.join(", "), python.display());
    Ok(())
}

/// `podc env describe URI`: the `extern env` block of a host env, from the spaces its
/// worker reports (or, for `pod:`, from the env's declaration).
pub fn describe(uri: &str, python: Option<std::path::PathBuf>, env_import: Vec<String>) -> Result<(), Failure> {
    let mut opts = crate::host::Options::new(1);
    opts.python = python;
    opts.env_import = env_import;
    let (spec, _) = crate::host::describe_uri(uri, &opts)?;
    print!("{}", crate::host::describe::extern_block(uri, &spec));
    Ok(())
}
