//! The gymnax ports in `examples/envs/`, each against gymnax step by step, from one
//! fixture per env in `tests/fixtures/envs/gymnax/` (written by the generic generator
//! `_gymnax.py` from that env's `gen_<name>.py`; the fixture's `description` says what it
//! holds). For every fixture, through the reference interpreter and through PJRT:
//!
//! - each reset from its key: every state field, the observation, `t` = gymnax's `time`;
//! - each recorded step, replayed **open loop** from the state gymnax started it from (so
//!   a rounding difference cannot grow): the env's own step (`raw_step`, with the key
//!   gymnax's `env.step` gave `step_env`) against `step_env`'s state, observation, reward
//!   and `terminated`; then the auto-resetting step (with `env.step`'s key and `t` =
//!   gymnax's `time`) against `env.step`: reward, `terminated`, `truncated`, the final
//!   observation, and the returned state, `t` and observation, which on a done step are
//!   the reset's.
//!
//! A port's state fields are a subset of gymnax's, by name (gymnax's `time` is our `t`;
//! each `.pod` file says why it leaves any other out). Integers and bools are compared
//! exactly; floats exactly or within the fixture's `tolerance`.
//!
//! One test checks every fixture and names each env that fails;
//! `PODC_GYMNAX=acrobot,asterix` checks only those (the fixtures' file names).

use crate::common;

use common::env::{Env, key, list};
use podracer::array::{Array, Data};
use podracer::types::{Dim, Ty};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};

/// How float values are compared: `None` exactly.
type Tolerance = Option<(f64, f64)>;

fn close(got: f64, want: f64, tol: Tolerance) -> bool {
    match tol {
        None => got == want || (got.is_nan() && want.is_nan()),
        Some((rtol, atol)) => (got - want).abs() <= atol + rtol * want.abs() || got == want,
    }
}

/// An array's entries as numbers (bools 0 or 1), row-major.
fn numbers(a: &Array) -> Vec<f64> {
    match &a.data {
        Data::F32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        Data::I32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        Data::U32(v) => v.iter().map(|&x| f64::from(x)).collect(),
        Data::U8(v) => v.iter().map(|&x| f64::from(x)).collect(),
        Data::Bool(v) => v.iter().map(|&x| f64::from(u8::from(x))).collect(),
    }
}

/// A JSON value (a number, a bool, or nested lists of them) flattened row-major, with its
/// shape.
fn json_numbers(v: &Value) -> (Vec<usize>, Vec<f64>) {
    match v {
        Value::Array(items) => {
            let mut shape = vec![items.len()];
            let mut out = vec![];
            let mut inner: Option<Vec<usize>> = None;
            for item in items {
                let (s, mut xs) = json_numbers(item);
                assert!(inner.as_ref().is_none_or(|i| *i == s), "ragged list in the fixture: {v}");
                inner = Some(s);
                out.append(&mut xs);
            }
            shape.extend(inner.unwrap_or_default());
            (shape, out)
        }
        Value::Bool(b) => (vec![], vec![f64::from(u8::from(*b))]),
        Value::Number(n) => (vec![], vec![n.as_f64().expect("a number")]),
        _ => panic!("not a number or a list: {v}"),
    }
}

/// Compares one of our arrays with gymnax's value (of `shape`, or the value's own).
fn check(at: &str, what: &str, got: &Array, want: &Value, shape: Option<&[usize]>, tol: Tolerance) {
    let (want_shape, want) = json_numbers(want);
    let want_shape = shape.map_or(want_shape, <[usize]>::to_vec);
    assert_eq!(got.shape, want_shape, "{at}: {what}'s shape");
    let tol = if matches!(got.data, Data::F32(_)) { tol } else { None };
    let got = numbers(got);
    let bad: Vec<_> = got.iter().zip(&want).enumerate().filter(|(_, (g, w))| !close(**g, **w, tol)).collect();
    assert!(
        bad.is_empty(),
        "{at}: {what} differs at {} of {} entries; first at index {}: ours {}, gymnax {} (tolerance {tol:?})",
        bad.len(),
        want.len(),
        bad[0].0,
        bad[0].1.0,
        bad[0].1.1
    );
}

/// Our state's fields against gymnax's state (ours is a subset, by name).
fn check_state(env: &Env, at: &str, got: &[Array], want: &Value, tol: Tolerance) {
    for ((name, _), g) in env.fields.iter().zip(got) {
        let w = want.get(name).unwrap_or_else(|| panic!("{at}: gymnax's state has no field `{name}`"));
        check(at, &format!("state.{name}"), g, w, None, tol);
    }
}

/// A value read as the type of one of a function's parameters.
fn arg(ty: &podracer::array::ArrayTy, v: &Value) -> Array {
    let ty = Ty::Array(ty.dtype, ty.shape.iter().map(|&d| Dim::Known(d as u64)).collect());
    podracer::io::args_from_json(&[ty], &json!([v])).unwrap_or_else(|e| panic!("{v}: {e}")).remove(0)
}

/// gymnax's `time` (an integer, or a whole float in the bandits' states).
fn time(state: &Value) -> i32 {
    state["time"].as_f64().expect("gymnax's state has `time`") as i32
}

/// Checks one fixture; panics at the first difference.
fn check_fixture(path: &Path) {
    let fx: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("readable")).expect("JSON");
    let env = Env::load(fx["pod"].as_str().expect("pod"), fx["env"].as_str().expect("env"));
    let n = env.n_state();
    let tol =
        fx["tolerance"].as_object().map(|t| (t["rtol"].as_f64().expect("rtol"), t["atol"].as_f64().expect("atol")));
    let obs_shape: Vec<usize> = list(&fx["obs_shape"]).iter().map(|d| d.as_u64().expect("size") as usize).collect();
    let action_ty = env.raw_step.func.ty(env.raw_step.func.graph.params[n]).clone();
    let i32_ty = podracer::array::ArrayTy { dtype: podracer::array::DType::I32, shape: vec![] };

    let resets = list(&fx["resets"]);
    assert!(!resets.is_empty(), "no resets");
    for r in resets {
        for (how, out) in env.reset.both(&[key(&r["key"])]) {
            let at = format!("reset with key {} ({how})", r["key"]);
            check_state(&env, &at, &out[..n], &r["state"], tol);
            check(&at, "t", &out[n], &json!(time(&r["state"])), None, None);
            check(&at, "observation", &out[n + 1], &r["obs"], Some(&obs_shape), tol);
        }
    }

    let mut steps = 0;
    for tr in list(&fx["trajectories"]) {
        let name = tr["name"].as_str().expect("name");
        for (i, st) in list(&tr["steps"]).iter().enumerate() {
            let at = format!("trajectory {name}, step {i}");
            let state = env.state(&st["state"]);
            let action = arg(&action_ty, &st["action"]);
            let terminated = st["terminated"].as_bool().expect("terminated");
            let done = terminated || st["truncated"] == true;

            let args = [state.clone(), vec![action.clone(), key(&st["step_key"])]].concat();
            for (how, out) in env.raw_step.both(&args) {
                let at = format!("{at}, the env's step ({how})");
                check_state(&env, &at, &out[..n], &st["next"], tol);
                check(&at, "observation", &out[n], &st["obs"], Some(&obs_shape), tol);
                check(&at, "reward", &out[n + 1], &st["reward"], None, tol);
                check(&at, "terminated", &out[n + 2], &st["terminated"], None, None);
                check(&at, "truncated", &out[n + 3], &json!(false), None, None);
            }

            let t = arg(&i32_ty, &json!(time(&st["state"])));
            let args = [state, vec![t, action, key(&st["key"])]].concat();
            for (how, out) in env.step.both(&args) {
                let at = format!("{at}, the auto-resetting step ({how})");
                check(&at, "reward", &out[n + 2], &st["reward"], None, tol);
                check(&at, "terminated", &out[n + 3], &st["terminated"], None, None);
                check(&at, "truncated", &out[n + 4], &st["truncated"], None, None);
                check(&at, "final observation", &out[n + 5], &st["obs"], Some(&obs_shape), tol);
                let (want_state, want_obs) =
                    if done { (&st["reset_state"], &st["reset_obs"]) } else { (&st["next"], &st["obs"]) };
                check_state(&env, &at, &out[..n], want_state, tol);
                check(&at, "t", &out[n], &json!(time(want_state)), None, None);
                check(&at, "observation", &out[n + 1], want_obs, Some(&obs_shape), tol);
            }
            steps += 1;
        }
    }
    assert!(steps > 0, "no steps");
}

/// The fixtures to check: all, or those `PODC_GYMNAX` names.
fn fixtures() -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/envs/gymnax");
    let only: Option<Vec<String>> =
        std::env::var("PODC_GYMNAX").ok().map(|s| s.split(',').map(|n| n.trim().to_string()).collect());
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("the gymnax fixtures' directory")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .filter(|p| only.as_ref().is_none_or(|o| o.iter().any(|n| p.file_stem().is_some_and(|s| s == n.as_str()))))
        .collect();
    paths.sort();
    paths
}

#[test]
fn gymnax_ports_match_gymnax_step_by_step() {
    let paths = fixtures();
    assert!(!paths.is_empty(), "no fixture in tests/fixtures/envs/gymnax (or none that PODC_GYMNAX names)");
    let failed: Vec<String> = paths
        .iter()
        .filter(|p| std::panic::catch_unwind(|| check_fixture(p)).is_err())
        .map(|p| p.file_stem().expect("a name").to_string_lossy().into_owned())
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} gymnax ports differ from gymnax: {}",
        failed.len(),
        paths.len(),
        failed.join(", ")
    );
}
