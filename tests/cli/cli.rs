//! `podc` as a user runs it: exit statuses, `--json` output, `--args`, and errors that
//! name what is wrong.

use std::path::Path;
use std::process::{Command, Output};

fn podc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_podc"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("podc starts")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "podc failed: {}", stderr(o));
    serde_json::from_str(stdout(o).trim()).unwrap_or_else(|e| panic!("not one JSON object ({e}): {}", stdout(o)))
}

#[test]
fn check_exit_status() {
    let ok = podc(&["check", "examples/basics/dense.pod", "examples/basics/loop.pod"]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    let bad = podc(&["check", "tests/ui/shapes/matmul-shape-mismatch.pod"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(stderr(&bad).contains("E0204"), "{}", stderr(&bad));
    let missing = podc(&["check", "no/such/file.pod"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(stderr(&missing).contains("no/such/file.pod"));
}

#[test]
fn run_and_eval_print_the_same_json() {
    for file in ["examples/basics/select.pod", "examples/basics/loop.pod"] {
        let run = json(&podc(&["run", file, "--json"]));
        let eval = json(&podc(&["eval", file, "--json"]));
        assert_eq!(run, eval, "{file}");
    }
    let v = json(&podc(&["run", "examples/basics/select.pod", "--json"]));
    assert_eq!(
        v,
        serde_json::json!({"entry": "main", "outputs": [
            {"dtype": "i32", "shape": [8], "data": [5, 0, 3, 4, 7, 2, 10, -1]},
            {"dtype": "i32", "shape": [], "data": [6]}
        ]})
    );
}

#[test]
fn args_are_read_by_parameter_type() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("args.pod");
    std::fs::write(
        &file,
        "struct P { w: f32[2], k: i32 }\nfn main(p: P, t: (f32, bool)) -> f32[2] { if t.1 { p.w * t.0 } else { p.w + (p.k as f32) } }\n",
    )
    .expect("write");
    let f = file.to_str().expect("utf-8");
    let args = r#"[{"w": [1.5, -2.0], "k": 3}, [2.0, true]]"#;
    let v = json(&podc(&["eval", f, "--json", "--args", args]));
    assert_eq!(v["outputs"][0]["data"], serde_json::json!([3.0, -4.0]));
    let args_file = dir.path().join("args.json");
    std::fs::write(&args_file, r#"[{"w": [1.5, -2.0], "k": 3}, [2.0, false]]"#).expect("write");
    let v = json(&podc(&["run", f, "--json", "--args", args_file.to_str().expect("utf-8")]));
    assert_eq!(v["outputs"][0]["data"], serde_json::json!([4.5, 1.0]));
    let bad = podc(&["eval", f, "--args", r#"[{"w": [1.5], "k": 3}, [2.0, true]]"#]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(stderr(&bad).contains("expected a list of 2 elements"), "{}", stderr(&bad));
}

/// A u8 argument reaches the device and comes back as bytes (`"dtype": "u8"`), arithmetic
/// wrapping; a value outside 0..=255 is refused with the argument named.
#[test]
fn u8_arguments_and_results() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("bytes.pod");
    std::fs::write(&file, "fn main(frame: u8[2, 2]) -> (u8[2, 2], f32[2, 2]) { (frame + 1, frame as f32 / 255.0) }\n")
        .expect("write");
    let f = file.to_str().expect("utf-8");
    let args = "[[[0, 51], [254, 255]]]";
    let run = json(&podc(&["run", f, "--json", "--args", args]));
    assert_eq!(run["outputs"][0], serde_json::json!({"dtype": "u8", "shape": [2, 2], "data": [1, 52, 255, 0]}));
    // XLA divides by a constant as a multiplication by its reciprocal, an ulp away from
    // the interpreter's quotient: compare the floats loosely.
    let scaled: Vec<f64> =
        run["outputs"][1]["data"].as_array().expect("a list").iter().filter_map(|x| x.as_f64()).collect();
    for (got, want) in scaled.iter().zip([0.0, 0.2, 254.0 / 255.0, 1.0]) {
        assert!((got - want).abs() < 1e-6, "{scaled:?}");
    }
    let eval = json(&podc(&["eval", f, "--json", "--args", args]));
    assert_eq!(run["outputs"][0], eval["outputs"][0]);
    for bad in ["[[[0, 256], [1, 2]]]", "[[[0, -1], [1, 2]]]", "[[[0, 1.5], [1, 2]]]"] {
        let out = podc(&["run", f, "--args", bad]);
        assert_eq!(out.status.code(), Some(1));
        assert!(stderr(&out).contains("argument 1") && stderr(&out).contains("not a valid `u8`"), "{}", stderr(&out));
    }
}

/// `--backend cuda` (or `PODC_BACKEND=cuda`) without a GPU: one sentence at once, nothing
/// fetched into the cache. On a machine with one, the devices it lists are GPUs.
#[test]
fn cuda_without_a_gpu_is_one_clear_sentence() {
    let cache = tempfile::tempdir().unwrap();
    let run = |args: &[&str], backend: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_podc"));
        c.args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("PODC_CACHE", cache.path())
            .env_remove("PODC_PJRT_PLUGIN");
        match backend {
            Some(b) => c.env("PODC_BACKEND", b),
            None => c.env_remove("PODC_BACKEND"),
        };
        c.output().expect("podc starts")
    };
    let flag = run(&["--backend", "cuda", "devices"], None);
    if flag.status.success() {
        assert!(stdout(&flag).contains("platform cuda"), "{}", stdout(&flag));
        return;
    }
    for o in [flag, run(&["run", "examples/basics/matmul.pod"], Some("cuda"))] {
        assert_eq!(o.status.code(), Some(1));
        let err = stderr(&o);
        assert!(
            err == "error: --backend cuda: this machine has no NVIDIA driver (libcuda.so.1 was not found); run on a machine with an NVIDIA GPU, or use --backend cpu\n"
                || (err.starts_with("error: --backend cuda: no NVIDIA GPU is visible") && err.lines().count() == 1),
            "{err}"
        );
    }
    assert_eq!(std::fs::read_dir(cache.path()).unwrap().count(), 0, "nothing fetched");
    let o = run(&["--backend", "tpu", "devices"], None);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unknown backend `tpu`: use `cpu` or `cuda`"), "{}", stderr(&o));
}

#[test]
fn a_missing_plugin_is_named() {
    let o = podc(&["run", "examples/basics/matmul.pod", "--plugin", "/nonexistent/libpjrt.so"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("/nonexistent/libpjrt.so"), "{}", stderr(&o));
    let not_a_library = Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md");
    let o = podc(&["run", "examples/basics/matmul.pod", "--plugin", not_a_library.to_str().expect("utf-8")]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("README.md"), "{}", stderr(&o));
}

#[test]
fn build_emits_every_stage() {
    for emit in ["ast", "ir", "stablehlo"] {
        let o = podc(&["build", "examples/basics/dense.pod", "--emit", emit]);
        assert!(o.status.success(), "{emit}: {}", stderr(&o));
        assert!(!stdout(&o).is_empty());
    }
    let o = podc(&["build", "examples/basics/dense.pod", "--emit", "ir", "--entry", "nope"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no function `nope`"), "{}", stderr(&o));
}

#[test]
fn a_rollout_that_does_not_fit_the_agent_is_reported_before_compiling() {
    // PPO's update takes `Trajectory<128, MB * 4>`: 30 envs do not split into 4 minibatches.
    let o = podc(&["train", "examples/cartpole_ppo.pod", "--envs", "30", "-q", "--out", "/nonexistent/never"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("error[E0306]: the rollout does not fit the agent's `update`"), "{err}");
    assert!(err.contains("`Trajectory<128, MB * 4>`, not rollouts of 128 steps of 30 envs per device"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn build_shows_an_agents_anakin_programs() {
    let o = podc(&["build", "tests/agents/count.pod", "--emit", "stablehlo", "--entry", "Reinforce"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.contains("module @anakin_init") && text.contains("module @anakin_train"), "{text}");
    // The train program's state (7 arrays) is donated to its results.
    assert_eq!(text.matches("tf.aliasing_output").count(), 7, "{text}");
}

#[test]
fn an_extern_env_checks_and_needs_a_host_env_to_run() {
    let file = "tests/agents/extern_pong.pod";
    let ok = podc(&["check", file]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    for args in [&["train", file, "--total-steps", "64"][..], &["sim", file]] {
        let o = podc(args);
        assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("E0307") && stderr(&o).contains("--env URI"), "{args:?}: {}", stderr(&o));
    }
}

#[test]
fn bench_run_times_a_compiled_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("conv.pod");
    std::fs::write(
        &file,
        "fn layer(x: f32[9, 9, 3], w: f32[3, 3, 3, 4]) -> f32[5, 5, 4] { conv2d(x, w, [2, 2], [[1, 1], [1, 1]]) }\n\
         fn net(x: f32[2, 9, 9, 3], w: f32[3, 3, 3, 4], n: i32) -> f32 { sum(vmap(layer, x, w)) + n as f32 }\n",
    )
    .expect("write");
    let f = file.to_str().expect("utf-8");
    let v = json(&podc(&["--no-cache", "bench", "run", f, "--entry", "net", "--runs", "3", "--json"]));
    assert_eq!(v["entry"], "net");
    assert_eq!(v["cache"], "off");
    assert_eq!(v["runs_s"].as_array().expect("runs_s").len(), 3);
    assert!(v["median_s"].as_f64().expect("median_s") > 0.0);
    assert!(v["compile_s"].as_f64().expect("compile_s") > 0.0);
    // With `--args`, those are the arguments; a wrong count is named.
    let bad = podc(&["bench", "run", f, "--entry", "net", "--args", "[1]"]);
    assert!(!bad.status.success());
    assert!(stderr(&bad).contains("argument"), "{}", stderr(&bad));
}

/// `podc eval` or `run` of a file of agents, without `--checkpoint`, says how agents are
/// trained and evaluated, at the agent.
#[test]
fn running_an_agent_file_says_how_to_evaluate_it() {
    for cmd in ["eval", "run"] {
        let o = podc(&[cmd, "examples/ppo.pod"]);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        let err = stderr(&o);
        assert!(err.contains("error[E0223]: no function `main` in the root module"), "{err}");
        assert!(err.contains("agent PPO for Env {"), "the agent is shown: {err}");
        assert!(err.contains("`podc eval FILE --checkpoint RUN_DIR`"), "{err}");
    }
    let o = podc(&["run", "examples/basics/dense.pod", "--entry", "nope"]);
    assert!(stderr(&o).contains("help: choose one with `--entry NAME`"), "{}", stderr(&o));
}
