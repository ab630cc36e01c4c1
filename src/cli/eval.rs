//! `podc eval AGENT.pod --checkpoint DIR` and `podc play`: a trained agent's returns over
//! many episodes, and one episode as an animated GIF.

use super::{Failure, SourceArgs, load};
use crate::diag::emit_stderr;
use crate::elab::agent::{PolicyFuncs, agent_names, build_policy};
use crate::elab::env::{EnvFuncs, build_env};
use crate::elab::episodes::Policy;
use crate::resolve::Program;
use crate::train::checkpoint;
use crate::train::eval::{Evaluator, Summary, Trained, learners, play};
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
    /// The environments' and the policy's keys come from `key(seed)`.
    #[arg(long, default_value_t = 0, requires = "checkpoint")]
    pub seed: i64,
}

/// `podc eval`'s flags for an agent.
#[derive(clap::Args)]
pub struct EvalFlags {
    #[command(flatten)]
    pub trained: TrainedArgs,
    /// Whole episodes to run (for each training seed).
    #[arg(long, default_value_t = 100, requires = "checkpoint", value_parser = clap::value_parser!(u64).range(1..))]
    pub episodes: u64,
    /// Environments stepped at once (default: `--episodes`, at most 1024).
    #[arg(long, requires = "checkpoint", value_parser = clap::value_parser!(u64).range(1..))]
    pub envs: Option<u64>,
}

/// Steps per call of the evaluation program; the last call may run past the last episode.
const CHUNK: usize = 16;

/// The trained agent: the program (with the run's overrides), its policy and env, which
/// of its functions acts, the learners to look at, and the checkpoint's meta.
struct Loaded {
    prog: Program,
    policy: PolicyFuncs,
    env: EnvFuncs,
    which: Policy,
    learners: Vec<Trained>,
    meta: Value,
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
    let policy = build_policy(&prog, &agent).map_err(reported)?;
    let env = build_env(&prog, &policy.info.env.name).map_err(reported)?;
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

/// `podc eval AGENT.pod --checkpoint DIR`.
pub fn evaluate(
    file: &Path,
    source: &SourceArgs,
    flags: &EvalFlags,
    json: bool,
    plugin: Option<&Path>,
) -> Result<(), Failure> {
    let a = &flags.trained;
    let dir = a.checkpoint.as_deref().expect("`--checkpoint` selects agent evaluation");
    let l = open(file, source, a, dir)?;
    let which = l.which;
    let episodes = flags.episodes as usize;
    let envs = flags.envs.map_or(episodes.min(1024), |e| e as usize).min(episodes);
    let client = super::open_runtime(plugin, None)?;
    let ev = Evaluator::new(&client, &l.prog, (&l.policy, &l.env), which, envs, CHUNK)?;
    let mut per_seed = vec![];
    let mut all = crate::train::eval::Episodes::default();
    for t in &l.learners {
        let e = ev.run(&t.learner, episodes, a.seed)?;
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
            "env": l.env.info.name,
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
            l.env.info.name,
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
    plugin: Option<&Path>,
) -> Result<(), Failure> {
    let dir = a.checkpoint.as_deref().expect("`podc play` requires `--checkpoint`");
    let l = open(file, source, a, dir)?;
    needs_render(&l.env)?;
    let [t, ..] = &l.learners[..] else { unreachable!("a checkpoint has a learner") };
    if l.learners.len() > 1 && a.train_seed.is_none() {
        eprintln!(
            "note: the run has {} seeds; playing train seed {} (choose with `--train-seed`)",
            l.learners.len(),
            t.seed
        );
    }
    let client = super::open_runtime(plugin, None)?;
    let max = PLAY_MAX_STEPS;
    let p = play(&client, &l.prog, (&l.policy, &l.env), l.which, &t.learner, a.seed, max)?;
    crate::animation::write(out, &p.frames, fps)?;
    let end = if p.ended { String::new() } else { format!(" (stopped after {max} steps; the episode goes on)") };
    eprintln!("wrote {}: {} frames, return {:.4}{end}", out.display(), p.frames.len(), p.episode_return);
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
