//! `examples/envs/fourrooms.pod` against gymnax's `FourRooms-misc`, step by step, using
//! `tests/fixtures/envs/fourrooms.json` (see `docs/environments.md` for the dynamics).
//! Everything is compared exactly:
//!
//! - the map, the open cells and the direction table (the `.pod` file's consts) with the
//!   fixture's constants;
//! - `reset` from every recorded key, through the interpreter and PJRT: state, step count
//!   and observation. With the default params the draws are discarded, so `reset` is also
//!   built with both `RESAMPLE_*` consts set and checked against the fixture's resampling
//!   resets (including a drawn position that lands on the goal): that checks its key usage;
//! - every step of every `step_cases` sequence through the env's own step (`raw_step`),
//!   through the interpreter and PJRT, each from the fixture's previous state with the
//!   recorded key, so the slip draw (split, uniform threshold, randint) must match too:
//!   state, observation, reward and `terminated`. The env never truncates by itself; the
//!   fixture's `truncated` must be exactly what the declared `time_limit` gives;
//! - the auto-reset rollout through the derived auto-resetting step, fed the key that
//!   gymnax's `env.step` got (it must split it as gymnax does), with the step count set to
//!   the state's `time`: state, step count, observation, reward, `terminated`, `truncated`
//!   and the final observation.
//!
//! `reset` and `raw_step` are compiled once per test process. The derived step and the
//! resampling `reset` run in the interpreter only: on this 2-core machine XLA takes about
//! 2.5 s to compile the derived step and 1 s the resampling reset (their threefry hashes
//! are written out op by op), against 0.5 s for `raw_step`, while every operation in them
//! (the splits and draws, the env's step, reset and observe) is already run on PJRT by
//! the other checks.

mod common;

use common::client;
use podracer::array::{Array, ArrayTy, DType, Data};
use podracer::elab::env::{EnvFuncs, build_env};
use podracer::ir::Func;
use podracer::ir::eval::eval_func;
use podracer::runtime::Executable;
use podracer::types::{Dim, Ty};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

const ENV: &str = "FourRooms";

fn pod_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/envs/fourrooms.pod")
}

fn fixture() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/envs/fourrooms.json");
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

/// Checks `src` and derives the env's functions, failing with the rendered diagnostics.
fn derive(src: &str) -> EnvFuncs {
    let dir = pod_path().parent().map(Path::to_path_buf);
    let (prog, diags) = podracer::driver::check_source("fourrooms.pod", src, dir.as_deref());
    assert!(diags.is_empty(), "{}", podracer::diag::render_plain(&prog.map, &diags));
    build_env(&prog, ENV).unwrap_or_else(|d| panic!("{}", podracer::diag::render_plain(&prog.map, &[*d])))
}

fn source() -> String {
    std::fs::read_to_string(pod_path()).expect("fourrooms.pod is readable")
}

fn env() -> &'static Env {
    static ENV_FUNCS: OnceLock<Env> = OnceLock::new();
    ENV_FUNCS.get_or_init(|| {
        let f = derive(&source());
        let Ty::Struct(def, _) = &f.info.state else { panic!("the state is a struct") };
        let fields: Vec<String> = def.fields.iter().map(|(n, _)| n.clone()).collect();
        let leaves = f.raw_step.param_types()[..fields.len()].to_vec();
        assert_eq!(f.info.n_actions, 4);
        Env {
            fields,
            leaves,
            time_limit: f.info.time_limit.expect("FourRooms declares a time limit"),
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

/// A fixture state object as the state's leaves, in field order.
fn state(env: &Env, v: &Value) -> Vec<Array> {
    let tys: Vec<Ty> = env
        .leaves
        .iter()
        .map(|t| Ty::Array(t.dtype, t.shape.iter().map(|&d| Dim::Known(d as u64)).collect()))
        .collect();
    let vals = Value::Array(env.fields.iter().map(|f| v[f].clone()).collect());
    podracer::io::args_from_json(&tys, &vals).expect("a fixture state of the state's type")
}

/// `[pos_row, pos_col, goal_row, goal_col]`.
fn obs(v: &Value) -> Array {
    let w: Vec<i32> = v.as_array().expect("obs is a list").iter().map(|x| x.as_i64().unwrap() as i32).collect();
    Array::i32(vec![4], w)
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

// ------------------------------------------------------------------ tests

/// The map and the open cells the env uses are gymnax's: read the consts through a
/// small entry point appended to the file (interpreted: it is all constants).
#[test]
fn constants() {
    let src = source() + "\nfn main() -> (i32[13, 13], i32[104, 2], i32[4, 2]) { (WALLS, COORDS, DIRECTIONS) }\n";
    let (prog, diags) = podracer::driver::check_source("fourrooms.pod", &src, None);
    assert!(diags.is_empty(), "{}", podracer::diag::render_plain(&prog.map, &diags));
    let e = podracer::driver::build(&prog, "main").expect("builds");
    let outs = podracer::driver::eval(&e, &[]);
    let c = &fixture()["constants"];
    let tys = [
        Ty::Array(DType::I32, vec![Dim::Known(13), Dim::Known(13)]),
        Ty::Array(DType::I32, vec![Dim::Known(104), Dim::Known(2)]),
        Ty::Array(DType::I32, vec![Dim::Known(4), Dim::Known(2)]),
    ];
    let want_json = Value::Array(vec![c["walls"].clone(), c["open_cells"].clone(), c["directions"].clone()]);
    let want = podracer::io::args_from_json(&tys, &want_json).expect("fixture constants");
    for ((name, got), want) in ["walls", "open cells", "directions"].iter().zip(&outs).zip(&want) {
        same("constants", name, got, want);
    }
}

fn check_resets(reset: &Compiled, env: &Env, cases: &Value, what: &str) {
    for (n, case) in cases.as_array().expect("resets").iter().enumerate() {
        let k = key(&case["key"]);
        for (backend, out) in reset.run(std::slice::from_ref(&k)) {
            let at = format!("{what} {n} (key {}, {backend})", case["key"]);
            let nf = env.fields.len();
            same_state(env, &at, &out[..nf], &state(env, &case["state"]));
            same(&at, "step count", &out[nf], &scalar_i32(0));
            same(&at, "obs", &out[nf + 1], &obs(&case["obs"]));
        }
    }
}

/// With the default params every reset is `pos = [4, 1]`, `goal = [8, 9]`.
#[test]
fn resets_default() {
    let env = env();
    check_resets(&env.reset, env, &fixture()["resets_default"], "resets_default");
}

/// With resampling on, the draws decide: this checks the key usage of `reset`.
#[test]
fn resets_resample() {
    let env = env();
    let mut src = source();
    for flag in ["RESAMPLE_INIT_POS", "RESAMPLE_GOAL_POS"] {
        let (off, on) = (format!("const {flag}: bool = false;"), format!("const {flag}: bool = true;"));
        assert!(src.contains(&off), "fourrooms.pod declares `{off}`");
        src = src.replace(&off, &on);
    }
    let reset = Compiled::interpreted(derive(&src).reset);
    check_resets(&reset, env, &fixture()["resets_resample"], "resets_resample");
}

/// Every step of every case, from the fixture's previous state with the recorded key.
#[test]
fn step_cases() {
    let env = env();
    let nf = env.fields.len();
    let mut steps = 0;
    for case in fixture()["step_cases"].as_array().expect("step_cases") {
        let name = case["name"].as_str().expect("name");
        let mut prev = state(env, &case["init_state"]);
        for (t, s) in case["steps"].as_array().expect("steps").iter().enumerate() {
            let mut args = prev.clone();
            args.push(scalar_i32(s["action"].as_i64().expect("action")));
            args.push(key(&s["key"]));
            let want = state(env, &s["state"]);
            for (backend, out) in env.raw_step.run(&args) {
                // The fixture's intermediates say which part of the slip went wrong.
                let at = format!(
                    "{name} step {t} ({backend}; gymnax: uniform {}, choose_random {}, random_action {}, effective_action {})",
                    s["uniform"], s["choose_random"], s["random_action"], s["effective_action"]
                );
                same_state(env, &at, &out[..nf], &want);
                same(&at, "obs", &out[nf], &obs(&s["obs"]));
                same(&at, "reward", &out[nf + 1], &scalar_f32(&s["reward"]));
                same(&at, "terminated", &out[nf + 2], &scalar_bool(flag(&s["terminated"])));
                // gymnax's `step_env` never truncates; `env.step` does, at `time >= 500`,
                // which is the env's `time_limit` (the derived step counts from reset, as
                // `time` does).
                same(&at, "truncated", &out[nf + 3], &scalar_bool(false));
            }
            let time = s["state"]["time"].as_u64().expect("time");
            assert_eq!(flag(&s["truncated"]), time >= env.time_limit, "{name} step {t}: time limit");
            prev = want;
            steps += 1;
        }
    }
    assert_eq!(steps, 98, "every step case ran");
}

/// gymnax's auto-resetting `env.step`, against the derived step.
#[test]
fn autoreset_rollout() {
    let env = env();
    let nf = env.fields.len();
    for case in fixture()["autoreset_rollouts"].as_array().expect("autoreset_rollouts") {
        let name = case["name"].as_str().expect("name");
        let mut prev = state(env, &case["init_state"]);
        let mut t_prev = case["init_state"]["time"].as_i64().expect("time");
        let mut dones = 0;
        for (t, s) in case["steps"].as_array().expect("steps").iter().enumerate() {
            let mut args = prev.clone();
            args.push(scalar_i32(t_prev));
            args.push(scalar_i32(s["action"].as_i64().expect("action")));
            args.push(key(&s["key"]));
            let want = state(env, &s["state"]);
            let want_t = s["state"]["time"].as_i64().expect("time");
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
