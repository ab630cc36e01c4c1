//! The Anakin programs against the reference interpreter: a small agent's `train` program
//! (rollouts of the batched env and policy, the update with its gradient, the device-reduced
//! metrics) gives the same state and metrics compiled as interpreted, call after call, as
//! does an actor-critic's, whose loss reads the activations acting computed; and a
//! recurrent agent's carry is kept, reset and recorded as `update` expects.

use crate::common;

use common::{assert_close, client};
use podracer::array::Array;
use podracer::ir::eval::eval_func;
use podracer::ir::loop_rows::reuse_loop_rows;
use podracer::ir::{Graph, Op};
use podracer::lower::stablehlo::lower_module_donating;
use podracer::prims::Prim;
use podracer::programs::anakin::{AnakinPrograms, DeviceShape, LeafKind, anakin_programs};
use podracer::train::anakin::{RunShape, agent_and_env};
use std::path::Path;

/// The Anakin programs of `agent` in `FILE` (from the repository's root; 4 envs, rollouts
/// of 6 steps, 3 updates per call), with the names of their state's arrays.
fn programs(file: &str, agent: &str) -> AnakinPrograms {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let (prog, diags) = podracer::driver::check_file(&path).expect("readable");
    assert!(diags.is_empty(), "{}", podracer::diag::render_plain(&prog.map, &diags));
    let run = RunShape { envs: 4, rollout: 6, updates_per_call: 3, devices: 1, processes: 1, seeds: 1 };
    let (agent, env) = agent_and_env(&prog, &[], agent, run).unwrap_or_else(|d| panic!("{d:?}"));
    anakin_programs(&prog, &agent, &env, DeviceShape { envs: 4, steps: 6, updates: 3 })
}

/// Runs 3 calls of `train` from `init` (seed 7), compiled and interpreted, asserting they
/// agree; calls `check` with each call's metrics (by name).
fn run_calls(p: &AnakinPrograms, check: impl Fn(usize, &dyn Fn(&str) -> f32)) {
    let exe = client().compile(&lower_module_donating(&p.train, 1, p.state.len()), 1).expect("compiles");
    let mut state = eval_func(&p.init, &[podracer::io::seed_key(7), Array::i32(vec![], vec![0])]);
    for call in 0..3 {
        let host = eval_func(&p.train, &state);
        let bufs: Vec<_> = state.iter().map(|a| client().upload(a, 0).expect("upload")).collect();
        let dev: Vec<Array> = exe
            .execute(&bufs.iter().collect::<Vec<_>>())
            .expect("runs")
            .iter()
            .map(|b| b.download().expect("download"))
            .collect();
        assert_close(&host, &dev, 1e-5);
        let n = p.state.len();
        let metric = |name: &str| {
            let i = p.metrics.iter().position(|m| m == name).unwrap_or_else(|| panic!("no metric {name}"));
            match &host[n + i].data {
                podracer::array::Data::F32(v) => v[0],
                d => panic!("metric {name} is {d:?}"),
            }
        };
        check(call, &metric);
        state = host[..n].to_vec();
    }
}

#[test]
fn the_train_program_compiled_agrees_with_the_interpreter() {
    let p = programs("tests/agents/count.pod", "Reinforce");
    let names: Vec<&str> = p.state.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names,
        ["learner", "env.state.n", "env.t", "env.obs", "rng", "episode.return", "episode.length"],
        "the state's arrays, in order"
    );
    assert_eq!(p.state.iter().filter(|l| l.kind == LeafKind::PerDevice).count(), 1);
    assert_eq!(p.metrics, ["return_sum", "length_sum", "episodes", "total", "final_obs_mismatch", "bad_terminal"]);
    let episodes = std::cell::Cell::new(0.0);
    run_calls(&p, |call, metric| {
        // Count's episodes last at most 5 steps (time limit), so every call ends some.
        let ended = metric("episodes");
        assert!(ended > 0.0, "call {call}: no episode ended");
        assert!(metric("return_sum") <= 5.0 * ended && metric("length_sum") <= 5.0 * ended, "call {call}");
        // The trajectory's `final_obs` (see the agent's checks).
        assert_eq!((metric("final_obs_mismatch"), metric("bad_terminal")), (0.0, 0.0), "call {call}");
        episodes.set(episodes.get() + ended);
    });
    // Each of the 4 envs takes 18 steps in episodes of at most 5: at least 3 end.
    assert!(episodes.get() >= 12.0, "{} episodes", episodes.get());
}

/// The dots of a graph, its loops' included.
fn dots(g: &Graph) -> usize {
    g.eqns
        .iter()
        .map(|e| match &e.op {
            Op::Prim(Prim::Dot(_)) => 1,
            Op::Prim(_) => 0,
            Op::Loop { body, .. } => dots(body),
        })
        .sum()
}

/// A2C's loss runs the policy over the rollout's observations with the parameters that
/// acting used: lowering reads those activations from the rollout (`ir::loop_rows`)
/// instead of multiplying by the policy's three matrices again, and the program computes
/// what the interpreter computes from the program as written.
#[test]
fn an_actor_critics_loss_reads_the_rollouts_activations() {
    let p = programs("examples/catch_a2c.pod", "A2C");
    let mut reused = p.train.clone();
    reuse_loop_rows(&mut reused);
    assert_eq!(dots(&p.train.graph) - dots(&reused.graph), 3, "the actor's three layers");
    let episodes = std::cell::Cell::new(0.0);
    run_calls(&p, |_, metric| episodes.set(episodes.get() + metric("episodes")));
    // Catch's episodes last 9 steps: each of the 4 envs takes 54 steps and ends 6.
    assert_eq!(episodes.get(), 24.0);
}

#[test]
fn a_recurrent_agents_carry_is_reset_at_episode_ends_and_recorded_at_the_rollout_start() {
    let p = programs("tests/agents/recall.pod", "Recall");
    let carry: Vec<(&str, LeafKind, &[usize])> = p
        .state
        .iter()
        .filter(|l| l.name.starts_with("agent.carry"))
        .map(|l| (l.name.as_str(), l.kind, l.ty.shape.as_slice()))
        .collect();
    let per_env = LeafKind::PerEnv;
    assert_eq!(carry, [("agent.carry.k", per_env, &[4][..]), ("agent.carry.last", per_env, &[4, 2][..])]);
    let episodes = std::cell::Cell::new(0.0);
    run_calls(&p, |call, metric| {
        // The rollout started from the carry the last one ended with (the learner holds
        // what the update replayed), and every action is the policy's for the replayed
        // carry: the driver reset it exactly where episodes ended.
        assert_eq!(metric("carry_mismatch"), 0.0, "call {call}");
        assert_eq!(metric("action_mismatch"), 0.0, "call {call}");
        episodes.set(episodes.get() + metric("episodes"));
    });
    assert!(episodes.get() >= 12.0, "the rollouts cross episode ends ({} episodes)", episodes.get());
}
