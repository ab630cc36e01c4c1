//! CartPole (`examples/envs/cartpole.pod`) against Gymnasium's `CartPole-v1`, using the
//! reference data in `tests/fixtures/envs/cartpole.json`, through the reference
//! interpreter and through PJRT (each following its own trajectory).
//!
//! Gymnasium computes in float64, our env in f32, so observations are compared within
//! **1e-4 absolute** of Gymnasium's float32 observations; rewards, `terminated` and
//! `truncated` exactly, on every step until the episode ends:
//!
//! - every fixture case from its injected state with its actions, through the env's own
//!   step (`raw_step`: no time limit) and through the auto-resetting step with `t` counting
//!   the episode's steps, which adds the 500-step truncation. Following the fixture's
//!   `f32_check`, the cases are replayed open loop in f32, except the one where a plain f32
//!   replay drifts beyond 1e-4 (the 500-step balancing run, whose upright pole amplifies
//!   rounding differences exponentially): it is replayed open loop for the first half of
//!   the steps before that drift (see `run_case` for why not all of them), then each step
//!   starts from the recorded float64 state rounded to f32, with `t` set to the steps
//!   taken so far, so that truncation still fires on step 500;
//! - `podc sim` with the state and the 10 actions of the issue: its JSON lines against the
//!   fixture's case for that state;
//! - resets: `uniform(key, [4], -0.05, 0.05)` as gymnax's CartPole draws them, against the
//!   jax vectors of `tests/fixtures/envs/jax_random.json` — bit for bit on PJRT (XLA fuses
//!   `u * span + lo` into one multiply-add, as it does for jax), within 2^-27 in the
//!   interpreter (which rounds the product and the sum separately; the sum cancels, so
//!   this can be several ulps of a small result). Gymnasium's own reset
//!   draws from NumPy and is not reproducible from a jax key.

use crate::common;

use common::env::{Env, EnvFn, f32_data, f32s, fixture, i32_scalar, key, list, scalar_json};
use podracer::array::Array;
use serde_json::{Value, json};
use std::process::Command;
use std::sync::OnceLock;

const OBS_TOL: f32 = 1e-4;
const TIME_LIMIT: usize = 500;

fn cartpole() -> &'static Env {
    static ENV: OnceLock<Env> = OnceLock::new();
    ENV.get_or_init(|| Env::load("examples/envs/cartpole.pod", "CartPole"))
}

/// The state leaves of a Gymnasium state `[x, x_dot, theta, theta_dot]` (float64 in the
/// fixture, rounded to f32 here).
fn state(env: &Env, v: &Value) -> Vec<Array> {
    let s = list(v);
    env.state(&json!({ "x": s[0], "x_dot": s[1], "theta": s[2], "theta_dot": s[3] }))
}

fn check_obs(got: &[f32], want: &Value, at: &str) {
    let want = f32s(want);
    assert_eq!(got.len(), want.len(), "{at}: observation length");
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!((g - w).abs() <= OBS_TOL, "{at}: obs[{k}] = {g}, Gymnasium {w} (obs {got:?} vs {want:?})");
    }
}

/// One fixture case through one way of running (the interpreter or PJRT).
fn run_case(env: &Env, case: &Value, run: &dyn Fn(&EnvFn, &[Array]) -> Vec<Array>, how: &str) -> usize {
    let n = env.n_state();
    let name = case["name"].as_str().expect("name");
    let steps = list(&case["steps"]);
    // Open loop, except where a plain f32 replay drifts beyond the tolerance (at step
    // `first`; only `balance_500`, at 119). There the drift doubles every ~9 steps and
    // the interpreter, rounding as a plain f32 replay does, is at 9.8e-5 on step 118, so
    // replaying open loop right up to `first` would pass by 2%: any change in rounding
    // (a different `sin`, a fused multiply-add) could fail it. Open loop over the first
    // half keeps a margin of ~100 (1e-6 on step 59); after that, per step.
    let first = case["f32_check"]["open_loop_first_step_over_1e-4"].as_u64();
    let open_loop = first.map_or(steps.len(), |s| s as usize / 2);
    assert!(open_loop > 0, "{name}: the first step always starts from the injected state");
    let mut s = state(env, &case["init_state"]);
    for (i, st) in steps.iter().enumerate() {
        let at = format!("case {name}, step {i} ({how})");
        if i >= open_loop {
            s = state(env, &steps[i - 1]["state_f64"]);
        }
        let action = i32_scalar(st["action"].as_i64().expect("action") as i32);
        // CartPole's step is deterministic; any key will do.
        let k = key(&json!([0, i]));
        assert_eq!(st["reward"], 1.0, "{at}: Gymnasium's reward");

        let out = run(&env.raw_step, &[s.clone(), vec![action.clone(), k.clone()]].concat());
        check_obs(f32_data(&out[n]), &st["obs"], &format!("{at}, raw_step"));
        assert_eq!(scalar_json(&out[n + 1]), st["reward"], "{at}, raw_step: reward");
        assert_eq!(scalar_json(&out[n + 2]), st["terminated"], "{at}, raw_step: terminated");
        assert_eq!(scalar_json(&out[n + 3]), false, "{at}, raw_step: the env itself never truncates");

        // The auto-resetting step, `t` = the steps this episode has taken.
        let t = i32_scalar(i as i32);
        let auto = run(&env.step, &[s.clone(), vec![t, action, k]].concat());
        let at = format!("{at}, auto-reset step");
        assert_eq!(scalar_json(&auto[n + 2]), st["reward"], "{at}: reward");
        assert_eq!(scalar_json(&auto[n + 3]), st["terminated"], "{at}: terminated");
        assert_eq!(scalar_json(&auto[n + 4]), st["truncated"], "{at}: truncated");
        check_obs(f32_data(&auto[n + 5]), &st["obs"], &format!("{at}: final observation"));
        let done = st["terminated"] == true || st["truncated"] == true;
        let t_next = if done { 0 } else { i + 1 };
        assert_eq!(scalar_json(&auto[n]), t_next, "{at}: t");
        if done {
            // The fixture ends each case with its episode.
            assert_eq!(i + 1, steps.len(), "{at}: the episode ended before the fixture's case");
        } else {
            check_obs(f32_data(&auto[n + 1]), &st["obs"], &format!("{at}: observation"));
        }
        s = out[..n].to_vec();
    }
    steps.len()
}

#[test]
fn fixture_cases_match_gymnasium() {
    let env = cartpole();
    let fx = fixture("cartpole");
    let cases = list(&fx["step_cases"]);
    assert_eq!(cases.len(), 12);
    let mut checked = 0;
    for case in cases {
        checked += run_case(env, case, &|f, a| f.host(a), "interpreter");
        run_case(env, case, &|f, a| f.device(a), "pjrt");
    }
    assert_eq!(checked, 10 + 10 + 9 + 4 + 3 + 1 + 1 + 2 + 10 + 11 + 35 + TIME_LIMIT, "steps checked");
    // The balancing run ends by truncation alone, on step 500.
    let balance = cases.iter().find(|c| c["name"] == "balance_500").expect("balance_500");
    let last = list(&balance["steps"]).last().expect("steps");
    assert_eq!((last["truncated"].clone(), last["terminated"].clone()), (json!(true), json!(false)));
}

#[test]
fn podc_sim_matches_the_issue_case() {
    let fx = fixture("cartpole");
    let case = list(&fx["step_cases"]).iter().find(|c| c["name"] == "issue_10_steps").expect("issue_10_steps");
    assert_eq!(case["init_state"], json!([0.01, -0.02, 0.03, 0.04]));
    let out = Command::new(env!("CARGO_BIN_EXE_podc"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["sim", "examples/envs/cartpole.pod"])
        .args(["--state", r#"{"x":0.01,"x_dot":-0.02,"theta":0.03,"theta_dot":0.04}"#])
        .args(["--actions", "1,1,0,1,0,0,1,1,1,0"])
        .output()
        .expect("podc runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "podc sim failed: {}\n{stdout}", String::from_utf8_lossy(&out.stderr));
    let lines: Vec<Value> = stdout.lines().map(|l| serde_json::from_str(l).expect("a JSON line")).collect();
    let steps = list(&case["steps"]);
    assert_eq!(lines.len(), 10);
    for (t, (line, st)) in lines.iter().zip(steps).enumerate() {
        let at = format!("podc sim, step {t}");
        assert_eq!(line["t"], t, "{at}: t");
        assert_eq!(line["reward"], st["reward"], "{at}: reward");
        assert_eq!(line["terminated"], st["terminated"], "{at}: terminated");
        assert_eq!(line["truncated"], st["truncated"], "{at}: truncated");
        check_obs(&f32s(&line["obs"]), &st["obs"], &at);
    }
}

#[test]
fn resets_match_gymnax_draws() {
    let env = cartpole();
    let n = env.n_state();
    let fx = fixture("jax_random");
    let keys = list(&fx["keys"]);
    assert!(keys.len() >= 5);
    for k in keys {
        let want: Vec<f32> = list(&k["uniform_f32_shape4_min-0.05_max0.05_bits"])
            .iter()
            .map(|b| f32::from_bits(b.as_u64().expect("bits") as u32))
            .collect();
        for (how, out) in env.reset.both(&[key(&k["key"])]) {
            let at = format!("reset with key {} ({how})", k["key"]);
            assert_eq!(scalar_json(&out[n]), 0, "{at}: t");
            let obs = f32_data(&out[n + 1]);
            let fields: Vec<f32> = out[..n].iter().map(|a| f32_data(a)[0]).collect();
            assert_eq!(obs, &fields[..], "{at}: the observation is the state");
            if how == "pjrt" {
                assert_eq!(obs, &want[..], "{at}: vs jax");
            } else {
                // The interpreter rounds `u * 0.1` (below 0.1: an error of at most 2^-28)
                // before adding -0.05, then the sum (below 0.05 in size: at most 2^-29);
                // together under 2^-27, however much the sum cancels.
                for (g, w) in obs.iter().zip(&want) {
                    assert!((g - w).abs() <= 2f32.powi(-27), "{at}: {obs:?} vs jax {want:?}");
                }
            }
        }
    }
}
