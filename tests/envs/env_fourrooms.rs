//! FourRooms (`examples/envs/fourrooms.pod`) against gymnax's `FourRooms-misc`, step by
//! step, using `tests/fixtures/envs/fourrooms.json` (`docs/environments.md` describes the
//! dynamics). Everything is compared **exactly**:
//!
//! - the map, the open cells and the direction table (the `.pod` file's consts) with the
//!   fixture's constants;
//! - `reset` from every recorded key, through the interpreter and PJRT: state, step count
//!   and observation. The default params discard reset's two draws, so `reset` is also
//!   built with both `RESAMPLE_*` consts set and checked against the fixture's resampling
//!   resets (one of whose drawn positions lands on the goal): that checks its key usage;
//! - every step of every `step_cases` sequence through the env's own step (`raw_step`),
//!   through the interpreter and PJRT, each from the fixture's previous state with the
//!   recorded key, so the slip (split, uniform threshold, randint) must match too: state,
//!   observation, reward and `terminated`, and `truncated` is false (the env never
//!   truncates by itself). The same steps through the auto-resetting step, its counter at
//!   gymnax's `time`, must give gymnax's `truncated` (case `truncation` reaches the
//!   500-step limit); its other outputs differ there, as it splits the key first;
//! - the auto-reset rollout, closed loop from its initial state through the auto-resetting
//!   step fed the keys that gymnax's `env.step` got (it must split them as gymnax does):
//!   state, counter, observation, reward, `terminated`, `truncated` and final observation.
//!
//! `reset` and `raw_step` compile once per test process. The auto-resetting step and the
//! resampling `reset` run in the interpreter only: their threefry hashes, written out op
//! by op, make XLA slow to compile them on a 2-core machine (the step: about 1.1 s idle
//! and 2.5 s or more under load, against 0.25 s for `raw_step`), while everything they
//! are made of (the splits and draws, the env's step, reset and observe) runs on PJRT in
//! the other checks, and `tests/envs/env_catch.rs` runs the auto-reset derivation on PJRT.

use crate::common;

use common::env::{Env, bool_scalar, f32_scalar, fixture, flag, i32_scalar, int, key, list, same, same_state};
use podracer::array::{Array, DType};
use podracer::diag::render_plain;
use podracer::elab::env::build_env;
use podracer::ir::eval::eval_func;
use podracer::resolve::Program;
use podracer::types::{Dim, Ty};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::OnceLock;

const FILE: &str = "examples/envs/fourrooms.pod";

/// The env, built once per test process; each derived function compiles at most once.
fn rooms() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| Env::load(FILE, "FourRooms"))
}

fn fx() -> &'static Value {
    static FX: OnceLock<Value> = OnceLock::new();
    FX.get_or_init(|| fixture("fourrooms"))
}

fn source() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(FILE)).expect("fourrooms.pod is readable")
}

/// Checks a variant of the file, failing with the rendered diagnostics.
fn check(src: &str) -> Program {
    let (prog, diags) = podracer::driver::check_source("fourrooms.pod", src, None);
    assert!(diags.is_empty(), "{}", render_plain(&prog.map, &diags));
    prog
}

/// An array of a JSON value of the given surface type (`i32[4]`, `i32[13, 13]`, ...).
fn i32s(v: &Value, dims: &[u64]) -> Array {
    let ty = Ty::Array(DType::I32, dims.iter().map(|&d| Dim::Known(d)).collect());
    podracer::io::args_from_json(&[ty], &json!([v])).expect("fixture data of the expected type").remove(0)
}

/// `[pos_row, pos_col, goal_row, goal_col]`, as int32.
fn obs(v: &Value) -> Array {
    i32s(v, &[4])
}

/// The map, the open cells and the directions are gymnax's: the consts are read through
/// an entry point appended to the file (interpreted: they are constants).
#[test]
fn constants_match_gymnax() {
    let src = source() + "\nfn main() -> (i32[13, 13], i32[104, 2], i32[4, 2]) { (WALLS, COORDS, DIRECTIONS) }\n";
    let e = podracer::driver::build(&check(&src), "main").expect("builds");
    let outs = podracer::driver::eval(&e, &[]);
    let c = &fx()["constants"];
    same("constants", "walls", &outs[0], &i32s(&c["walls"], &[13, 13]));
    same("constants", "open cells", &outs[1], &i32s(&c["open_cells"], &[104, 2]));
    same("constants", "directions", &outs[2], &i32s(&c["directions"], &[4, 2]));
}

/// With the default params every reset is `pos = [4, 1]`, `goal = [8, 9]`.
#[test]
fn resets_match_reset_env() {
    let env = rooms();
    let n = env.n_state();
    let resets = list(&fx()["resets_default"]);
    assert!(!resets.is_empty());
    for r in resets {
        for (how, out) in env.reset.both(&[key(&r["key"])]) {
            let at = format!("reset with key {} ({how})", r["key"]);
            same_state(env, &at, &out[..n], &env.state(&r["state"]));
            same(&at, "t", &out[n], &i32_scalar(0));
            same(&at, "obs", &out[n + 1], &obs(&r["obs"]));
        }
    }
}

/// With resampling on, reset's draws decide the state: this checks its key usage.
#[test]
fn resampling_resets_match_reset_env() {
    let env = rooms();
    let n = env.n_state();
    let mut src = source();
    for flag in ["RESAMPLE_INIT_POS", "RESAMPLE_GOAL_POS"] {
        let (off, on) = (format!("const {flag}: bool = false;"), format!("const {flag}: bool = true;"));
        assert!(src.contains(&off), "fourrooms.pod declares `{off}`");
        src = src.replace(&off, &on);
    }
    let prog = check(&src);
    let f = build_env(&prog, "FourRooms").unwrap_or_else(|d| panic!("{}", render_plain(&prog.map, &[*d])));
    let resets = list(&fx()["resets_resample"]);
    assert!(resets.iter().any(|r| r["pos_index"] != r["pos_index_drawn"]), "a drawn position lands on the goal");
    for r in resets {
        let out = eval_func(&f.reset, &[key(&r["key"])]);
        let at = format!("resampling reset with key {} (interpreter)", r["key"]);
        same_state(env, &at, &out[..n], &env.state(&r["state"]));
        same(&at, "obs", &out[n + 1], &obs(&r["obs"]));
    }
}

#[test]
fn step_cases_match_step_env() {
    let env = rooms();
    let n = env.n_state();
    let mut checked = 0;
    for case in list(&fx()["step_cases"]) {
        let name = case["name"].as_str().expect("name");
        let mut state = env.state(&case["init_state"]);
        let mut time = int(&case["init_state"]["time"]);
        for (i, st) in list(&case["steps"]).iter().enumerate() {
            let (action, k) = (i32_scalar(int(&st["action"])), key(&st["key"]));
            let want = env.state(&st["state"]);

            // The env's own step: no time limit, no reset.
            let args = [state.clone(), vec![action.clone(), k.clone()]].concat();
            for (how, out) in env.raw_step.both(&args) {
                // gymnax's intermediates say which part of the slip went wrong, if any.
                let at = format!(
                    "case {name}, step {i}, raw_step ({how}; gymnax: uniform {}, choose_random {}, \
                     random_action {}, effective_action {})",
                    st["uniform"], st["choose_random"], st["random_action"], st["effective_action"]
                );
                same_state(env, &at, &out[..n], &want);
                same(&at, "obs", &out[n], &obs(&st["obs"]));
                same(&at, "reward", &out[n + 1], &f32_scalar(st["reward"].as_f64().expect("reward") as f32));
                same(&at, "terminated", &out[n + 2], &bool_scalar(flag(&st["terminated"])));
                same(&at, "truncated (the env itself never truncates)", &out[n + 3], &bool_scalar(false));
            }

            // The auto-resetting step, its counter at gymnax's `time`: its `truncated` is
            // gymnax's `env.step`'s (`time >= 500`), whatever the key does to the move.
            let args = [state, vec![i32_scalar(time), action, k]].concat();
            let out = env.step.host(&args);
            let at = format!("case {name}, step {i}, auto-reset step (interpreter)");
            same(&at, "truncated", &out[n + 4], &bool_scalar(flag(&st["truncated"])));

            state = want;
            time = int(&st["state"]["time"]);
            checked += 1;
        }
    }
    assert_eq!(checked, 56 + 12 + 10 + 14 + 1 + 5, "steps checked");
}

#[test]
fn autoreset_rollout_matches_env_step() {
    let env = rooms();
    let n = env.n_state();
    let rollouts = list(&fx()["autoreset_rollouts"]);
    assert!(!rollouts.is_empty());
    for ro in rollouts {
        let name = ro["name"].as_str().expect("name");
        let mut carry = [env.state(&ro["init_state"]), vec![i32_scalar(int(&ro["init_state"]["time"]))]].concat();
        let mut episodes = 0;
        for (i, st) in list(&ro["steps"]).iter().enumerate() {
            let at = format!("{name}, step {i} (interpreter)");
            // The key given to gymnax's `env.step`, which our step splits into the step
            // and reset halves as gymnax does (`key_step_env`, `key_reset`).
            let args = [carry, vec![i32_scalar(int(&st["action"])), key(&st["key"])]].concat();
            let out = env.step.host(&args);
            let done = flag(&st["terminated"]) || flag(&st["truncated"]);
            same_state(env, &at, &out[..n], &env.state(&st["state"]));
            same(&at, "t", &out[n], &i32_scalar(int(&st["state"]["time"])));
            same(&at, "obs", &out[n + 1], &obs(&st["obs"]));
            same(&at, "reward", &out[n + 2], &f32_scalar(st["reward"].as_f64().expect("reward") as f32));
            same(&at, "terminated", &out[n + 3], &bool_scalar(flag(&st["terminated"])));
            same(&at, "truncated", &out[n + 4], &bool_scalar(flag(&st["truncated"])));
            // The final observation is the ended episode's; otherwise the step's own.
            let final_obs = if done { &st["final_obs"] } else { &st["obs"] };
            same(&at, "final obs", &out[n + 5], &obs(final_obs));
            // Closed loop: our own state and counter go into the next step.
            carry = out[..=n].to_vec();
            episodes += usize::from(done);
        }
        assert!(episodes > 0, "{name}: the rollout ends an episode, so the reset branch is checked");
    }
}
