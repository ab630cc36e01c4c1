//! Pendulum (`examples/envs/pendulum.pod`) against Gymnasium's `Pendulum-v1`, using the
//! reference data in `tests/fixtures/envs/pendulum.json` (made by `gen_pendulum.py` with
//! the Gymnasium podc's Sebulba workers pin), through the reference interpreter and
//! through PJRT.
//!
//! Gymnasium computes in float64, our env in f32: observations are compared within
//! **1e-4 absolute**, rewards within 1e-4 relative to their size above 1, `terminated` and
//! `truncated` exactly, on every step, replayed open loop from each case's injected state
//! (a float32 replay stays within 6e-5 of Gymnasium for all 200 steps of the longest
//! case, the fixture's `f32_check` says): through the env's own step (`raw_step`, no time
//! limit) and the auto-resetting step (`t` counting the steps, which adds the 200-step
//! truncation). The cases cover torques beyond the bounds (clipped), the speed limit, and
//! `angle_normalize` on both sides (Python's floor modulo). `podc sim` with explicit
//! continuous actions is checked against the first case.

use crate::common;

use common::env::{Env, EnvFn, f32_data, f32s, fixture, i32_scalar, key, list, scalar_json};
use podracer::array::Array;
use serde_json::{Value, json};
use std::process::Command;
use std::sync::OnceLock;

const TOL: f32 = 1e-4;
const TIME_LIMIT: usize = 200;

fn pendulum() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| Env::load("examples/envs/pendulum.pod", "Pendulum"))
}

fn state(env: &Env, v: &Value) -> Vec<Array> {
    let s = list(v);
    env.state(&json!({ "theta": s[0], "theta_dot": s[1] }))
}

fn check_obs(got: &[f32], want: &Value, at: &str) {
    let want = f32s(want);
    assert_eq!(got.len(), want.len(), "{at}: observation length");
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!((g - w).abs() <= TOL, "{at}: obs[{k}] = {g}, Gymnasium {w} (obs {got:?} vs {want:?})");
    }
}

fn check_reward(got: &Array, want: &Value, at: &str) {
    let (g, w) = (f32_data(got)[0], want.as_f64().expect("reward") as f32);
    assert!((g - w).abs() <= TOL * w.abs().max(1.0), "{at}: reward {g}, Gymnasium {w}");
}

fn run_case(env: &Env, case: &Value, run: &dyn Fn(&EnvFn, &[Array]) -> Vec<Array>, how: &str) -> usize {
    let n = env.n_state();
    let name = case["name"].as_str().expect("name");
    assert_eq!(case["f32_check"]["open_loop_first_step_over_1e-4"], Value::Null, "{name}: open loop stays within 1e-4");
    let steps = list(&case["steps"]);
    let mut s = state(env, &case["init_state"]);
    for (i, st) in steps.iter().enumerate() {
        let at = format!("case {name}, step {i} ({how})");
        let action = Array::f32(vec![1], f32s(&st["action"]));
        // The step is deterministic; any key will do.
        let k = key(&json!([0, i]));

        let out = run(&env.raw_step, &[s.clone(), vec![action.clone(), k.clone()]].concat());
        check_obs(f32_data(&out[n]), &st["obs"], &format!("{at}, raw_step"));
        check_reward(&out[n + 1], &st["reward"], &format!("{at}, raw_step"));
        assert_eq!(scalar_json(&out[n + 2]), st["terminated"], "{at}, raw_step: terminated");
        assert_eq!(scalar_json(&out[n + 3]), false, "{at}, raw_step: the env itself never truncates");

        let auto = run(&env.step, &[s.clone(), vec![i32_scalar(i as i32), action, k]].concat());
        let at = format!("{at}, auto-reset step");
        check_reward(&auto[n + 2], &st["reward"], &at);
        assert_eq!(scalar_json(&auto[n + 3]), st["terminated"], "{at}: terminated");
        assert_eq!(scalar_json(&auto[n + 4]), st["truncated"], "{at}: truncated");
        check_obs(f32_data(&auto[n + 5]), &st["obs"], &format!("{at}: final observation"));
        if st["truncated"] == true {
            assert_eq!(i + 1, steps.len(), "{at}: the episode ended before the fixture's case");
            assert_eq!(scalar_json(&auto[n]), 0, "{at}: t restarts");
        } else {
            assert_eq!(scalar_json(&auto[n]), i + 1, "{at}: t");
            check_obs(f32_data(&auto[n + 1]), &st["obs"], &format!("{at}: observation"));
        }
        s = out[..n].to_vec();
    }
    steps.len()
}

#[test]
fn fixture_cases_match_gymnasium() {
    let env = pendulum();
    let fx = fixture("pendulum");
    let cases = list(&fx["step_cases"]);
    assert_eq!(cases.len(), 8);
    let mut checked = 0;
    for case in cases {
        checked += run_case(env, case, &|f, a| f.host(a), "interpreter");
        run_case(env, case, &|f, a| f.device(a), "pjrt");
    }
    assert_eq!(checked, 5 + 40 + 40 + 30 + 30 + 30 + 30 + TIME_LIMIT, "steps checked");
}

#[test]
fn podc_sim_takes_continuous_actions() {
    let fx = fixture("pendulum");
    let case = list(&fx["step_cases"]).iter().find(|c| c["name"] == "sim_steps").expect("sim_steps");
    assert_eq!(case["init_state"], json!([1.0, 0.5]));
    let out = Command::new(env!("CARGO_BIN_EXE_podc"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["sim", "examples/envs/pendulum.pod", "--state", r#"{"theta":1.0,"theta_dot":0.5}"#])
        .args(["--actions", "[[1.0], [5.0], -3, [0.25], [-2.0]]"])
        .output()
        .expect("podc runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "podc sim failed: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    let steps = list(&case["steps"]);
    assert_eq!(lines.len(), steps.len());
    for (t, (line, st)) in lines.iter().zip(steps).enumerate() {
        let at = format!("podc sim, step {t}");
        assert_eq!(line["t"], t, "{at}: t");
        check_reward(&Array::f32(vec![], vec![line["reward"].as_f64().expect("reward") as f32]), &st["reward"], &at);
        assert_eq!(line["truncated"], st["truncated"], "{at}: truncated");
        check_obs(&f32s(&line["obs"]), &st["obs"], &at);
    }
}

#[test]
fn podc_sim_draws_actions_within_the_bounds() {
    // Random actions are uniform in [-2, 2): the reward's torque term is at most 0.004, so
    // from rest upright (cost 0 but for the torque) the first reward is in [-0.004, 0].
    let out = Command::new(env!("CARGO_BIN_EXE_podc"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["sim", "examples/envs/pendulum.pod", "--state", r#"{"theta":0.0,"theta_dot":0.0}"#, "--steps", "1"])
        .output()
        .expect("podc runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let line: Value = serde_json::from_str(String::from_utf8_lossy(&out.stdout).trim()).expect("one JSON line");
    let r = line["reward"].as_f64().expect("reward");
    assert!((-0.004..=0.0).contains(&r), "reward {r}");
}

#[test]
fn podc_sim_rejects_malformed_box_actions() {
    for actions in ["[[1.0, 2.0]]", "1,0", "[[\"a\"]]"] {
        let out = Command::new(env!("CARGO_BIN_EXE_podc"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["sim", "examples/envs/pendulum.pod", "--actions", actions])
            .output()
            .expect("podc runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{actions}: {err}");
        assert!(err.contains("`--actions` for `box(1, -2.0, 2.0)`") && !err.contains("panicked"), "{actions}: {err}");
    }
}
