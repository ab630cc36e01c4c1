//! `--set NAME=VALUE`: a run's value for a const of the root file, checked against the
//! const's type, recorded with a training run's checkpoint and kept on `--resume`.

use std::path::Path;
use std::process::{Command, Output};

fn podc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_podc"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("PODC_NO_CACHE", "1")
        .output()
        .expect("podc starts")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The result of `podc eval --json`, which must succeed.
fn eval(args: &[&str]) -> serde_json::Value {
    let o = podc(&[&["eval", "tests/overrides/sizes.pod", "--json"], args].concat());
    assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("one JSON object");
    v["outputs"][0].clone()
}

/// The message of a `podc` run that must fail with status 1.
fn failure(args: &[&str]) -> String {
    let o = podc(args);
    assert_eq!(o.status.code(), Some(1), "{args:?}: {}", stderr(&o));
    let err = stderr(&o);
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn a_set_const_changes_values_and_shapes() {
    assert_eq!(eval(&[])["data"], serde_json::json!([1.0, 1.5, 2.0]));
    // `N` is a size: the result's shape follows it.
    let v = eval(&["--set", "N=5"]);
    assert_eq!(
        (v["shape"].clone(), v["data"].clone()),
        (serde_json::json!([5]), serde_json::json!([1.0, 1.5, 2.0, 2.5, 3.0]))
    );
    let v = eval(&["--set", "N=2", "--set", "SCALE=2", "--set", "FLIP=true", "--set", "OFFSETS=[3, 4]"]);
    assert_eq!(v["data"], serde_json::json!([-3.0, -5.0]));
    // An integer is a fine `f32`.
    assert_eq!(eval(&["--set", "SCALE=1"])["data"], serde_json::json!([1.0, 2.0, 3.0]));
}

#[test]
fn unknown_names_and_bad_values_are_clear_errors() {
    let agent = "examples/catch_a2c.pod";
    // Reported before anything compiles, by every command that loads the file.
    let unknown = failure(&["train", agent, "--set", "NOPE=1", "-q", "--out", "/nonexistent/never"]);
    insta::assert_snapshot!("unknown_name", unknown);
    assert_eq!(failure(&["check", agent, "--set", "NOPE=1"]), unknown);
    insta::assert_snapshot!("near_name", failure(&["check", agent, "--set", "ENT_COEFF=0"]));
    insta::assert_snapshot!("not_a_const", failure(&["check", agent, "--set", "policy=0"]));
    insta::assert_snapshot!(
        "not_a_value",
        failure(&["train", agent, "--set", "LR=abc", "-q", "--out", "/nonexistent/never"])
    );
    insta::assert_snapshot!("wrong_dtype", failure(&["eval", "tests/overrides/sizes.pod", "--set", "N=2.5"]));
    insta::assert_snapshot!("wrong_shape", failure(&["eval", "tests/overrides/sizes.pod", "--set", "OFFSETS=[1]"]));
    // A size that does not fit is the only error: not the shapes it would have made.
    let sized = failure(&["check", "examples/sac.pod", "--set", "HIDDEN=2.5"]);
    assert_eq!(sized.matches("error[").count(), 1, "{sized}");
    assert!(sized.contains("error[E0232]: `--set HIDDEN=2.5` does not fit `HIDDEN: i32`"), "{sized}");
    insta::assert_snapshot!("given_twice", failure(&["check", agent, "--set", "LR=0.1", "--set", "LR=0.2"]));
    insta::assert_snapshot!("no_equals", failure(&["check", agent, "--set", "LR"]));
}

fn checkpoint_config(dir: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(dir.join("checkpoint.json")).expect("a checkpoint");
    serde_json::from_str::<serde_json::Value>(&text).expect("JSON")["meta"]["config"].clone()
}

fn losses(dir: &Path) -> Vec<f64> {
    let text = std::fs::read_to_string(dir.join("metrics.jsonl")).expect("metrics");
    text.lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("JSON")["loss"].as_f64().expect("a loss"))
        .collect()
}

#[test]
fn training_uses_records_and_resumes_with_the_overrides() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = |name: &str| tmp.path().join(name).to_str().expect("utf-8").to_string();
    let (plain, set) = (dir("plain"), dir("set"));
    let train = |out: &str, steps: &str, extra: &[&str]| {
        let base = ["train", "examples/catch_a2c.pod", "--envs", "8", "--total-steps", steps, "-q", "--out", out];
        let o = podc(&[&base[..], extra].concat());
        assert!(o.status.success(), "{extra:?}: {}", stderr(&o));
    };
    train(&plain, "2560", &[]);
    train(&set, "2560", &["--set", "LR=0.001", "--set", "ENT_COEF=0.0"]);

    // Recorded next to the checkpoint; a run without overrides records none.
    assert_eq!(checkpoint_config(Path::new(&set))["overrides"], serde_json::json!({"ENT_COEF": 0.0, "LR": 0.001}));
    assert!(checkpoint_config(Path::new(&plain)).get("overrides").is_none());
    // Used: the same seed learns differently.
    let (a, b) = (losses(Path::new(&plain)), losses(Path::new(&set)));
    assert_eq!(a.len(), b.len());
    assert_ne!(a, b, "the overrides changed nothing");

    // `--resume` without `--set` keeps the checkpoint's overrides; other ones are refused.
    train(&set, "5120", &["--resume", &set]);
    assert_eq!(checkpoint_config(Path::new(&set))["overrides"], serde_json::json!({"ENT_COEF": 0.0, "LR": 0.001}));
    let err = failure(&[
        "train",
        "examples/catch_a2c.pod",
        "--envs",
        "8",
        "--total-steps",
        "7680",
        "-q",
        "--out",
        &set,
        "--resume",
        &set,
        "--set",
        "LR=0.01",
    ]);
    assert!(err.contains("cannot resume") && err.contains("`overrides`"), "{err}");
}
