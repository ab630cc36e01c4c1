//! Catch (`examples/envs/catch.pod`) against gymnax's `Catch-bsuite`, using the reference
//! data in `tests/fixtures/envs/catch.json`. Everything is compared **exactly** (integer
//! state fields, the 0/1 observation, rewards, flags, the step counter), each time through
//! the reference interpreter and through PJRT:
//!
//! - resets from the 13 recorded keys: state and observation;
//! - the `step_env` cases, from their injected states with their recorded keys, through
//!   the env's own step (`raw_step`: state, observation, reward, `terminated`) and through
//!   the auto-resetting step started with `t` = gymnax's `state.time` (the same, plus
//!   `truncated`, which includes the 1000-step limit, and the final observation);
//! - gymnax's auto-resetting `env.step` rollout, closed loop from its reset key with its
//!   recorded keys: every returned (possibly reset) state, observation, flag and final
//!   observation, and `t` against gymnax's `state.time`.
//!
//! Our Catch has no `paddle_y`, `prev_done` or `time` fields (see the `.pod` file for why);
//! the tests check that gymnax's hold what that relies on: `paddle_y` is 9, `prev_done` is
//! the `terminated` of the step that made the state, and `time` is our `t`. The one part
//! of the fixture not compared is what gymnax's `step_env` does when stepped past a
//! terminated state (the rest of case `past_done`), which our auto-reset never does.

use crate::common;

use common::env::{Env, f32_data, f32s, fixture, i32_scalar, key, list, scalar_json};
use podracer::array::Array;
use serde_json::Value;
use std::sync::OnceLock;

/// The env, built once per test process; each derived function compiles at most once.
fn catch() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| Env::load("examples/envs/catch.pod", "Catch"))
}

/// Our state's leaves against a gymnax state, field by field; and the gymnax fields ours
/// leaves out hold what our design assumes (`prev_done` as given, since it depends on how
/// the state was made).
fn check_state(env: &Env, leaves: &[Array], want: &Value, prev_done: bool, at: &str) {
    for ((name, _), got) in env.fields.iter().zip(leaves) {
        assert_eq!(scalar_json(got), want[name], "{at}: field `{name}`");
    }
    assert_eq!(want["paddle_y"], 9, "{at}: gymnax's paddle_y");
    assert_eq!(want["prev_done"], prev_done, "{at}: gymnax's prev_done");
}

fn check_obs(got: &Array, want: &Value, at: &str) {
    assert_eq!(got.shape, vec![10, 5], "{at}: observation shape");
    assert_eq!(f32_data(got), f32s(want), "{at}: observation (row-major)");
}

#[test]
fn resets_match_reset_env() {
    let env = catch();
    let n = env.n_state();
    let resets = list(&fixture("catch")["resets"]).clone();
    assert_eq!(resets.len(), 13);
    for r in &resets {
        for (how, out) in env.reset.both(&[key(&r["key"])]) {
            let at = format!("reset with key {} ({how})", r["key"]);
            check_state(env, &out[..n], &r["state"], false, &at);
            assert_eq!(scalar_json(&out[n]), r["state"]["time"], "{at}: t");
            check_obs(&out[n + 1], &r["obs"], &at);
        }
    }
}

#[test]
fn step_cases_match_step_env() {
    let env = catch();
    let n = env.n_state();
    let fx = fixture("catch");
    let mut checked = 0;
    for case in list(&fx["step_cases"]) {
        let name = case["name"].as_str().expect("name");
        let mut state = env.state(&case["init_state"]);
        let time0 = case["init_state"]["time"].as_i64().expect("time") as i32;
        for (i, st) in list(&case["steps"]).iter().enumerate() {
            // After a terminated step, gymnax's `step_env` takes its `prev_done` branch
            // (bsuite's reset inside step), which our Catch leaves out: the auto-resetting
            // step resets a finished episode instead of stepping it.
            if i > 0 && case["steps"][i - 1]["terminated"] == true {
                break;
            }
            let at = format!("case {name}, step {i}");
            // gymnax's `time` before this step.
            let time = time0 + i as i32;
            let (action, k) = (i32_scalar(st["action"].as_i64().expect("action") as i32), key(&st["key"]));
            let terminated = st["terminated"].as_bool().expect("terminated");
            let done = terminated || st["truncated"] == true;

            // The env's own step: no time limit, no reset.
            let args = [state.clone(), vec![action.clone(), k.clone()]].concat();
            let mut next = vec![];
            for (how, out) in env.raw_step.both(&args) {
                let at = format!("{at}, raw_step ({how})");
                check_state(env, &out[..n], &st["state"], terminated, &at);
                check_obs(&out[n], &st["obs"], &at);
                assert_eq!(scalar_json(&out[n + 1]), st["reward"], "{at}: reward");
                assert_eq!(scalar_json(&out[n + 2]), st["terminated"], "{at}: terminated");
                assert_eq!(scalar_json(&out[n + 3]), false, "{at}: the env itself never truncates");
                next = out[..n].to_vec();
            }

            // The auto-resetting step from the same state, its counter at gymnax's `time`:
            // `truncated` now includes the time limit (case `truncation`). On a done step
            // the returned state is a fresh reset's (checked by the rollout test).
            let args = [state.clone(), vec![i32_scalar(time), action, k]].concat();
            for (how, out) in env.step.both(&args) {
                let at = format!("{at}, auto-reset step ({how})");
                assert_eq!(scalar_json(&out[n + 2]), st["reward"], "{at}: reward");
                assert_eq!(scalar_json(&out[n + 3]), st["terminated"], "{at}: terminated");
                assert_eq!(scalar_json(&out[n + 4]), st["truncated"], "{at}: truncated");
                check_obs(&out[n + 5], &st["obs"], &format!("{at}: final observation"));
                if done {
                    assert_eq!(scalar_json(&out[n]), 0, "{at}: t restarts");
                } else {
                    check_state(env, &out[..n], &st["state"], false, &at);
                    assert_eq!(scalar_json(&out[n]), st["state"]["time"], "{at}: t");
                    check_obs(&out[n + 1], &st["obs"], &at);
                }
            }
            state = next;
            checked += 1;
        }
    }
    // Every step of every case but the 4 of `past_done` after its terminating step.
    assert_eq!(checked, 9 + 9 + 9 + 1 + 4, "steps checked");
}

#[test]
fn autoreset_rollout_matches_env_step() {
    let env = catch();
    let n = env.n_state();
    let fx = fixture("catch");
    let rollouts = list(&fx["autoreset_rollouts"]);
    assert!(!rollouts.is_empty());
    for ro in rollouts {
        let name = ro["name"].as_str().expect("name");
        let out = env.reset.host(&[key(&ro["reset_key"])]);
        check_state(env, &out[..n], &ro["init_state"], false, &format!("{name}: reset"));
        let mut carry = out[..=n].to_vec();
        let mut episodes = 0;
        for (i, st) in list(&ro["steps"]).iter().enumerate() {
            let at = format!("{name}, step {i}");
            let action = i32_scalar(st["action"].as_i64().expect("action") as i32);
            // Our step splits the key into the step and reset halves exactly as gymnax's
            // `env.step` does (`key_step_env`, `key_reset`); the states after each reset
            // show that the reset half is the one used.
            let args = [carry.clone(), vec![action, key(&st["key"])]].concat();
            let done = st["terminated"] == true || st["truncated"] == true;
            let mut next = vec![];
            for (how, out) in env.step.both(&args) {
                let at = format!("{at} ({how})");
                check_state(env, &out[..n], &st["state"], false, &at);
                assert_eq!(scalar_json(&out[n]), st["state"]["time"], "{at}: t");
                check_obs(&out[n + 1], &st["obs"], &at);
                assert_eq!(scalar_json(&out[n + 2]), st["reward"], "{at}: reward");
                assert_eq!(scalar_json(&out[n + 3]), st["terminated"], "{at}: terminated");
                assert_eq!(scalar_json(&out[n + 4]), st["truncated"], "{at}: truncated");
                let final_obs = if done { &st["final_obs"] } else { &st["obs"] };
                check_obs(&out[n + 5], final_obs, &format!("{at}: final observation"));
                next = out[..=n].to_vec();
            }
            carry = next;
            episodes += usize::from(done);
        }
        assert!(episodes >= 2, "{name}: the rollout should cross episode boundaries");
    }
}
