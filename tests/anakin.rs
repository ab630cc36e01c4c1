//! The Anakin programs against the reference interpreter: a small agent's `train` program
//! (rollouts of the batched env and policy, the update with its gradient, the device-reduced
//! metrics) gives the same state and metrics compiled as interpreted, call after call.

mod common;

use common::{assert_close, client};
use podracer::array::Array;
use podracer::elab::anakin::{LeafKind, Shape, anakin_programs};
use podracer::ir::eval::eval_func;
use podracer::lower::stablehlo::lower_module_donating;
use podracer::train::anakin::{RunShape, agent_and_env};
use std::path::Path;

#[test]
fn the_train_program_compiled_agrees_with_the_interpreter() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/agents/count.pod");
    let (prog, diags) = podracer::driver::check_file(&path).expect("readable");
    assert!(diags.is_empty(), "{}", podracer::diag::render_plain(&prog.map, &diags));
    let run = RunShape { envs: 4, rollout: 6, updates_per_call: 3, devices: 1 };
    let (agent, env) = agent_and_env(&prog, "Reinforce", run).unwrap_or_else(|d| panic!("{d:?}"));
    let p = anakin_programs(&prog, &agent, &env, Shape { envs: 4, steps: 6, updates: 3 });
    let names: Vec<&str> = p.state.iter().map(|l| l.name.as_str()).collect();
    assert_eq!(
        names,
        ["learner", "env.state.n", "env.t", "env.obs", "rng", "episode.return", "episode.length"],
        "the state's arrays, in order"
    );
    assert_eq!(p.state.iter().filter(|l| l.kind == LeafKind::PerDevice).count(), 1);
    assert_eq!(p.metrics, ["return_sum", "length_sum", "episodes", "total", "final_obs_mismatch", "bad_terminal"]);

    let exe = client().compile(&lower_module_donating(&p.train, 1, p.state.len()), 1).expect("compiles");
    let mut state = eval_func(&p.init, &[podracer::io::seed_key(7), Array::i32(vec![], vec![0])]);
    let mut episodes = 0.0;
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
        let metric = |i: usize| match &host[n + i].data {
            podracer::array::Data::F32(v) => v[0],
            d => panic!("metric {i} is {d:?}"),
        };
        // Count's episodes last at most 5 steps (time limit), so every call ends some.
        assert!(metric(2) > 0.0, "call {call}: no episode ended");
        assert!(metric(0) <= 5.0 * metric(2) && metric(1) <= 5.0 * metric(2), "call {call}");
        // The trajectory's `final_obs` (see the agent's checks).
        assert_eq!((metric(4), metric(5)), (0.0, 0.0), "call {call}");
        episodes += metric(2);
        state = host[..n].to_vec();
    }
    // Each of the 4 envs takes 18 steps in episodes of at most 5: at least 3 end.
    assert!(episodes >= 12.0, "{episodes} episodes");
}
