//! Looking at an agent: `podc eval --checkpoint` (exactly N whole episodes, the summary's
//! fields, seeds of a `--seeds` run), `podc play` and `podc sim --gif` (GIFs decoded and
//! their pixels checked), and bad input as clear errors. In the learning-run tier, A2C
//! trained on Catch returns at least 0.9 over 1,000 episodes.
//!
//! The debug tests evaluate learners written straight into a checkpoint (a linear policy
//! of zeros: uniformly random actions), so that they need no training run.

use crate::tier;

use podracer::array::Array;
use podracer::train::checkpoint;
use serde_json::{Value, json};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use tempfile::TempDir;

/// A linear policy on Catch; no `greedy`. `V`, the size of an unused array, is there to be
/// overridden.
const TINY: &str = r#"use envs::catch::Catch;
const V: i32 = 50;
struct Params { pi: f32[50, 3], v: f32[V] }
struct Metrics { total: f32 }
fn logits(p: Params, obs: f32[10, 5]) -> f32[3] { reshape(obs, [50]) @ p.pi }
agent Tiny for Catch {
    fn init(key: Key) -> Params { Params { pi: normal(key, [50, 3]) * 0.01, v: zeros([V]) } }
    fn act(p: Params, obs: f32[10, 5], key: Key) -> i32 { categorical(key, logits(p, obs)) }
    fn update<T, B>(p: Params, traj: Trajectory<T, B>, key: Key) -> (Params, Metrics) { (p, Metrics { total: 0.0 }) }
}
"#;

/// An env without `render`, and an agent for it.
const BLIND: &str = r#"struct S { n: i32 }
struct Metrics { total: f32 }
env Count {
    observation: f32[1]
    action: discrete(2)
    fn reset(key: Key) -> S { S { n: 0 } }
    fn step(s: S, a: i32, key: Key) -> Step<S> { Step { state: S { n: s.n + 1 }, reward: 1.0, terminated: s.n >= 2, truncated: false } }
    fn observe(s: S) -> f32[1] { [s.n as f32] }
}
agent Blind for Count {
    fn init(key: Key) -> f32 { 0.0 }
    fn act(l: f32, obs: f32[1], key: Key) -> i32 { 0 }
    fn greedy(l: f32, obs: f32[1]) -> i32 { 0 }
    fn update<T, B>(l: f32, traj: Trajectory<T, B>, key: Key) -> (f32, Metrics) { (l, Metrics { total: 0.0 }) }
}
"#;

/// A recurrent agent on Catch whose carry must start afresh with every episode.
const MEMO: &str = include_str!("../fixtures/memo.pod");

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A directory with `tiny.pod`, `blind.pod`, the `envs/catch.pod` they import, and
/// checkpoints: `zeros` (Tiny's learner, all zeros), `seeds` (two seeds, 5 and 6, of it),
/// `overridden` (of a run with `--set V=7`), `wide` (of another shape), `other` (another
/// agent's), `blind` (Blind's) and `memo` (Memo's).
fn dir() -> &'static Path {
    static DIR: OnceLock<TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path();
        fs::create_dir(p.join("envs")).expect("mkdir");
        fs::copy(root().join("examples/envs/catch.pod"), p.join("envs/catch.pod")).expect("copy catch.pod");
        fs::write(p.join("tiny.pod"), TINY).expect("write tiny.pod");
        fs::write(p.join("blind.pod"), BLIND).expect("write blind.pod");
        fs::write(p.join("memo.pod"), MEMO).expect("write memo.pod");
        let zeros = |shape: Vec<usize>| Array::f32(shape.clone(), vec![0.0; shape.iter().product()]);
        let save = |name: &str, arrays: Vec<(&str, Array)>, config: Value| {
            let arrays: Vec<(String, Array)> = arrays.into_iter().map(|(n, a)| (n.to_string(), a)).collect();
            let meta = json!({ "config": config, "calls": 1, "env_steps": 1000 });
            checkpoint::save(&p.join(name), &arrays, &meta).expect("save a checkpoint");
        };
        let tiny = || vec![("learner.pi", zeros(vec![50, 3])), ("learner.v", zeros(vec![50]))];
        save("zeros", tiny(), json!({ "file": "tiny.pod", "agent": "Tiny", "seed": 0 }));
        let seeded = vec![("learner.pi", zeros(vec![2, 50, 3])), ("learner.v", zeros(vec![2, 50]))];
        save("seeds", seeded, json!({ "file": "tiny.pod", "agent": "Tiny", "seed": 5, "seeds": 2 }));
        save("other", tiny(), json!({ "file": "a2c.pod", "agent": "A2C", "seed": 0 }));
        let config = json!({ "agent": "Tiny", "overrides": { "V": 7 } });
        save("overridden", vec![("learner.pi", zeros(vec![50, 3])), ("learner.v", zeros(vec![7]))], config);
        save(
            "wide",
            vec![("learner.pi", zeros(vec![50, 4])), ("learner.v", zeros(vec![50]))],
            json!({ "agent": "Tiny" }),
        );
        save("blind", vec![("learner", zeros(vec![]))], json!({ "file": "blind.pod", "agent": "Blind", "seed": 0 }));
        save("memo", vec![("learner", zeros(vec![]))], json!({ "file": "memo.pod", "agent": "Memo", "seed": 0 }));
        dir
    })
    .path()
}

fn podc(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_podc")).args(args).current_dir(dir()).output().expect("podc starts")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The one JSON object a successful `--json` run prints.
fn json_of(o: &Output) -> Value {
    assert!(o.status.success(), "podc failed: {}", stderr(o));
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("not one JSON object ({e}): {:?}", o.stdout))
}

/// A failure must be exit status 1 with a message, not a panic.
fn assert_fails(o: &Output, needle: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains(needle), "expected `{needle}` in:\n{err}");
}

#[test]
fn eval_runs_exactly_the_episodes_asked_for_and_reports_their_distribution() {
    // 37 episodes over 8 environments: quotas of 5 and 4.
    let v = json_of(&podc(&["eval", "tiny.pod", "--checkpoint", "zeros", "--episodes", "37", "--envs", "8", "--json"]));
    assert_eq!(v["episodes"], 37, "{v}");
    assert_eq!(
        (v["agent"].as_str(), v["env"].as_str(), v["policy"].as_str()),
        (Some("Tiny"), Some("Catch"), Some("sample"))
    );
    let f = |k: &str| v[k].as_f64().unwrap_or_else(|| panic!("no `{k}` in {v}"));
    let order = ["min_return", "p25_return", "median_return", "p75_return", "max_return"].map(f);
    assert!(order.windows(2).all(|w| w[0] <= w[1]) && order[0] >= -1.0 && order[4] <= 1.0, "{v}");
    assert!((-1.0..=1.0).contains(&f("mean_return")) && f("std_return") >= 0.0, "{v}");
    // Every Catch episode lasts 9 steps; a uniformly random paddle misses most balls.
    assert_eq!(f("mean_length"), 9.0, "{v}");
    assert!(f("mean_return") < 0.5, "{v}");
    let counts: u64 = v["histogram"]["counts"].as_array().expect("counts").iter().filter_map(Value::as_u64).sum();
    assert_eq!(counts, 37, "{v}");
    assert_eq!(v["histogram"]["edges"].as_array().map(Vec::len), Some(11), "{v}");
}

#[test]
fn eval_the_same_seed_twice_gives_the_same_returns() {
    let args = ["eval", "tiny.pod", "--checkpoint", "zeros", "--episodes", "20", "--seed", "3", "--json"];
    assert_eq!(json_of(&podc(&args)), json_of(&podc(&args)));
}

#[test]
fn eval_evaluates_each_seed_of_a_seeds_run_or_the_one_asked_for() {
    let v = json_of(&podc(&["eval", "tiny.pod", "--checkpoint", "seeds", "--episodes", "10", "--json"]));
    let seeds: Vec<i64> =
        v["train_seeds"].as_array().expect("train_seeds").iter().filter_map(|s| s["train_seed"].as_i64()).collect();
    assert_eq!(seeds, [5, 6], "{v}");
    assert_eq!(v["episodes"], 20, "{v}");
    let v = json_of(&podc(&[
        "eval",
        "tiny.pod",
        "--checkpoint",
        "seeds",
        "--episodes",
        "10",
        "--train-seed",
        "6",
        "--json",
    ]));
    assert_eq!((v["train_seed"].as_i64(), v["episodes"].as_u64()), (Some(6), Some(10)), "{v}");
    assert_fails(&podc(&["eval", "tiny.pod", "--checkpoint", "seeds", "--train-seed", "0"]), "trained seeds 5, 6");
}

#[test]
fn eval_compiles_the_agent_with_the_runs_overrides() {
    let v = json_of(&podc(&["eval", "tiny.pod", "--checkpoint", "overridden", "--episodes", "3", "--json"]));
    assert_eq!(v["episodes"], 3, "{v}");
    let o = podc(&["eval", "tiny.pod", "--checkpoint", "overridden", "--set", "V=8"]);
    assert_fails(&o, "`learner.v` in the checkpoint is `f32[7]`, but agent `Tiny` has `f32[8]`");
}

#[test]
fn bad_input_is_a_clear_error() {
    assert_fails(&podc(&["eval", "tiny.pod", "--checkpoint", "nowhere"]), "no checkpoint");
    assert_fails(&podc(&["eval", "tiny.pod", "--checkpoint", "other"]), "has no agent `A2C`");
    assert_fails(&podc(&["eval", "tiny.pod", "--checkpoint", "zeros", "--agent", "A2C"]), "is of agent `Tiny`");
    assert_fails(
        &podc(&["eval", "tiny.pod", "--checkpoint", "zeros", "--greedy"]),
        "agent `Tiny` has no `greedy`; define its most likely action as `fn greedy(l: Params, obs: f32[10, 5]) -> i32`",
    );
    assert_fails(
        &podc(&["eval", "tiny.pod", "--checkpoint", "wide"]),
        "`learner.pi` in the checkpoint is `f32[50, 4]`",
    );
    assert_fails(&podc(&["eval", "tiny.pod", "--checkpoint", "zeros", "--entry", "logits"]), "give one or the other");
    assert_fails(
        &podc(&["play", "blind.pod", "--checkpoint", "blind", "--out", "x.gif"]),
        "env `Count` has no `render`",
    );
    assert_fails(&podc(&["sim", "blind.pod", "--env", "Count", "--gif", "x.gif"]), "env `Count` has no `render`");
    assert!(!dir().join("x.gif").exists());
    let o = podc(&["eval", "tiny.pod", "--episodes", "10"]);
    assert_eq!(o.status.code(), Some(2), "clap: --episodes needs --checkpoint: {}", stderr(&o));
}

#[test]
fn a_greedy_agent_evaluates_with_its_greedy() {
    let v = json_of(&podc(&["eval", "blind.pod", "--checkpoint", "blind", "--episodes", "5", "--greedy", "--json"]));
    // Blind's episodes are 3 steps of reward 1.
    assert_eq!(
        (v["mean_return"].as_f64(), v["std_return"].as_f64(), v["policy"].as_str()),
        (Some(3.0), Some(0.0), Some("greedy")),
        "{v}"
    );
}

#[test]
fn a_recurrent_agent_starts_each_episode_with_its_initial_carry() {
    // 3 environments for 12 episodes: each environment plays 4 in a row.
    for policy in [&[][..], &["--greedy"]] {
        let mut args = vec!["eval", "memo.pod", "--checkpoint", "memo", "--episodes", "12", "--envs", "3", "--json"];
        args.extend(policy);
        let v = json_of(&podc(&args));
        assert_eq!((v["episodes"].as_u64(), v["min_return"].as_f64()), (Some(12), Some(1.0)), "{policy:?}: {v}");
    }
    let out = dir().join("memo.gif");
    let o = podc(&["play", "memo.pod", "--checkpoint", "memo", "--greedy", "--out", out.to_str().expect("utf-8")]);
    assert!(o.status.success(), "{}", stderr(&o));
    let (w, h, fs) = frames(&out);
    assert_eq!(fs.len(), 10);
    assert!(cells(&fs[9], w, h, PADDLE).is_empty(), "the ball is caught, hiding the paddle");
}

/// The RGBA frames of a GIF.
fn frames(path: &Path) -> (usize, usize, Vec<Vec<u8>>) {
    let mut opts = gif::DecodeOptions::new();
    opts.set_color_output(gif::ColorOutput::RGBA);
    let mut d = opts.read_info(fs::File::open(path).expect("the GIF exists")).expect("a GIF");
    let (w, h) = (d.width() as usize, d.height() as usize);
    let mut out = vec![];
    while let Some(f) = d.read_next_frame().expect("a frame") {
        assert_eq!((f.width as usize, f.height as usize), (w, h), "a full frame");
        out.push(f.buffer.to_vec());
    }
    (w, h, out)
}

/// Catch's colours in its `render`: the ball white, the paddle blue, on black.
const BALL: [u8; 3] = [255, 255, 255];
const PADDLE: [u8; 3] = [51, 128, 255];

/// The cells of a Catch frame (10 rows by 5 columns, scaled up) that have `colour`.
fn cells(frame: &[u8], w: usize, h: usize, colour: [u8; 3]) -> Vec<(usize, usize)> {
    let (ch, cw) = (h / 10, w / 5);
    let mut found = vec![];
    for r in 0..10 {
        for c in 0..5 {
            let i = ((r * ch + ch / 2) * w + c * cw + cw / 2) * 4;
            if frame[i..i + 3] == colour {
                found.push((r, c));
            }
        }
    }
    found
}

#[test]
fn sim_gif_shows_one_catch_episode() {
    let out = dir().join("sim.gif");
    let o = Command::new(env!("CARGO_BIN_EXE_podc"))
        .args(["sim", "examples/envs/catch.pod", "--seed", "2", "--gif"])
        .arg(&out)
        .current_dir(root())
        .output()
        .expect("podc starts");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout).lines().count(), 9, "one episode: 9 steps");
    let (w, h, fs) = frames(&out);
    assert_eq!((w, h, fs.len()), (5 * 24, 10 * 24, 10), "the reset state and 9 steps, 24 pixels a cell");
    for (t, f) in fs.iter().enumerate().take(9) {
        let ball = cells(f, w, h, BALL);
        assert!(ball.len() == 1 && ball[0].0 == t, "frame {t}: the ball is in row {t}: {ball:?}");
        let paddle = cells(f, w, h, PADDLE);
        assert!(paddle.len() == 1 && paddle[0].0 == 9, "frame {t}: the paddle is in the bottom row: {paddle:?}");
    }
}

/// `podc ARGS` in the checkout, for the `*_in_release` tests (named for the release build
/// they once made; they use the `podc` that `cargo test` builds, as `train.rs`'s learning
/// runs do).
fn release(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_podc")).args(args).current_dir(root()).output().expect("podc starts")
}

/// `examples/catch_a2c.pod` trained as its header says, once for the learning-run tests.
fn trained_catch() -> PathBuf {
    static RUN: OnceLock<TempDir> = OnceLock::new();
    let dir = RUN.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let out = dir.path().join("catch");
        let out = out.to_str().expect("utf-8");
        let o =
            release(&["train", "examples/catch_a2c.pod", "--total-steps", "500000", "--seed", "0", "-q", "--out", out]);
        assert!(o.status.success(), "the learning run failed: {}", stderr(&o));
        dir
    });
    dir.path().join("catch")
}

#[test]
fn trained_catch_a2c_returns_at_least_0_9_over_1000_episodes_in_release() {
    if tier::slow("a learning run") {
        return;
    }
    let run = trained_catch();
    let run = run.to_str().expect("utf-8");
    for greedy in [&[][..], &["--greedy"]] {
        let mut args = vec!["eval", "examples/catch_a2c.pod", "--checkpoint", run, "--episodes", "1000", "--json"];
        args.extend(greedy);
        let v = json_of(&release(&args));
        assert_eq!(v["episodes"], 1000, "{v}");
        let (mean, std) = (v["mean_return"].as_f64().expect("mean"), v["std_return"].as_f64().expect("std"));
        assert!(mean >= 0.9 && std.is_finite(), "{greedy:?}: mean return {mean} (std {std}) over 1000 episodes: {v}");
    }
}

#[test]
fn play_writes_a_gif_of_the_ball_and_the_paddle_in_release() {
    if tier::slow("a learning run") {
        return;
    }
    let run = trained_catch();
    let gif = run.join("episode.gif");
    let args = ["play", "examples/catch_a2c.pod", "--checkpoint", run.to_str().expect("utf-8"), "--out"];
    let o = release(&[&args[..], &[gif.to_str().expect("utf-8"), "--greedy"]].concat());
    assert!(o.status.success(), "{}", stderr(&o));
    let (w, h, fs) = frames(&gif);
    assert_eq!(fs.len(), 10, "the reset state and the 9 steps of a Catch episode");
    for (t, f) in fs.iter().enumerate() {
        let ball = cells(f, w, h, BALL);
        assert!(ball.len() == 1 && ball[0].0 == t, "frame {t}: the ball is in row {t}: {ball:?}");
        // The trained paddle catches the ball: it hides under it in the last frame.
        let paddle = cells(f, w, h, PADDLE);
        match t {
            9 => assert!(paddle.is_empty(), "the ball is caught: {paddle:?}"),
            _ => assert!(paddle.len() == 1 && paddle[0].0 == 9, "frame {t}: the paddle: {paddle:?}"),
        }
    }
}

#[test]
fn the_summary_is_numpys() {
    use podracer::train::eval::{Episodes, Summary};
    // np.mean, np.std, np.percentile([25, 50, 75]) of [4, 1, 3, 2].
    let s = Summary::of(&Episodes { returns: vec![4.0, 1.0, 3.0, 2.0], lengths: vec![1, 2, 3, 4] });
    let got = [s.mean, s.std, s.min, s.p25, s.median, s.p75, s.max, s.mean_length];
    let want = [2.5, 1.118_033_988_749_895, 1.0, 1.75, 2.5, 3.25, 4.0, 2.5];
    assert!(got.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-12), "{got:?}");
    assert_eq!(s.counts, [1, 0, 0, 1, 0, 0, 1, 0, 0, 1]);
    assert_eq!((s.edges[0], s.edges[10]), (1.0, 4.0));
}
