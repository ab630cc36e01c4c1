//! `podc eval AGENT.pod --checkpoint DIR` and `podc play`: a trained agent's returns over
//! many episodes, and one episode as an animated GIF, on the agent's `.pod` env or on a
//! host env: the one a `podc train --env URI` run trained on, or `--env URI`.

use super::run_env::{own_env_uri, pod_load, same_file};
use super::{Failure, SourceArgs, load};
use crate::array::Array;
use crate::diag::emit_stderr;
use crate::driver::LoadOptions;
use crate::elab::agent::{PolicyFuncs, agent_names, build_policy};
use crate::elab::env::{EnvFuncs, build_env};
use crate::host::{self, Backend, EnvUri, HostEnv, KwValue};
use crate::programs::act::Policy;
use crate::resolve::Program;
use crate::train::checkpoint;
use crate::train::eval::{Episodes, Evaluator, HostPolicy, Summary, Trained, host_episodes, host_play, learners, play};
use crate::train::sebulba::actor::check_spec;
use crate::train::sebulba::agent_spec;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// What `podc eval` and `podc play` read: the agent and which learner of a checkpoint.
#[derive(clap::Args)]
pub struct TrainedArgs {
    /// The run directory of a `podc train` run: its agent is evaluated, with the run's
    /// `--set` overrides (a `--set` given here replaces the run's of that name).
    #[arg(long, value_name = "DIR")]
    pub checkpoint: Option<PathBuf>,
    /// The agent (default: the checkpoint's).
    #[arg(long, requires = "checkpoint")]
    pub agent: Option<String>,
    /// Take the agent's most likely action, its `fn greedy`, instead of `act`'s sample.
    #[arg(long, requires = "checkpoint")]
    pub greedy: bool,
    /// For a `--seeds N` run: the learner of this training seed only (default: each).
    #[arg(long, value_name = "S", requires = "checkpoint")]
    pub train_seed: Option<i64>,
    /// The environments' and the policy's keys come from `key(seed)` (host envs are
    /// seeded `seed + i`, as Gymnasium's vector envs).
    #[arg(long, default_value_t = 0, requires = "checkpoint")]
    pub seed: i64,
    /// Run the agent on this host env: `gymnasium:ID[?k=v&..]`, `envpool:ID[?..]`,
    /// `ale:GAME[?..]` or `pod:FILE.pod[?env=NAME]`, checked against the agent's env
    /// (default: the host env of a `podc train --env` run, else the agent's `.pod` env).
    #[arg(long, value_name = "URI", requires = "checkpoint")]
    pub env: Option<String>,
    /// The Python for host env workers (else `PODC_PYTHON`, else `$VIRTUAL_ENV`, else
    /// podc's own venv in its cache).
    #[arg(long, value_name = "PATH", requires = "checkpoint")]
    pub python: Option<PathBuf>,
    /// A module the host env workers import before making their envs (as `podc train`'s;
    /// default: the modules of the run's `--env-import`, on the run's host env).
    #[arg(long = "env-import", value_name = "MODULE", requires = "checkpoint")]
    pub env_import: Vec<String>,
}

/// `podc eval`'s flags for an agent.
#[derive(clap::Args)]
pub struct EvalFlags {
    #[command(flatten)]
    pub trained: TrainedArgs,
    /// Whole episodes to run (for each training seed).
    #[arg(long, default_value_t = 100, requires = "checkpoint", value_parser = clap::value_parser!(u64).range(1..))]
    pub episodes: u64,
    /// Environments stepped at once (default: `--episodes`, at most 1024; 64 on a host env).
    #[arg(long, requires = "checkpoint", value_parser = clap::value_parser!(u64).range(1..))]
    pub envs: Option<u64>,
}

/// Steps per call of the evaluation program; the last call may run past the last episode.
const CHUNK: usize = 16;

/// The most host envs `podc eval` steps at once unless `--envs` says.
const HOST_ENVS: usize = 64;

/// The trained agent: the program (with the run's overrides), its policy and env, which
/// of its functions acts, the learners to look at, and the checkpoint's meta.
struct Loaded {
    prog: Program,
    policy: PolicyFuncs,
    env: Env,
    which: Policy,
    learners: Vec<Trained>,
    meta: Value,
}

/// Where the agent's episodes run.
enum Env {
    /// The agent's own `.pod` env, compiled with the policy into one program.
    Pod(Box<EnvFuncs>),
    /// A host env, stepped as the Sebulba actors step it.
    Host { uri: String, opts: Box<host::Options> },
}

impl Env {
    fn name(&self) -> &str {
        match self {
            Env::Pod(e) => &e.info.name,
            Env::Host { uri, .. } => uri,
        }
    }
}

/// `--env`, else the host env a Sebulba run trained on unless it is the agent's own
/// `.pod` env (which then runs on the device, and `play` draws with its `render`).
fn choose_env(
    file: &Path,
    opts: &LoadOptions,
    a: &TrainedArgs,
    config: &Value,
    prog: &Program,
    policy: &PolicyFuncs,
) -> Result<Env, Failure> {
    let name = &policy.info.env.name;
    let (uri, imports) = match (&a.env, config["env"].as_str()) {
        (Some(uri), _) => (Some(uri.clone()), vec![]),
        (None, Some(uri)) if !is_own_env(uri, prog, name) => {
            let recorded = config["env_import"].as_array().into_iter().flatten();
            (Some(uri.to_string()), recorded.filter_map(|m| m.as_str().map(String::from)).collect())
        }
        _ => (None, vec![]),
    };
    let Some(uri) = uri else {
        if own_env_uri(prog, name).is_none() {
            return Err(Failure::Message(format!(
                "env `{name}` is `extern` and the checkpoint names no host env: run agent `{}` on one with `--env URI`",
                policy.info.name
            )));
        }
        return build_env(prog, &opts.overrides, name).map(|e| Env::Pod(Box::new(e))).map_err(|d| {
            emit_stderr(&prog.map, &[*d]);
            Failure::Reported
        });
    };
    EnvUri::parse(&uri)?;
    let mut o = host::Options::new(1);
    o.python = a.python.clone();
    o.env_import = if a.env_import.is_empty() { imports } else { a.env_import.clone() };
    o.load = pod_load(&uri, file, opts);
    Ok(Env::Host { uri, opts: Box::new(o) })
}

/// Whether `uri` is `pod:` of the program's own `.pod` env `name`, as `podc train` records
/// it when it steps the agent's own env on the host: `?env=NAME` names it (the file's path
/// is relative to where the run was, so not compared), or, without `?env`, the file is
/// the env's own.
fn is_own_env(uri: &str, prog: &Program, name: &str) -> bool {
    let (Ok(u), Some(own)) = (EnvUri::parse(uri), own_env_uri(prog, name)) else { return false };
    match (u.backend, u.kwargs.as_slice()) {
        (Backend::Pod, [(k, KwValue::Str(env))]) => k == "env" && env == name,
        (Backend::Pod, []) => EnvUri::parse(&own).is_ok_and(|o| same_file(Path::new(&u.id), Path::new(&o.id))),
        _ => false,
    }
}

/// Opens the host env `uri` for `num_envs` envs, restarting no worker, and checks it
/// against the agent's env as `podc train` does.
fn open_host(
    uri: &str,
    opts: &host::Options,
    policy: &PolicyFuncs,
    num_envs: usize,
    render: bool,
    client: &crate::runtime::Client,
) -> Result<Box<dyn HostEnv>, Failure> {
    let mut opts = opts.clone();
    opts.num_envs = num_envs;
    opts.render = render;
    // A restarted worker cuts its episodes short: an evaluation would count returns it
    // never measured, so a failure is an error.
    opts.max_restarts = 0;
    let env = host::open(uri, &opts, Some(client))?;
    check_spec(&agent_spec(&policy.info)?, env.spec(), uri)?;
    Ok(env)
}

fn open(file: &Path, source: &SourceArgs, a: &TrainedArgs, dir: &Path) -> Result<Loaded, Failure> {
    let (arrays, meta) = checkpoint::load(dir).map_err(|e| format!("`--checkpoint {}`: {e}", dir.display()))?;
    let config = &meta["config"];
    // The run's overrides, then this command's.
    let mut opts = source.options()?;
    let mut overrides = crate::overrides::from_json(&config["overrides"]);
    overrides.retain(|o| opts.overrides.iter().all(|p| p.name != o.name));
    overrides.append(&mut opts.overrides);
    opts.overrides = overrides;
    let prog = load(file, &opts)?;
    let trained_with = config["agent"].as_str();
    let agent = match (&a.agent, trained_with) {
        (Some(mine), Some(theirs)) if mine != theirs => {
            return Err(Failure::Message(format!(
                "`--agent {mine}`: the checkpoint in `{}` is of agent `{theirs}`",
                dir.display()
            )));
        }
        (Some(name), _) => name.clone(),
        (None, Some(name)) => name.to_string(),
        (None, None) => {
            crate::train::anakin::pick_agent(&prog, None).map_err(|m| format!("`{}`: {m}", file.display()))?
        }
    };
    if !agent_names(&prog).contains(&agent) {
        let from = config["file"].as_str().map_or(String::new(), |f| format!(", trained from `{f}`"));
        return Err(Failure::Message(format!(
            "`{}` has no agent `{agent}`: the checkpoint in `{}` is of agent `{agent}`{from}",
            file.display(),
            dir.display(),
        )));
    }
    let reported = |d: Box<crate::diag::Diag>| {
        emit_stderr(&prog.map, &[*d]);
        Failure::Reported
    };
    let policy = build_policy(&prog, &opts.overrides, &agent).map_err(reported)?;
    let env = choose_env(file, &opts, a, config, &prog, &policy)?;
    let which = which(a, &policy)?;
    let mut learners =
        learners(&arrays, config, &policy).map_err(|m| format!("`--checkpoint {}`: {m}", dir.display()))?;
    if let Some(s) = a.train_seed {
        let seeds: Vec<String> = learners.iter().map(|t| t.seed.to_string()).collect();
        learners.retain(|t| t.seed == s);
        if learners.is_empty() {
            return Err(Failure::Message(format!(
                "`--train-seed {s}`: the run in `{}` trained seeds {}",
                dir.display(),
                seeds.join(", ")
            )));
        }
    }
    Ok(Loaded { prog, policy, env, which, learners, meta })
}

/// `Greedy` with `--greedy`, which needs the agent's `greedy`.
fn which(a: &TrainedArgs, policy: &PolicyFuncs) -> Result<Policy, Failure> {
    match (a.greedy, &policy.greedy) {
        (false, _) => Ok(Policy::Sample),
        (true, Some(_)) => Ok(Policy::Greedy),
        (true, None) => {
            let info = &policy.info;
            let carry = info.carry.as_ref().map(|c| format!("c: {c}, "));
            let ret = match &info.carry {
                Some(c) => format!("({}, {c})", info.env.action.ty()),
                None => info.env.action.ty().to_string(),
            };
            Err(Failure::Message(format!(
                "`--greedy`: agent `{}` has no `greedy`; define its most likely action as \
                 `fn greedy(l: {}, {}obs: {}) -> {ret}` (see docs/language.md#agents)",
                info.name,
                info.learner,
                carry.unwrap_or_default(),
                info.env.observation,
            )))
        }
    }
}

/// Runs the episodes of a learner.
type EpisodesOf<'a> = Box<dyn FnMut(&[Array]) -> Result<Episodes, String> + 'a>;

/// `podc eval AGENT.pod --checkpoint DIR`.
pub fn evaluate(
    file: &Path,
    source: &SourceArgs,
    flags: &EvalFlags,
    json: bool,
    target: &super::Target,
) -> Result<(), Failure> {
    let a = &flags.trained;
    let dir = a.checkpoint.as_deref().expect("`--checkpoint` selects agent evaluation");
    let l = open(file, source, a, dir)?;
    let which = l.which;
    let episodes = flags.episodes as usize;
    // Host envs are heavier (an Atari env holds an emulator and its frames).
    let most = if matches!(l.env, Env::Host { .. }) { HOST_ENVS } else { 1024 };
    let envs = flags.envs.map_or(episodes.min(most), |e| e as usize).min(episodes);
    let client = super::open_runtime(target, None)?;
    let mut run: EpisodesOf = match &l.env {
        Env::Pod(env) => {
            let ev = Evaluator::new(&client, &l.prog, (&l.policy, env), which, envs, CHUNK)?;
            Box::new(move |learner| ev.run(learner, episodes, a.seed))
        }
        Env::Host { uri, opts } => {
            let mut env = open_host(uri, opts, &l.policy, envs, false, &client)?;
            let p = HostPolicy::new(&client, &l.prog, &l.policy, which, envs)?;
            Box::new(move |learner| host_episodes(&p, env.as_mut(), learner, episodes, a.seed, uri))
        }
    };
    let mut per_seed = vec![];
    let mut all = Episodes::default();
    for t in &l.learners {
        let e = run(&t.learner)?;
        per_seed.push((t.seed, Summary::of(&e)));
        all.returns.extend(e.returns);
        all.lengths.extend(e.lengths);
    }
    let total = Summary::of(&all);
    let policy = match which {
        Policy::Sample => "sample",
        Policy::Greedy => "greedy",
    };
    let several = l.learners.len() > 1;
    if json {
        let mut out = json!({
            "agent": l.policy.info.name,
            "env": l.env.name(),
            "checkpoint": dir.display().to_string(),
            "env_steps": l.meta["env_steps"],
            "policy": policy,
            "seed": a.seed,
        });
        let obj = out.as_object_mut().expect("an object");
        obj.extend(total.to_json().as_object().expect("an object").clone());
        if several {
            let seeds: Vec<Value> = per_seed
                .iter()
                .map(|(s, sum)| {
                    let mut v = json!({ "train_seed": s });
                    v.as_object_mut().expect("an object").extend(sum.to_json().as_object().expect("an object").clone());
                    v
                })
                .collect();
            obj.insert("train_seeds".into(), Value::Array(seeds));
        } else if let Some((s, _)) = per_seed.first() {
            obj.insert("train_seed".into(), json!(s));
        }
        println!("{out}");
    } else {
        let steps = l.meta["env_steps"].as_u64().map_or(String::new(), |n| format!(" after {n} env steps"));
        println!(
            "`{}` on `{}` ({}{steps}), {policy} actions, {episodes} episodes per seed:",
            l.policy.info.name,
            l.env.name(),
            dir.display()
        );
        if several {
            for (s, sum) in &per_seed {
                println!("train seed {s}: mean {:.4}, std {:.4}", sum.mean, sum.std);
            }
            println!("all seeds:");
        }
        print!("{}", total.show());
    }
    Ok(())
}

/// `podc play AGENT.pod --checkpoint DIR --out FILE.gif`.
pub fn play_gif(
    file: &Path,
    source: &SourceArgs,
    a: &TrainedArgs,
    out: &Path,
    fps: u32,
    target: &super::Target,
) -> Result<(), Failure> {
    let dir = a.checkpoint.as_deref().expect("`podc play` requires `--checkpoint`");
    let l = open(file, source, a, dir)?;
    if let Env::Pod(env) = &l.env {
        needs_render(env)?;
    }
    let [t, ..] = &l.learners[..] else { unreachable!("a checkpoint has a learner") };
    if l.learners.len() > 1 && a.train_seed.is_none() {
        eprintln!(
            "note: the run has {} seeds; playing train seed {} (choose with `--train-seed`)",
            l.learners.len(),
            t.seed
        );
    }
    let client = super::open_runtime(target, None)?;
    let max = PLAY_MAX_STEPS;
    let (frames, episode_return, ended) = match &l.env {
        Env::Pod(env) => {
            let p = play(&client, &l.prog, (&l.policy, env), l.which, &t.learner, a.seed, max)?;
            crate::animation::write(out, &p.frames, fps)?;
            (p.frames.len(), p.episode_return, p.ended)
        }
        Env::Host { uri, opts } => {
            if EnvUri::parse(uri)?.backend == Backend::Pod {
                return Err(Failure::Message(format!(
                    "`{uri}`: `podc play` draws a `.pod` env with its `render` when it is the agent's own env, \
                     not through `pod:`; play the agent on its own env (without `--env`)"
                )));
            }
            let mut env = open_host(uri, opts, &l.policy, 1, true, &client)?;
            let p = HostPolicy::new(&client, &l.prog, &l.policy, l.which, 1)?;
            let mut gif = None;
            let mut frame = |f: Array| match &mut gif {
                None => crate::animation::Gif::create(out, &f, fps).and_then(|g| gif.insert(g).push(&f)),
                Some(g) => g.push(&f),
            };
            let p = host_play(&p, env.as_mut(), &t.learner, a.seed, max, &mut frame)?;
            (p.frames, p.episode_return, p.ended)
        }
    };
    let end = if ended { String::new() } else { format!(" (stopped after {max} steps; the episode goes on)") };
    eprintln!("wrote {}: {frames} frames, return {episode_return:.4}{end}", out.display());
    Ok(())
}

/// The most steps `podc play` and `podc sim --gif` draw of an episode.
pub const PLAY_MAX_STEPS: u64 = 1000;

/// An env must define `render` to be drawn.
pub fn needs_render(env: &EnvFuncs) -> Result<(), Failure> {
    match env.render {
        Some(_) => Ok(()),
        None => Err(Failure::Message(format!(
            "env `{}` has no `render`: define `fn render(s: {}) -> f32[H, W, 3]` (RGB in [0, 1]) to draw it \
             (see docs/language.md#environments)",
            env.info.name, env.info.state
        ))),
    }
}
