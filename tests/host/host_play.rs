//! `podc eval` and `podc play` of agents on host envs: a Sebulba run's checkpoint is
//! evaluated on the host env it trained on, `--env URI` chooses another (checked against
//! the agent's env), exactly N whole episodes are counted, a recurrent agent's carry
//! starts afresh with each episode, and `podc play` writes the host env's own frames
//! (Gymnasium's `rgb_array`, EnvPool's, the ALE's full-colour screen) as a GIF, decoded
//! and checked here. Envs that cannot draw, and envs of other spaces, are clear errors.
//! The EnvPool test is ignored (its first run installs EnvPool).
//!
//! The Python tests use the cache venv made by podc's own code (as tests/host/host.rs does),
//! with pygame for Gymnasium's drawing, whatever `PODC_PYTHON` or `VIRTUAL_ENV` say.

use crate::tier;

use podracer::array::Array;
use podracer::host::Backend;
use podracer::host::python::{cache_venv_with, render_requirements, requirements};
use podracer::train::checkpoint;
use serde_json::{Value, json};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use tempfile::TempDir;

/// A linear policy on Gymnasium's CartPole: `act` samples from logits `obs @ w`, `greedy`
/// pushes the cart the way `obs . g` leans. With `g = [0, 0, 1, 1]` (the pole's angle and
/// angular velocity) it balances the pole for hundreds of steps.
const POLE: &str = r#"extern env CartPoleV1 { observation: f32[4], action: discrete(2), time_limit: 500 }
struct W { w: f32[4, 2], g: f32[4] }
struct M { total: f32 }
agent Pole for CartPoleV1 {
    fn init(key: Key) -> W { W { w: zeros([4, 2]), g: zeros([4]) } }
    fn act(l: W, obs: f32[4], key: Key) -> i32 { categorical(key, obs @ l.w) }
    fn greedy(l: W, obs: f32[4]) -> i32 { if sum(obs * l.g) > 0.0 { 1 } else { 0 } }
    fn update<T, B>(l: W, traj: Trajectory<T, B>, key: Key) -> (W, M) { (l, M { total: 0.0 }) }
}
"#;

/// A do-nothing agent for the ALE's Pong (the spaces `podc env describe ale:Pong` prints).
const PONG: &str = r#"extern env Pong { observation: u8[4, 84, 84], action: discrete(6), time_limit: 27000 }
struct M { total: f32 }
agent Still for Pong {
    fn init(key: Key) -> f32 { 0.0 }
    fn act(l: f32, obs: u8[4, 84, 84], key: Key) -> i32 { 0 }
    fn update<T, B>(l: f32, traj: Trajectory<T, B>, key: Key) -> (f32, M) { (l, M { total: 0.0 }) }
}
"#;

/// A recurrent agent on Catch whose carry must start afresh with every episode.
const MEMO: &str = include_str!("../fixtures/memo.pod");

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A directory with the agents above, `envs/catch.pod`, and checkpoints written as a
/// Sebulba run writes them: `random` (Pole with zero weights: uniformly random actions)
/// and `balance` (Pole's balancing `g`), both of a run on `gymnasium:CartPole-v1`;
/// `unnamed` (Pole, of a run that names no env); `pong` (Still, of a run on
/// `ale:Pong?max_episode_steps=40`); `memo` (Memo, of a run on its own env through
/// `pod:`, the URI `podc train --arch sebulba` records, here of a run in another
/// directory).
fn dir() -> &'static Path {
    static DIR: OnceLock<TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path();
        fs::create_dir(p.join("envs")).expect("mkdir");
        fs::copy(root().join("examples/envs/catch.pod"), p.join("envs/catch.pod")).expect("copy catch.pod");
        for (name, text) in [("pole.pod", POLE), ("pong.pod", PONG), ("memo.pod", MEMO)] {
            fs::write(p.join(name), text).expect("write an agent");
        }
        let save = |name: &str, arrays: Vec<(&str, Array)>, agent: &str, env: &str| {
            let arrays: Vec<(String, Array)> = arrays.into_iter().map(|(n, a)| (n.to_string(), a)).collect();
            let config = json!({ "agent": agent, "seed": 0, "arch": "sebulba", "env": env });
            let meta = json!({ "config": config, "updates": 1, "env_steps": 1000 });
            checkpoint::save(&p.join(name), &arrays, &meta).expect("save a checkpoint");
        };
        let pole = |g: [f32; 4]| {
            vec![("learner.w", Array::f32(vec![4, 2], vec![0.0; 8])), ("learner.g", Array::f32(vec![4], g.to_vec()))]
        };
        save("random", pole([0.0; 4]), "Pole", "gymnasium:CartPole-v1");
        let config = json!({ "agent": "Pole", "seed": 0 });
        let arrays: Vec<(String, Array)> = pole([0.0; 4]).into_iter().map(|(n, a)| (n.to_string(), a)).collect();
        checkpoint::save(&p.join("unnamed"), &arrays, &json!({ "config": config })).expect("save a checkpoint");
        save("balance", pole([0.0, 0.0, 1.0, 1.0]), "Pole", "gymnasium:CartPole-v1");
        let scalar = || vec![("learner", Array::f32(vec![], vec![0.0]))];
        save("pong", scalar(), "Still", "ale:Pong?max_episode_steps=40");
        save("memo", scalar(), "Memo", "pod:examples/envs/catch.pod?env=Catch");
        dir
    })
    .path()
}

/// The cache venv with what `backend`'s envs need to run and to draw, made or extended by
/// podc's own code (one test at a time).
fn python(backend: Backend) -> PathBuf {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let cache = podracer::runtime::plugin::cache_dir().expect("a cache directory");
    let wanted = [requirements(backend), render_requirements(backend)].concat();
    cache_venv_with(&cache, &wanted).unwrap_or_else(|e| panic!("{e}"))
}

/// `podc ARGS` in the test directory, with `--python PY` for `backend`'s envs.
fn podc(args: &[&str], backend: Option<Backend>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_podc"));
    c.args(args).current_dir(dir());
    if let Some(b) = backend {
        c.arg("--python").arg(python(b));
    }
    c.output().expect("podc starts")
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
fn assert_fails(o: &Output, needles: &[&str]) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    for needle in needles {
        assert!(err.contains(needle), "expected `{needle}` in:\n{err}");
    }
}

/// A GIF's width, height and frames (RGBA).
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

/// The rows of a frame with a dark pixel (all channels below 64).
fn dark_rows(frame: &[u8], w: usize) -> Vec<usize> {
    let dark = |px: &[u8]| px[..3].iter().all(|&c| c < 64);
    frame.chunks(w * 4).enumerate().filter(|(_, row)| row.chunks(4).any(dark)).map(|(r, _)| r).collect()
}

/// The number of frames `podc play` says it wrote (`wrote FILE: N frames, ..`).
fn frames_written(o: &Output) -> usize {
    let err = stderr(o);
    let n = err.rsplit(".gif: ").next().and_then(|s| s.split(' ').next()).and_then(|n| n.parse().ok());
    n.unwrap_or_else(|| panic!("no `wrote FILE: N frames` in: {err}"))
}

/// A short Sebulba run of an agent with a `.pod` env of its own, on a Gymnasium CartPole
/// that a user's module registers (`--env-import` of a `.py` file, given relative to the
/// run's directory): `podc eval` runs it on the host env it trained on, not on the `.pod`
/// one, importing the module the checkpoint recorded, from another directory.
#[test]
fn a_sebulba_run_is_evaluated_on_its_host_env() {
    if tier::slow("Python env workers") {
        return;
    }
    let run = dir().join("a2c");
    fs::copy(root().join("tests/fixtures/host/blind_envs.py"), dir().join("blind_envs.py")).expect("copy");
    let file = root().join("examples/cartpole_a2c.pod");
    let (file, run_s) = (file.to_str().expect("utf-8"), run.to_str().expect("utf-8"));
    let train = ["train", file, "--env", "gymnasium:PodTest/Blind-v0", "--env-import", "blind_envs.py", "-q"];
    let more = ["--envs", "8", "--rollout", "16", "--updates-per-call", "2", "--total-steps", "1024", "--out", run_s];
    let o = podc(&[&train[..], &more[..]].concat(), Some(Backend::Gymnasium));
    assert!(o.status.success(), "{}", stderr(&o));
    let eval = ["eval", file, "--checkpoint", run_s, "--episodes", "7", "--envs", "3", "--json", "--python"];
    let mut elsewhere = Command::new(env!("CARGO_BIN_EXE_podc"));
    elsewhere.args(eval).arg(python(Backend::Gymnasium)).current_dir(root());
    let v = json_of(&elsewhere.output().expect("podc starts"));
    assert_eq!((v["episodes"].as_u64(), v["env"].as_str()), (Some(7), Some("gymnasium:PodTest/Blind-v0")), "{v}");
    assert_eq!((v["agent"].as_str(), v["env_steps"].as_u64()), (Some("A2C"), Some(1024)), "{v}");
    // CartPole pays 1 a step: the returns are the lengths.
    assert_eq!(v["mean_return"], v["mean_length"], "{v}");
    let counts: u64 = v["histogram"]["counts"].as_array().expect("counts").iter().filter_map(Value::as_u64).sum();
    assert_eq!(counts, 7, "{v}");
}

#[test]
fn eval_counts_exactly_the_episodes_asked_for_and_repeats_with_the_seed() {
    if tier::slow("Python env workers") {
        return;
    }
    // 11 episodes over 4 envs: quotas of 3 and 2.
    let args =
        ["eval", "pole.pod", "--checkpoint", "random", "--episodes", "11", "--envs", "4", "--seed", "5", "--json"];
    let v = json_of(&podc(&args, Some(Backend::Gymnasium)));
    assert_eq!((v["episodes"].as_u64(), v["policy"].as_str()), (Some(11), Some("sample")), "{v}");
    // Random pushes drop the pole within a few dozen steps.
    let mean = v["mean_return"].as_f64().expect("mean_return");
    assert!((8.0..60.0).contains(&mean) && v["mean_return"] == v["mean_length"], "{v}");
    assert_eq!(v, json_of(&podc(&args, Some(Backend::Gymnasium))), "the same seed, the same episodes");
    // The balancing controller, greedy, on the same host env named with `--env`.
    let v = json_of(&podc(&balanced("gymnasium:CartPole-v1"), Some(Backend::Gymnasium)));
    assert_balanced(&v, "gymnasium:CartPole-v1");
}

/// An env worker that fails during an evaluation fails the evaluation: no mean of
/// episodes cut short, and no restarts.
#[test]
fn eval_fails_when_an_env_worker_fails() {
    if tier::slow("Python env workers") {
        return;
    }
    let faulty = root().join("tests/fixtures/host/faulty_envs.py");
    let env = "gymnasium:PodTest/Faulty-v0?fail_at=30";
    let mut args = balanced(env);
    args.extend(["--env-import", faulty.to_str().expect("utf-8")]);
    let o = podc(&args, Some(Backend::Gymnasium));
    assert_fails(&o, &["env worker 0 failed", "ValueError: boom at step 30"]);
    assert!(o.stdout.is_empty(), "no result: {}", String::from_utf8_lossy(&o.stdout));
    assert!(!stderr(&o).contains("restarting"), "{}", stderr(&o));
}

/// `podc eval` of the balancing controller, greedy, on `env`.
fn balanced(env: &str) -> Vec<&str> {
    vec!["eval", "pole.pod", "--checkpoint", "balance", "--episodes", "4", "--greedy", "--env", env, "--json"]
}

fn assert_balanced(v: &Value, env: &str) {
    let got = (v["episodes"].as_u64(), v["env"].as_str(), v["policy"].as_str());
    assert_eq!(got, (Some(4), Some(env), Some("greedy")), "{v}");
    assert!(v["min_return"].as_f64().expect("min_return") >= 100.0, "{env}: {v}");
}

#[test]
fn a_recurrent_agents_carry_starts_afresh_with_each_host_episode() {
    // 3 environments for 12 episodes: each plays 4 in a row; all are caught only if the
    // carry restarts where each episode ends. Through `pod:` (no Python): the agent's own
    // env is on the device by default, on the host with `--env`.
    for env in [&[][..], &["--env", "pod:envs/catch.pod"]] {
        let mut args = vec!["eval", "memo.pod", "--checkpoint", "memo", "--episodes", "12", "--envs", "3", "--json"];
        args.extend(env);
        let v = json_of(&podc(&args, None));
        let want = if env.is_empty() { "Catch" } else { "pod:envs/catch.pod" };
        assert_eq!(v["env"].as_str(), Some(want), "{v}");
        assert_eq!((v["episodes"].as_u64(), v["min_return"].as_f64()), (Some(12), Some(1.0)), "{env:?}: {v}");
    }
}

#[test]
fn play_draws_cartpole_with_gymnasiums_own_frames() {
    if tier::slow("Python env workers") {
        return;
    }
    // The balancing controller's first episode of env 0 with seed 0 (one that
    // `eval_counts_exactly..` sees last 100 steps or more), cut at 100 steps.
    let out = dir().join("pole.gif");
    let args = ["play", "pole.pod", "--checkpoint", "balance", "--greedy", "--out", out.to_str().expect("utf-8")];
    let o = podc(
        &[&args[..], &["--env", "gymnasium:CartPole-v1?max_episode_steps=100"]].concat(),
        Some(Backend::Gymnasium),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(stderr(&o).contains(": 101 frames, return 100.0000\n"), "{}", stderr(&o));
    let (w, h, fs) = frames(&out);
    assert_eq!((w, h, fs.len()), (600, 400, 101), "CartPole's own frame size; the reset state and 100 steps");
    for (t, f) in [(0, &fs[0]), (fs.len() - 1, &fs[fs.len() - 1])] {
        // The cart, a black box about 30 pixels tall, lies on the track (one black line)
        // around row 300; nothing else is dark.
        let rows = dark_rows(f, w);
        assert!(rows.len() >= 20 && rows.iter().all(|r| (250..350).contains(r)), "frame {t}: dark rows {rows:?}");
    }
    assert_ne!(fs[0], fs[fs.len() - 1], "the episode moves");
}

/// Ignored because its first run installs EnvPool (~850 MB) into the cache venv, as
/// tests/host/host.rs's EnvPool test:
/// `cargo test --test host -- --ignored host_play::eval_and_play_cartpole_through_envpool`.
#[test]
#[ignore]
fn eval_and_play_cartpole_through_envpool() {
    let v = json_of(&podc(&balanced("envpool:CartPole-v1"), Some(Backend::EnvPool)));
    assert_balanced(&v, "envpool:CartPole-v1");
    let out = dir().join("envpool.gif");
    let args = ["play", "pole.pod", "--checkpoint", "random", "--env", "envpool:CartPole-v1", "--out"];
    let o = podc(&[&args[..], &[out.to_str().expect("utf-8")]].concat(), Some(Backend::EnvPool));
    assert!(o.status.success(), "{}", stderr(&o));
    let (w, h, fs) = frames(&out);
    assert_eq!((w, h, fs.len()), (600, 400, frames_written(&o)));
    assert!(fs.len() >= 2 && dark_rows(&fs[0], w).len() >= 20);
}

/// The ALE's Pong: full-colour 210x160 screens (scaled by 2), its brown field and the
/// score; 40 steps, then the time limit ends the episode (the last frame drawn before
/// the reset).
#[test]
fn play_draws_pong_in_full_colour() {
    if tier::slow("Python env workers") {
        return;
    }
    let out = dir().join("pong.gif");
    let o =
        podc(&["play", "pong.pod", "--checkpoint", "pong", "--out", out.to_str().expect("utf-8")], Some(Backend::Ale));
    assert!(o.status.success(), "{}", stderr(&o));
    let (w, h, fs) = frames(&out);
    assert_eq!((w, h, fs.len()), (320, 420, 41), "the reset screen and 40 steps");
    assert!(stderr(&o).contains("41 frames, return"), "{}", stderr(&o));
    const FIELD: [u8; 3] = [144, 72, 17];
    for f in &fs {
        let field = f.chunks(4).filter(|px| px[..3] == FIELD).count();
        assert!(field > w * h / 2, "Pong's brown field covers most of the screen");
    }
    assert_ne!(fs[1], fs[40], "the ball moves");
}

#[test]
fn host_envs_that_cannot_draw_or_do_not_match_are_clear_errors() {
    if tier::slow("Python env workers") {
        return;
    }
    let gif = dir().join("never.gif");
    let gif = gif.to_str().expect("utf-8");
    let blind = root().join("tests/fixtures/host/blind_envs.py");
    for (id, needles) in [
        ("Blind-v0", ["`PodTest/Blind-v0` has no `rgb_array` rendering", "its render modes: []"]),
        ("Gray-v0", ["`gymnasium:PodTest/Gray-v0` cannot draw frames", "uint8 (40, 60), not uint8 (H, W, 3) RGB"]),
    ] {
        let env = format!("gymnasium:PodTest/{id}");
        let args = ["play", "pole.pod", "--checkpoint", "random", "--env", &env, "--out", gif, "--env-import"];
        let o = podc(&[&args[..], &[blind.to_str().expect("utf-8")]].concat(), Some(Backend::Gymnasium));
        assert_fails(&o, &needles);
    }
    let o = podc(
        &["eval", "pole.pod", "--checkpoint", "random", "--env", "gymnasium:Acrobot-v1"],
        Some(Backend::Gymnasium),
    );
    assert_fails(
        &o,
        &["does not match", "observation: f32[4], action: discrete(2)", "observation: f32[6], action: discrete(3)"],
    );
    let o = podc(&["eval", "pole.pod", "--checkpoint", "unnamed"], None);
    assert_fails(&o, &["env `CartPoleV1` is `extern` and the checkpoint names no host env", "`--env URI`"]);
    let o = podc(
        &["play", "pole.pod", "--checkpoint", "random", "--env", "gym:CartPole-v1", "--out", gif],
        Some(Backend::Gymnasium),
    );
    assert_fails(&o, &["unknown backend `gym`"]);
    let o = podc(&["play", "memo.pod", "--checkpoint", "memo", "--env", "pod:envs/catch.pod", "--out", gif], None);
    assert_fails(&o, &["`pod:envs/catch.pod`", "without `--env`"]);
    assert!(!Path::new(gif).exists());
}
