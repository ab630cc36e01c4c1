//! Schedules that follow the run: `podc train` binds the consts `TOTAL_STEPS` and
//! `TOTAL_UPDATES` to the run's length, records them, and a resumed run keeps them.

use podracer::train::{checkpoint, metrics};
use serde_json::{Value, json};
use std::path::Path;
use std::process::{Command, Output};

/// An agent that learns nothing and reports the run's length and its schedule's fraction
/// left, `1 - n / TOTAL_UPDATES` after `n` updates.
const SCHEDULE: &str = r#"use envs::catch::Catch;

const TOTAL_STEPS: i32 = 1;
const TOTAL_UPDATES: i32 = 1;

struct M { total: f32, left: f32, steps: f32, updates: f32 }

agent Schedule for Catch {
    fn init(key: Key) -> i32 { 0 }
    fn act(n: i32, obs: f32[10, 5], key: Key) -> i32 { 0 }
    fn update<T, B>(n: i32, traj: Trajectory<T, B>, key: Key) -> (i32, M) {
        let left = 1.0 - n as f32 / TOTAL_UPDATES as f32;
        (n + 1, M { total: 0.0, left, steps: TOTAL_STEPS as f32, updates: TOTAL_UPDATES as f32 })
    }
}
"#;

/// 32 env steps per call, 2 updates each.
const SHAPE: [&str; 6] = ["--envs", "4", "--rollout", "4", "--updates-per-call", "2"];

fn podc(cwd: &Path, args: &[&str]) -> Output {
    let mut all = vec!["train", "schedule.pod", "-q"];
    all.extend(SHAPE);
    all.extend(args);
    Command::new(env!("CARGO_BIN_EXE_podc")).args(all).current_dir(cwd).output().expect("podc starts")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn field(records: &[metrics::Record], key: &str) -> Vec<f64> {
    records.iter().map(|r| r[key].as_f64().expect("a number")).collect()
}

/// A directory with `schedule.pod` (holding `agent`) and the `envs/catch.pod` it uses.
fn agent_dir(agent: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("envs")).expect("mkdir");
    let catch = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/envs/catch.pod");
    std::fs::copy(catch, dir.path().join("envs/catch.pod")).expect("copy catch.pod");
    std::fs::write(dir.path().join("schedule.pod"), agent).expect("write the agent");
    dir
}

#[test]
fn the_runs_length_binds_the_schedule_and_a_resume_keeps_it() {
    let dir = agent_dir(SCHEDULE);
    let out = dir.path().join("run");
    let os = out.to_str().expect("utf-8");

    // 100 steps: 4 calls of 32, 8 updates; call c averages updates 2c - 2 and 2c - 1.
    let o = podc(dir.path(), &["--total-steps", "100", "--out", os]);
    assert!(o.status.success(), "{}", stderr(&o));
    let records = metrics::read(&out).expect("metrics");
    assert_eq!(field(&records, "steps"), [100.0; 4]);
    assert_eq!(field(&records, "updates"), [8.0; 4]);
    let left: Vec<f64> = (1..=4).map(|c| 1.0 - (4.0 * c as f64 - 3.0) / 16.0).collect();
    assert_eq!(field(&records, "left"), left);
    let (_, meta) = checkpoint::load(&out).expect("a checkpoint");
    assert_eq!(meta["config"]["overrides"], json!({"TOTAL_STEPS": 100, "TOTAL_UPDATES": 8}));
    assert_eq!(meta["total_steps"], json!(100));
    let recorded: Value =
        serde_json::from_slice(&std::fs::read(out.join("fingerprint.json")).expect("fingerprint.json")).expect("JSON");
    assert_eq!(recorded["sha256"].as_str().map(str::len), Some(64));

    // Resumed without `--total-steps`, the run keeps its length: it is done, and says so.
    let o = podc(dir.path(), &["--resume", os]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains("has trained 128 env steps of its 100: nothing to do"), "{}", stderr(&o));
    assert_eq!(metrics::read(&out).expect("metrics").len(), 4);
    // A longer run would change the schedule of the one checkpointed: refused.
    let o = podc(dir.path(), &["--resume", os, "--total-steps", "200"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("`TOTAL_STEPS` is the run's length, 200 for this run"), "{}", stderr(&o));

    // `--set` of a bound const must agree with the run.
    let fresh = dir.path().join("fresh");
    let fresh = fresh.to_str().expect("utf-8");
    let o = podc(dir.path(), &["--total-steps", "100", "--set", "TOTAL_UPDATES=5", "--out", fresh]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("`TOTAL_UPDATES` is the run's length, 8 for this run"), "{}", stderr(&o));
    let o = podc(dir.path(), &["--total-steps", "100", "--set", "TOTAL_UPDATES=8", "--out", fresh]);
    assert!(o.status.success(), "{}", stderr(&o));

    // A length too long for the const's type is a diagnostic that names where it came from.
    let o = podc(dir.path(), &["--total-steps", "4000000000", "--fingerprint"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("from the run's length (`--total-steps 4000000000`"), "{}", stderr(&o));

    // The fingerprint follows the bound values: another length, another `train` program.
    let fingerprint = |steps: &str| -> Value {
        let o = podc(dir.path(), &["--total-steps", steps, "--fingerprint"]);
        assert!(o.status.success(), "{}", stderr(&o));
        serde_json::from_slice(&o.stdout).expect("one JSON object")
    };
    assert_eq!(fingerprint("100"), recorded);
    assert_ne!(fingerprint("200")["programs"]["train"], recorded["programs"]["train"]);
    assert_eq!(fingerprint("200")["programs"]["init"], recorded["programs"]["init"]);
}

/// A run stopped short of its length, resumed with `--resume` alone, trains to that length.
#[test]
fn a_resume_alone_trains_to_the_runs_own_length() {
    let plain = SCHEDULE
        .replace("const TOTAL_STEPS: i32 = 1;\nconst TOTAL_UPDATES: i32 = 1;\n", "")
        .replace("n as f32 / TOTAL_UPDATES as f32", "0.0")
        .replace("TOTAL_STEPS as f32", "0.0")
        .replace("TOTAL_UPDATES as f32", "0.0");
    let dir = agent_dir(&plain);
    let out = dir.path().join("run");
    let os = out.to_str().expect("utf-8");
    let o = podc(dir.path(), &["--total-steps", "64", "--out", os]);
    assert!(o.status.success(), "{}", stderr(&o));
    // Its checkpoint as a run begun for 128 steps and stopped after 64 leaves it.
    let meta_file = out.join(checkpoint::META_FILE);
    let mut record: Value = serde_json::from_str(&std::fs::read_to_string(&meta_file).expect("read")).expect("JSON");
    assert_eq!(record["meta"]["total_steps"], json!(64));
    record["meta"]["total_steps"] = json!(128);
    std::fs::write(&meta_file, record.to_string()).expect("write");
    let o = podc(dir.path(), &["--resume", os]);
    assert!(o.status.success(), "{}", stderr(&o));
    let records = metrics::read(&out).expect("metrics");
    assert_eq!(field(&records, "env_steps"), [32.0, 64.0, 96.0, 128.0]);
}

/// The examples that anneal take the run's length without `--set`: half of IMPALA's
/// documented run binds half its updates.
#[test]
fn an_example_anneals_over_the_run_it_is_given() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // One call of 10 updates of 32 envs x 64 steps.
    let args = [
        "train",
        "examples/cartpole_impala.pod",
        "-q",
        "--total-steps",
        "20480",
        "--out",
        out.to_str().expect("utf-8"),
    ];
    let o = Command::new(env!("CARGO_BIN_EXE_podc")).args(args).current_dir(root).output().expect("podc starts");
    assert!(o.status.success(), "{}", stderr(&o));
    let (_, meta) = checkpoint::load(&out).expect("a checkpoint");
    assert_eq!(meta["config"]["overrides"], json!({"TOTAL_UPDATES": 10}));
}
