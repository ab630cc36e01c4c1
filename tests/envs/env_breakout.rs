//! Breakout (`examples/envs/breakout.pod`) against gymnax's `Breakout-MinAtar`, step by
//! step, using `tests/fixtures/envs/breakout.json` (`docs/environments.md` describes the
//! dynamics and their quirks, each of which has a step case). Everything is compared
//! **exactly**. Our state keeps gymnax's fields, with `brick_map` as bool where gymnax
//! keeps 0.0/1.0 floats, so the fixture's 0/1 bricks are read as bools.
//!
//! - `reset` from every recorded key (both ball starts occur), through the interpreter and
//!   PJRT: state, step count and observation;
//! - every step of every `step_cases` sequence through the env's own step (`raw_step`),
//!   through the interpreter and PJRT, each from the fixture's previous state: every state
//!   field (the whole brick map), observation, reward and `terminated`, and `truncated` is
//!   false (the env never truncates by itself). gymnax's `step_env` ignores its key, so the
//!   same steps also go through the auto-resetting step, its counter at gymnax's `time`:
//!   reward, `terminated`, `truncated` (case `truncation` reaches the 1000-step limit), the
//!   final observation, and the state, counter and observation while no episode ends;
//! - the auto-reset rollout, closed loop from its reset key through the auto-resetting
//!   step fed the keys gymnax's `env.step` got (it must split them as gymnax does and reset
//!   from the second half; the rollout resets into both ball starts): state, counter,
//!   observation, reward, `terminated`, `truncated` and final observation.
//!
//! `reset` and `raw_step` compile once per test process. The auto-resetting step runs in
//! the interpreter only: everything it is made of (the key split, the env's step, reset
//! and observe) runs on PJRT in the other checks, `tests/envs/env_catch.rs` runs the auto-reset
//! derivation on PJRT, and compiling it here would more than double the XLA time (0.6 s
//! against 0.25 s for `raw_step` on an idle 2-core machine).

use crate::common;

use common::env::{Env, bool_scalar, f32_scalar, fixture, flag, i32_scalar, int, key, list, same, same_state};
use podracer::array::Array;
use serde_json::{Value, json};
use std::sync::OnceLock;

/// The env, built once per test process; each derived function compiles at most once.
fn breakout() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| Env::load("examples/envs/breakout.pod", "Breakout"))
}

fn fx() -> &'static Value {
    static FX: OnceLock<Value> = OnceLock::new();
    FX.get_or_init(|| fixture("breakout"))
}

/// A gymnax state as our state's leaves: the fixture's 0/1 bricks become bools.
fn state(env: &Env, v: &Value) -> Vec<Array> {
    let mut v = v.clone();
    let rows = v["brick_map"].as_array_mut().expect("brick_map is a list of rows");
    for cell in rows.iter_mut().flat_map(|r| r.as_array_mut().expect("a row of bricks")) {
        *cell = json!(int(cell) != 0);
    }
    env.state(&v)
}

/// gymnax's observation, which the fixture stores as 0/1 flattened over `(y, x, channel)`.
fn obs(v: &Value) -> Array {
    let data = list(v).iter().map(|x| x.as_f64().expect("a number") as f32).collect();
    Array::f32(vec![10, 10, 4], data)
}

#[test]
fn resets_match_reset_env() {
    let env = breakout();
    let n = env.n_state();
    let resets = list(&fx()["resets"]);
    for start in [0, 1] {
        assert!(resets.iter().any(|r| r["ball_start"] == start), "a key gives ball start {start}");
    }
    for r in resets {
        for (how, out) in env.reset.both(&[key(&r["key"])]) {
            let at = format!("reset with key {} (ball start {}, {how})", r["key"], r["ball_start"]);
            same_state(env, &at, &out[..n], &state(env, &r["state"]));
            same(&at, "t", &out[n], &i32_scalar(0));
            same(&at, "obs", &out[n + 1], &obs(&r["obs"]));
        }
    }
}

#[test]
fn step_cases_match_step_env() {
    let env = breakout();
    let n = env.n_state();
    // gymnax's `step_env` ignores its key; the fixture passed `jax.random.key(0)`.
    let k = key(&json!([0, 0]));
    let mut checked = 0;
    for case in list(&fx()["step_cases"]) {
        let name = case["name"].as_str().expect("name");
        let mut prev = state(env, &case["init_state"]);
        let mut time = int(&case["init_state"]["time"]);
        for (i, st) in list(&case["steps"]).iter().enumerate() {
            let action = i32_scalar(int(&st["action"]));
            let want = state(env, &st["state"]);
            let want_obs = obs(&st["obs"]);
            let reward = f32_scalar(st["reward"].as_f64().expect("reward") as f32);
            let (terminated, truncated) = (flag(&st["terminated"]), flag(&st["truncated"]));

            // The env's own step: no time limit, no reset.
            let args = [prev.clone(), vec![action.clone(), k.clone()]].concat();
            for (how, out) in env.raw_step.both(&args) {
                // The generator's events name the rules that fired on this step.
                let at = format!("case {name}, step {i}, raw_step ({how}; rules {})", st["events"]);
                same_state(env, &at, &out[..n], &want);
                same(&at, "obs", &out[n], &want_obs);
                same(&at, "reward", &out[n + 1], &reward);
                same(&at, "terminated", &out[n + 2], &bool_scalar(terminated));
                same(&at, "truncated (the env itself never truncates)", &out[n + 3], &bool_scalar(false));
            }

            // The auto-resetting step from the same state, its counter at gymnax's `time`:
            // `truncated` now includes the time limit. On a done step the returned state
            // is a fresh reset's (checked by the rollout test).
            let args = [prev, vec![i32_scalar(time), action, k.clone()]].concat();
            let out = env.step.host(&args);
            let at = format!("case {name}, step {i}, auto-reset step (interpreter)");
            same(&at, "reward", &out[n + 2], &reward);
            same(&at, "terminated", &out[n + 3], &bool_scalar(terminated));
            same(&at, "truncated", &out[n + 4], &bool_scalar(truncated));
            same(&at, "final obs", &out[n + 5], &want_obs);
            if !(terminated || truncated) {
                same_state(env, &at, &out[..n], &want);
                same(&at, "t", &out[n], &i32_scalar(int(&st["state"]["time"])));
                same(&at, "obs", &out[n + 1], &want_obs);
            }

            prev = want;
            time = int(&st["state"]["time"]);
            checked += 1;
        }
    }
    assert_eq!(checked, 146, "steps checked");
}

#[test]
fn autoreset_rollout_matches_env_step() {
    let env = breakout();
    let n = env.n_state();
    let rollouts = list(&fx()["autoreset_rollouts"]);
    assert!(!rollouts.is_empty());
    for ro in rollouts {
        let name = ro["name"].as_str().expect("name");
        let out = env.reset.host(&[key(&ro["reset_key"])]);
        same_state(env, &format!("{name}: reset (interpreter)"), &out[..n], &state(env, &ro["init_state"]));
        let mut carry = out[..=n].to_vec();
        let mut starts = vec![];
        for (i, st) in list(&ro["steps"]).iter().enumerate() {
            let at = format!("{name}, step {i} (interpreter)");
            // The key given to gymnax's `env.step`, which our step splits into the step
            // and reset halves as gymnax does (`key_step_env`, `key_reset`).
            let args = [carry, vec![i32_scalar(int(&st["action"])), key(&st["key"])]].concat();
            let out = env.step.host(&args);
            let done = flag(&st["terminated"]) || flag(&st["truncated"]);
            same_state(env, &at, &out[..n], &state(env, &st["state"]));
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
            if done {
                starts.push(int(&st["reset_ball_start"]));
            }
        }
        starts.sort();
        starts.dedup();
        assert_eq!(starts, [0, 1], "{name}: the rollout resets into both ball starts");
    }
}
