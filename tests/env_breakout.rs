//! `examples/envs/breakout.pod` against gymnax's `Breakout-MinAtar`, step by step, using
//! `tests/fixtures/envs/breakout.json` (see `docs/environments.md` for the dynamics and
//! its quirks, each of which has a step case). Everything is compared exactly; the
//! `.pod` state keeps gymnax's fields, with `brick_map` as bool where gymnax has 0.0/1.0
//! floats, so the fixture's 0/1 bricks are read as bools.
//!
//! - `reset` from every recorded key (both ball starts occur), through the interpreter and
//!   PJRT: state, step count and observation;
//! - every step of every `step_cases` sequence through the env's own step (`raw_step`),
//!   through the interpreter and PJRT, each from the fixture's previous state: state
//!   (every field, the whole brick map), observation, reward and `terminated`. The env
//!   never truncates by itself; the fixture's `truncated` must be exactly what the
//!   declared `time_limit` gives. gymnax's `step_env` ignores its key, so the same steps
//!   also go through the derived auto-resetting step, with the step count set to the
//!   state's `time`: reward, `terminated`, `truncated` (case `truncation` reaches the time
//!   limit) and the final observation, and the state and observation while no episode ends;
//! - the auto-reset rollout through the derived step, fed the key that gymnax's `env.step`
//!   got (it must split it as gymnax does and reset from the second half): state, step
//!   count, observation, reward, `terminated`, `truncated` and the final observation.
//!
//! `reset` and `raw_step` are compiled once per test process. The derived step runs in
//! the interpreter only: it is made of the same env functions and key splits that the
//! other checks run on PJRT, and compiling it as well would cost seconds of XLA time on
//! this 2-core machine.

mod common;

use common::client;
use podracer::array::{Array, ArrayTy, Data};
use podracer::elab::env::build_env;
use podracer::ir::Func;
use podracer::ir::eval::eval_func;
use podracer::runtime::Executable;
use podracer::types::{Dim, Ty};
use serde_json::Value;
use std::path::Path;
use std::sync::OnceLock;

const ENV: &str = "Breakout";

fn fixture() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/envs/breakout.json");
        serde_json::from_str(&std::fs::read_to_string(path).expect("fixture is readable")).expect("fixture is JSON")
    })
}

/// One derived function, compiled for PJRT or (see the module doc) interpreted only.
struct Compiled {
    func: Func,
    exe: Option<Executable>,
}

impl Compiled {
    fn new(func: Func) -> Compiled {
        let mlir = podracer::lower::stablehlo::lower_module(&func, 1);
        let exe = client().compile(&mlir, 1).unwrap_or_else(|e| panic!("`{}` compiles: {e}", func.name));
        Compiled { func, exe: Some(exe) }
    }

    fn interpreted(func: Func) -> Compiled {
        Compiled { func, exe: None }
    }

    /// The outputs of the interpreter and of PJRT, each labelled, so that every check
    /// below runs on both and a failure names the backend.
    fn run(&self, args: &[Array]) -> Vec<(&'static str, Vec<Array>)> {
        let mut outs = vec![("interpreter", eval_func(&self.func, args))];
        if let Some(exe) = &self.exe {
            let c = client();
            let bufs: Vec<_> = args.iter().map(|a| c.upload(a, 0).expect("upload")).collect();
            let refs: Vec<_> = bufs.iter().collect();
            let dev = exe.execute(&refs).expect("executes").iter().map(|b| b.download().expect("download")).collect();
            outs.push(("PJRT", dev));
        }
        outs
    }
}

/// The env's functions, compiled once for the whole test process.
struct Env {
    /// The state's fields in declaration order; each is one array leaf.
    fields: Vec<String>,
    leaves: Vec<ArrayTy>,
    time_limit: u64,
    reset: Compiled,
    raw_step: Compiled,
    step: Compiled,
}

fn env() -> &'static Env {
    static ENV_FUNCS: OnceLock<Env> = OnceLock::new();
    ENV_FUNCS.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/envs/breakout.pod");
        let (prog, diags) = podracer::driver::check_file(&path).expect("breakout.pod is readable");
        assert!(diags.is_empty(), "{}", podracer::diag::render_plain(&prog.map, &diags));
        let f = build_env(&prog, ENV).unwrap_or_else(|d| panic!("{}", podracer::diag::render_plain(&prog.map, &[*d])));
        let Ty::Struct(def, _) = &f.info.state else { panic!("the state is a struct") };
        let fields: Vec<String> = def.fields.iter().map(|(n, _)| n.clone()).collect();
        let leaves = f.raw_step.param_types()[..fields.len()].to_vec();
        assert_eq!(f.info.n_actions, 3, "the minimal action set");
        Env {
            fields,
            leaves,
            time_limit: f.info.time_limit.expect("Breakout declares a time limit"),
            reset: Compiled::new(f.reset),
            raw_step: Compiled::new(f.raw_step),
            step: Compiled::interpreted(f.step),
        }
    })
}

// ------------------------------------------------------------------ values from JSON

fn key(v: &Value) -> Array {
    let w: Vec<u32> = v.as_array().expect("a key is two words").iter().map(|x| x.as_u64().unwrap() as u32).collect();
    Array::new(vec![2], Data::U32(w))
}

fn scalar_i32(n: i64) -> Array {
    Array::i32(vec![], vec![n as i32])
}

fn scalar_f32(v: &Value) -> Array {
    Array::f32(vec![], vec![v.as_f64().expect("a number") as f32])
}

fn scalar_bool(b: bool) -> Array {
    Array::new(vec![], Data::Bool(vec![b]))
}

fn flag(v: &Value) -> bool {
    v.as_bool().expect("a bool")
}

/// A fixture state object as the state's leaves, in field order; the fixture's 0/1
/// bricks become the bools of the `.pod` state.
fn state(env: &Env, v: &Value) -> Vec<Array> {
    let tys: Vec<Ty> = env
        .leaves
        .iter()
        .map(|t| Ty::Array(t.dtype, t.shape.iter().map(|&d| Dim::Known(d as u64)).collect()))
        .collect();
    let mut v = v.clone();
    let rows = v["brick_map"].as_array_mut().expect("brick_map rows");
    for cell in rows.iter_mut().flat_map(|r| r.as_array_mut().expect("a brick row")) {
        *cell = Value::Bool(cell.as_i64().expect("a 0/1 brick") != 0);
    }
    let vals = Value::Array(env.fields.iter().map(|f| v[f].clone()).collect());
    podracer::io::args_from_json(&tys, &vals).expect("a fixture state of the state's type")
}

/// The fixture's observation: 0/1, flat over `(y, x, channel)`.
fn obs(v: &Value) -> Array {
    let w: Vec<f32> = v.as_array().expect("obs is a list").iter().map(|x| x.as_f64().unwrap() as f32).collect();
    Array::f32(vec![10, 10, 4], w)
}

// ------------------------------------------------------------------ comparison

fn same(at: &str, what: &str, got: &Array, want: &Array) {
    assert_eq!(got, want, "{at}: {what} differs (left: ours, right: gymnax)");
}

fn same_state(env: &Env, at: &str, got: &[Array], want: &[Array]) {
    for ((f, g), w) in env.fields.iter().zip(got).zip(want) {
        same(at, &format!("state.{f}"), g, w);
    }
}

/// The state field `name` of some leaves, as an i32 (for the step count).
fn field_i32(env: &Env, leaves: &[Array], name: &str) -> i64 {
    let i = env.fields.iter().position(|f| f == name).expect("a state field");
    match &leaves[i].data {
        Data::I32(v) => v[0] as i64,
        d => panic!("`{name}` is {d:?}"),
    }
}

// ------------------------------------------------------------------ tests

/// `reset` from every recorded key.
#[test]
fn resets() {
    let env = env();
    let nf = env.fields.len();
    let mut starts = [0; 2];
    for (n, case) in fixture()["resets"].as_array().expect("resets").iter().enumerate() {
        for (backend, out) in env.reset.run(&[key(&case["key"])]) {
            let at = format!("reset {n} (key {}, ball start {}, {backend})", case["key"], case["ball_start"]);
            same_state(env, &at, &out[..nf], &state(env, &case["state"]));
            same(&at, "step count", &out[nf], &scalar_i32(0));
            same(&at, "obs", &out[nf + 1], &obs(&case["obs"]));
        }
        starts[case["ball_start"].as_u64().expect("ball_start") as usize] += 1;
    }
    assert!(starts.iter().all(|&n| n > 0), "the keys give both ball starts: {starts:?}");
}

/// Every step of every case, from the fixture's previous state.
#[test]
fn step_cases() {
    let env = env();
    let nf = env.fields.len();
    // gymnax's `step_env` ignores its key; the fixture passed `jax.random.key(0)`.
    let k = key(&serde_json::json!([0, 0]));
    let mut steps = 0;
    for case in fixture()["step_cases"].as_array().expect("step_cases") {
        let name = case["name"].as_str().expect("name");
        let mut prev = state(env, &case["init_state"]);
        for (t, s) in case["steps"].as_array().expect("steps").iter().enumerate() {
            let action = scalar_i32(s["action"].as_i64().expect("action"));
            let want = state(env, &s["state"]);
            let want_obs = obs(&s["obs"]);
            let (reward, terminated) = (scalar_f32(&s["reward"]), flag(&s["terminated"]));
            let mut args = prev.clone();
            args.extend([action.clone(), k.clone()]);
            for (backend, out) in env.raw_step.run(&args) {
                // The generator's events name the rules that fired on this step.
                let at = format!("{name} step {t} ({backend}; rules: {})", s["events"]);
                same_state(env, &at, &out[..nf], &want);
                same(&at, "obs", &out[nf], &want_obs);
                same(&at, "reward", &out[nf + 1], &reward);
                same(&at, "terminated", &out[nf + 2], &scalar_bool(terminated));
                same(&at, "truncated", &out[nf + 3], &scalar_bool(false));
            }
            // gymnax's `env.step` truncates at `time >= 1000`, which must be `time_limit`.
            let time = field_i32(env, &want, "time");
            assert_eq!(flag(&s["truncated"]), time >= env.time_limit as i64, "{name} step {t}: time limit");

            // The derived step, with the step count in sync with `time` as after a reset.
            let mut args = prev.clone();
            args.extend([scalar_i32(field_i32(env, &prev, "time")), action, k.clone()]);
            let done = terminated || flag(&s["truncated"]);
            for (backend, out) in env.step.run(&args) {
                let at = format!("{name} step {t} (derived step, {backend})");
                if !done {
                    same_state(env, &at, &out[..nf], &want);
                    same(&at, "step count", &out[nf], &scalar_i32(time));
                    same(&at, "obs", &out[nf + 1], &want_obs);
                }
                same(&at, "reward", &out[nf + 2], &reward);
                same(&at, "terminated", &out[nf + 3], &scalar_bool(terminated));
                same(&at, "truncated", &out[nf + 4], &scalar_bool(flag(&s["truncated"])));
                same(&at, "final obs", &out[nf + 5], &want_obs);
            }
            prev = want;
            steps += 1;
        }
    }
    assert_eq!(steps, 146, "every step case ran");
}

/// gymnax's auto-resetting `env.step`, against the derived step.
#[test]
fn autoreset_rollout() {
    let env = env();
    let nf = env.fields.len();
    for case in fixture()["autoreset_rollouts"].as_array().expect("autoreset_rollouts") {
        let name = case["name"].as_str().expect("name");
        let mut prev = state(env, &case["init_state"]);
        // The rollout starts from `reset(reset_key)`.
        for (backend, out) in env.reset.run(&[key(&case["reset_key"])]) {
            same_state(env, &format!("{name} first reset ({backend})"), &out[..nf], &prev);
        }
        let mut t_prev = field_i32(env, &prev, "time");
        let mut dones = 0;
        for (t, s) in case["steps"].as_array().expect("steps").iter().enumerate() {
            let mut args = prev.clone();
            args.push(scalar_i32(t_prev));
            args.push(scalar_i32(s["action"].as_i64().expect("action")));
            args.push(key(&s["key"]));
            let want = state(env, &s["state"]);
            let want_t = field_i32(env, &want, "time");
            let done = flag(&s["terminated"]) || flag(&s["truncated"]);
            // The final observation is the ended episode's; otherwise the step's own.
            let final_obs = if done { obs(&s["final_obs"]) } else { obs(&s["obs"]) };
            for (backend, out) in env.step.run(&args) {
                let at = format!("{name} step {t} ({backend})");
                same_state(env, &at, &out[..nf], &want);
                same(&at, "step count", &out[nf], &scalar_i32(want_t));
                same(&at, "obs", &out[nf + 1], &obs(&s["obs"]));
                same(&at, "reward", &out[nf + 2], &scalar_f32(&s["reward"]));
                same(&at, "terminated", &out[nf + 3], &scalar_bool(flag(&s["terminated"])));
                same(&at, "truncated", &out[nf + 4], &scalar_bool(flag(&s["truncated"])));
                same(&at, "final obs", &out[nf + 5], &final_obs);
            }
            dones += usize::from(done);
            (prev, t_prev) = (want, want_t);
        }
        assert!(dones > 0, "{name}: the rollout ends an episode, so the reset branch is checked");
    }
}
