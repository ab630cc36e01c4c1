//! `podc train` end to end: runs are deterministic, a resumed run (also one resumed after
//! SIGKILLs at random moments) continues exactly as if it had never stopped, learners
//! stay identical across devices, bad input is an error rather than a panic, and (the
//! learning runs, slow tier) the examples learn to their documented returns.
//!
//! Most tests train `TINY`, a linear actor-critic that compiles in a few seconds; every
//! `podc` process compiles its program afresh, so the tests share runs where they can.

use crate::common;
use crate::tier;

use podracer::train::anakin::{RunShape, Trainer, agent_and_env};
use podracer::train::run::Driver;
use podracer::train::{checkpoint, metrics, runs};
use rustix::process::{Pid, Signal, kill_process};
use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tempfile::TempDir;

/// A linear actor-critic on Catch with plain SGD: small, so that it compiles fast.
const TINY: &str = r#"use std::optim::sgd;
use std::distributions::{categorical_sample, categorical_log_prob, categorical_entropy};
use std::rl::{Losses, discounted_returns, a2c_loss};
use envs::catch::Catch;

struct Params { pi: f32[50, 3], v: f32[50] }

fn logits(p: Params, obs: f32[10, 5]) -> f32[3] { reshape(obs, [50]) @ p.pi }

fn value(p: Params, obs: f32[10, 5]) -> f32 { reshape(obs, [50]) @ p.v }

fn env_losses<T>(p: Params, obs: f32[T, 10, 5], action: i32[T], ret: f32[T]) -> (f32, f32, f32, f32) {
    let l = vmap(logits, p, obs);
    let v = vmap(value, p, obs);
    let log_probs = vmap(categorical_log_prob, l, action);
    let r = a2c_loss(log_probs, vmap(categorical_entropy, l), v, ret, ret - v, 0.5, 0.01);
    (r.total, r.policy, r.value, r.entropy)
}

fn losses<T, B>(p: Params, obs: f32[B, T, 10, 5], action: i32[B, T], ret: f32[B, T]) -> Losses {
    let (total, policy, value, entropy) = vmap(env_losses, p, obs, action, ret);
    Losses { total: mean(total), policy: mean(policy), value: mean(value), entropy: mean(entropy) }
}

fn loss<T, B>(p: Params, obs: f32[B, T, 10, 5], action: i32[B, T], ret: f32[B, T]) -> f32 {
    losses(p, obs, action, ret).total
}

agent Tiny for Catch {
    fn init(key: Key) -> Params { Params { pi: normal(key, [50, 3]) * 0.01, v: zeros([50]) } }

    fn act(p: Params, obs: f32[10, 5], key: Key) -> i32 { categorical_sample(key, logits(p, obs)) }

    fn update<T, B>(p: Params, traj: Trajectory<T, B>, key: Key) -> (Params, Losses) {
        let discounts = transpose(where(traj.terminated || traj.truncated, 0.0, 0.99));
        let ret = vmap(discounted_returns, transpose(traj.reward), discounts, zeros([B]));
        let obs = transpose(traj.obs, [1, 0, 2, 3]);
        let action = transpose(traj.action);
        let g = pmean(grad(loss, p, obs, action, ret));
        (sgd(p, g, 0.1), losses(p, obs, action, ret))
    }
}
"#;

/// The run shape the CLI tests share: 32 env steps per call.
const SHAPE: [&str; 6] = ["--envs", "4", "--rollout", "4", "--updates-per-call", "2"];
const PER_CALL: u64 = 32;

/// A directory holding `tiny.pod` and the `envs/catch.pod` it imports (modules are looked
/// up beside the root file), plus `name.pod` with `src` when given.
fn agent_dir(extra: Option<(&str, &str)>) -> TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    fs::create_dir(dir.path().join("envs")).expect("mkdir");
    let catch = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/envs/catch.pod");
    fs::copy(catch, dir.path().join("envs/catch.pod")).expect("copy catch.pod");
    fs::write(dir.path().join("tiny.pod"), TINY).expect("write tiny.pod");
    if let Some((name, src)) = extra {
        fs::write(dir.path().join(name), src).expect("write the agent");
    }
    dir
}

/// The directory of `tiny.pod`, shared by the tests of this process.
fn tiny() -> &'static Path {
    static DIR: OnceLock<TempDir> = OnceLock::new();
    DIR.get_or_init(|| agent_dir(None)).path()
}

fn podc(cwd: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_podc"));
    c.args(args).current_dir(cwd);
    c
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `podc train tiny.pod` with `seed`, `calls` calls, `extra` flags, and the shared shape
/// where `extra` does not set it.
fn train_tiny(out: &Path, seed: i64, calls: u64, extra: &[&str]) -> Output {
    let (seed, total) = (seed.to_string(), (calls * PER_CALL).to_string());
    let out = out.to_str().expect("utf-8");
    let mut args = vec!["train", "tiny.pod", "-q", "--seed", &seed, "--total-steps", &total, "--out", out];
    args.extend(extra);
    for flag in SHAPE.chunks(2).filter(|f| !extra.contains(&f[0])) {
        args.extend(flag);
    }
    podc(tiny(), &args).output().expect("podc starts")
}

fn train_ok(out: &Path, seed: i64, calls: u64, extra: &[&str]) {
    let o = train_tiny(out, seed, calls, extra);
    assert!(o.status.success(), "podc train failed: {}", stderr(&o));
}

/// A failure must be exit status 1 with a message, not a panic.
fn assert_fails(o: &Output, needle: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains(needle), "expected `{needle}` in:\n{err}");
}

/// The metrics log without its timings, which vary from run to run.
fn metrics_of(dir: &Path) -> Vec<metrics::Record> {
    let mut records = metrics::read(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for r in &mut records {
        assert!(r.remove("steps_per_sec").is_some() && r.remove("wall_s").is_some(), "{r:?}");
    }
    records
}

/// Seed 0, 4 calls, uninterrupted: the reference the determinism and resume tests compare with.
fn baseline() -> &'static Path {
    static DIR: OnceLock<TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().expect("tempdir");
        train_ok(dir.path(), 0, 4, &[]);
        dir
    })
    .path()
}

#[test]
fn same_seed_same_metrics_other_seed_other_metrics() {
    let a = metrics_of(baseline());
    assert_eq!(a.iter().map(|r| r["env_steps"].as_u64().unwrap()).collect::<Vec<_>>(), [32, 64, 96, 128]);
    let keys: Vec<&str> = a[0].keys().map(String::as_str).collect();
    let expected = ["env_steps", "updates", "episode_return", "episode_length", "episodes", "loss", "policy", "value"];
    assert_eq!(keys, [&expected[..], &["entropy"]].concat());
    let dir = tempfile::tempdir().expect("tempdir");
    let (same, other) = (dir.path().join("same"), dir.path().join("other"));
    train_ok(&same, 0, 4, &[]);
    train_ok(&other, 1, 4, &[]);
    assert_eq!(metrics_of(&same), a);
    assert_ne!(metrics_of(&other), a);
}

#[test]
fn a_resumed_run_equals_an_uninterrupted_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = dir.path().join("b");
    let bs = b.to_str().expect("utf-8");
    train_ok(&b, 0, 2, &[]);
    assert_eq!(metrics_of(&b).len(), 2);
    // Resumed into another directory, which starts with the log so far.
    let elsewhere = dir.path().join("elsewhere");
    train_ok(&elsewhere, 0, 4, &["--resume", bs]);
    assert_eq!(metrics_of(&elsewhere), metrics_of(baseline()));
    train_ok(&b, 0, 4, &["--resume", bs]);
    assert_eq!(metrics_of(&b), metrics_of(baseline()));
    let (a_arrays, a_meta) = checkpoint::load(baseline()).expect("the uninterrupted run's checkpoint");
    let (b_arrays, b_meta) = checkpoint::load(&b).expect("the resumed run's checkpoint");
    assert_eq!(a_meta["calls"], 4);
    assert_eq!(b_meta, a_meta);
    assert!(a_arrays == b_arrays, "the final checkpoints' arrays differ");

    let other = dir.path().join("other");
    let o = train_tiny(&other, 0, 4, &["--resume", bs, "--envs", "8"]);
    assert_fails(&o, "its `envs` is 4, this run's is 8; resume with the same flags");
    let empty = dir.path().join("empty");
    fs::create_dir(&empty).expect("mkdir");
    let es = empty.to_str().expect("utf-8");
    let o = train_tiny(&empty, 0, 4, &["--resume", es]);
    assert_fails(&o, "no checkpoint: ");
    assert_fails(&o, "checkpoint.safetensors does not exist");
}

/// Whether two records agree: integers exactly, floats to 1e-4 relative (XLA fuses the
/// program batched over seeds its own way, which moves the last bits).
fn close_records(a: &metrics::Record, b: &metrics::Record) -> bool {
    b.iter().all(|(k, v)| match (a.get(k), v) {
        (Some(x), _) if x.is_u64() || x.is_null() => x == v,
        (Some(x), v) => x.as_f64().zip(v.as_f64()).is_some_and(|(x, y)| (x - y).abs() <= 1e-4 * y.abs().max(1e-2)),
        (None, _) => false,
    })
}

/// `--seeds 2 --seed 5` trains seeds 5 and 6 in one program: each seed's records are what
/// a solo run with that seed logs, on one device and on two; its checkpoint has a seed
/// axis, and resuming it continues the same runs.
#[test]
fn a_batch_of_seeds_learns_as_its_solo_runs_do() {
    let dir = tempfile::tempdir().expect("tempdir");
    for devices in ["1", "2"] {
        let many = dir.path().join(format!("many{devices}"));
        train_ok(&many, 5, 3, &["--seeds", "2", "--devices", devices]);
        let records = metrics_of(&many);
        assert_eq!(records.len(), 6, "one record per seed and call");
        for seed in [5, 6] {
            let solo = dir.path().join(format!("solo{seed}-{devices}"));
            train_ok(&solo, seed, 3, &["--devices", devices]);
            let mine: Vec<&metrics::Record> = records.iter().filter(|r| r["seed"] == seed).collect();
            let theirs = metrics_of(&solo);
            assert_eq!(mine.len(), theirs.len());
            for (a, b) in mine.iter().zip(&theirs) {
                assert!(close_records(a, b), "seed {seed} on {devices} device(s):\n batched {a:?}\n solo    {b:?}");
            }
        }
    }
    let many = dir.path().join("many1");
    let (arrays, meta) = checkpoint::load(&many).expect("checkpoint");
    assert_eq!(meta["config"]["seeds"], 2);
    for (name, a) in &arrays {
        // The PRNG keys are stacked per device first: [devices, seeds, 2].
        let seed_axis = usize::from(name == "rng");
        assert_eq!(a.shape[seed_axis], 2, "`{name}` has a seed axis: {:?}", a.shape);
    }
    let ms = many.to_str().expect("utf-8");
    let resumed = dir.path().join("resumed");
    train_ok(&resumed, 5, 4, &["--seeds", "2", "--resume", ms]);
    let whole = dir.path().join("whole");
    train_ok(&whole, 5, 4, &["--seeds", "2"]);
    assert_eq!(metrics_of(&resumed), metrics_of(&whole));
    let o = train_tiny(&dir.path().join("other"), 5, 4, &["--resume", ms]);
    assert_fails(&o, "its `seeds` is 2, this run's is null; resume with the same flags");
}

/// DQN's replay buffer lives in the learner's state: a batch of seeds, each with its own
/// buffer, logs what each seed's solo run logs; a run resumed from a checkpoint taken
/// mid-run (the buffer part-filled, learning under way) logs what the whole run logs,
/// so the buffer is checkpointed; and learning starts once the buffer holds
/// LEARNING_STARTS transitions. Small sizes by `--set`, so that a few calls cover it.
#[test]
fn dqn_replay_buffer_is_state_under_seeds_and_resume() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // `dqn.pod` with its decay over a const of its own, not the run's bound
    // `TOTAL_UPDATES`: the run of 60 steps is then the first half of the run of 120.
    let src = fs::read_to_string(root.join("examples/dqn.pod")).expect("read dqn.pod");
    let fixed =
        src.replace("TOTAL_UPDATES", "DECAY_UPDATES").replace("DECAY_UPDATES: i32 = 50000", "DECAY_UPDATES: i32 = 30");
    assert!(fixed.contains("const DECAY_UPDATES: i32 = 30;"), "dqn.pod's decay const moved");
    fs::create_dir(dir.path().join("envs")).expect("mkdir");
    fs::copy(root.join("examples/envs/cartpole.pod"), dir.path().join("envs/cartpole.pod")).expect("copy cartpole.pod");
    fs::write(dir.path().join("dqn.pod"), fixed).expect("write dqn.pod");
    let small = ["--set", "BUFFER=48", "--set", "BATCH=8", "--set", "LEARNING_STARTS=40", "--set", "TARGET_EVERY=24"];
    let dqn = |out: &Path, seed: &str, total: &str, extra: &[&str]| {
        let o = podc(dir.path(), &["train", "dqn.pod", "-q", "--envs", "4", "--updates-per-call", "5"])
            .args(small)
            .args(["--seed", seed, "--total-steps", total, "--out"])
            .arg(out)
            .args(extra)
            .output()
            .expect("podc runs");
        assert!(o.status.success(), "{}", stderr(&o));
        metrics_of(out)
    };
    let many = dqn(&dir.path().join("many"), "3", "120", &["--seeds", "2"]);
    for seed in [3, 4] {
        let solo = dqn(&dir.path().join(format!("solo{seed}")), &seed.to_string(), "120", &[]);
        let mine: Vec<&metrics::Record> = many.iter().filter(|r| r["seed"] == seed).collect();
        assert_eq!(mine.len(), solo.len());
        for (a, b) in mine.iter().zip(&solo) {
            assert!(close_records(a, b), "seed {seed}:\n batched {a:?}\n solo    {b:?}");
        }
    }
    // 20 env steps per call: calls 1 and 2 fill the buffer (no learning: the loss is
    // reported, the network unchanged), then it learns.
    let half = dir.path().join("half");
    dqn(&half, "3", "60", &[]);
    let resumed = dqn(&dir.path().join("resumed"), "3", "120", &["--resume", half.to_str().expect("utf-8")]);
    let whole = dqn(&dir.path().join("whole"), "3", "120", &[]);
    assert_eq!(resumed, whole);
    let q: Vec<f64> = whole.iter().map(|r| r["q"].as_f64().expect("q")).collect();
    assert!(q[3] != q[4] && q[4] != q[5], "the network learns after LEARNING_STARTS: {q:?}");
}

#[test]
fn learners_stay_identical_across_two_devices() {
    let (prog, diags) = podracer::driver::check_file(&tiny().join("tiny.pod")).expect("readable");
    assert!(diags.is_empty(), "{}", podracer::diag::render_plain(&prog.map, &diags));
    let shape = RunShape { envs: 4, rollout: 4, updates_per_call: 2, devices: 2, processes: 1, seeds: 1 };
    let (agent, env) = match agent_and_env(&prog, &[], "Tiny", shape) {
        Ok(ae) => ae,
        Err(d) => panic!("{}", podracer::diag::render_plain(&prog.map, &[*d])),
    };
    let mut t = Trainer::new(common::client(), &prog, (&agent, &env), shape, Instant::now()).expect("compiles");
    t.init(0).expect("init");
    let initial = t.learner_on(0).expect("download");
    assert_eq!(t.learner_on(1).expect("download"), initial, "init differs between devices");
    let mut episodes = 0;
    for call in 0..4 {
        let [r] = &t.step().expect("a call")[..] else { panic!("one seed, one report") };
        for (name, v) in &r.metrics {
            assert!(v.is_finite(), "call {call}: `{name}` is {v}");
        }
        assert!(r.episode_return.is_none_or(|x| (-1.0..=1.0).contains(&x)), "{:?}", r.episode_return);
        episodes += r.episodes;
        assert_eq!(t.learner_on(0).expect("download"), t.learner_on(1).expect("download"), "after call {call}");
    }
    // 4 calls x 2 updates x 4 steps = 32 steps of each env: every env ended 3 episodes of 9 steps.
    assert_eq!(episodes, 12);
    assert_ne!(t.learner_on(0).expect("download"), initial, "the learner did not change");
    let snap = t.snapshot().expect("snapshot");
    let rng = &snap.iter().find(|(n, _)| n == "rng").expect("an `rng` array").1;
    assert_eq!(rng.shape[0], 2, "one key per device");
    let part = rng.to_bytes().len() / 2;
    assert_ne!(rng.to_bytes()[..part], rng.to_bytes()[part..], "the devices share a key");
    let ball = &snap.iter().find(|(n, _)| n.ends_with("ball_x")).expect("the env's `ball_x`").1;
    assert_eq!(ball.shape, [4], "the devices' environments, joined");

    // A snapshot goes back as it came out; an array of another shape is refused by name.
    t.restore(&snap).expect("restore");
    assert_eq!(t.snapshot().expect("snapshot"), snap);
    let mut wrong = snap.clone();
    let ball = wrong.iter_mut().find(|(n, _)| n.ends_with("ball_x")).expect("the env's `ball_x`");
    ball.1 = podracer::array::Array::i32(vec![3], vec![0; 3]);
    let e = t.restore(&wrong).expect_err("a 3-env array for 4 envs");
    assert!(e.contains("ball_x") && e.contains("[3]") && e.contains("[4]"), "{e}");
}

/// Kills the child on drop, so that a failing test leaves no trainer running.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The call count of the checkpoint committed in `dir` (the JSON is renamed into place, so
/// it is always whole), or 0 if there is none yet.
fn committed_calls(dir: &Path) -> u64 {
    let Ok(text) = fs::read_to_string(dir.join(checkpoint::META_FILE)) else { return 0 };
    let v: Value = serde_json::from_str(&text).expect("checkpoint.json is whole");
    v["meta"]["calls"].as_u64().expect("a call count")
}

#[test]
fn sigkill_while_checkpointing_every_call_never_loses_the_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    let os = out.to_str().expect("utf-8");
    let mut calls = 0;
    // Calls take about a millisecond and each is followed by a save: the kills land in
    // saves, in metric writes and between them.
    for (i, delay_us) in [0, 1_000, 5_000, 15_000].into_iter().enumerate() {
        let resume = if i == 0 { vec![] } else { vec!["--resume", os] };
        let mut args = vec!["train", "tiny.pod", "-q", "--total-steps", "100000000", "--checkpoint-every", "1"];
        args.extend(SHAPE);
        args.extend(["--out", os]);
        args.extend(resume);
        let child = podc(tiny(), &args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("podc starts");
        let mut child = Killed(child);
        let start = Instant::now();
        while committed_calls(&out) <= calls {
            if let Some(status) = child.0.try_wait().expect("wait") {
                let mut err = String::new();
                std::io::Read::read_to_string(child.0.stderr.as_mut().expect("piped"), &mut err).expect("read");
                panic!("run {i} exited with {status} before saving: {err}");
            }
            assert!(start.elapsed() < Duration::from_secs(300), "run {i} saved nothing in 300 s");
            std::thread::sleep(Duration::from_micros(200));
        }
        std::thread::sleep(Duration::from_micros(delay_us));
        drop(child);
        let (_, meta) = checkpoint::load(&out).unwrap_or_else(|e| panic!("after kill {i}: {e}"));
        let now = meta["calls"].as_u64().expect("a call count");
        assert!(now > calls, "after kill {i}: the checkpoint went from {calls} to {now} calls");
        assert_eq!(meta["env_steps"], now * PER_CALL);
        calls = now;
    }
    // Finish a few calls past the last checkpoint: the log then has each call exactly once,
    // and the run is the uninterrupted one.
    train_ok(&out, 0, calls + 3, &["--resume", os]);
    let records = metrics_of(&out);
    let steps: Vec<u64> = records.iter().map(|r| r["env_steps"].as_u64().expect("env_steps")).collect();
    assert_eq!(steps, (1..=calls + 3).map(|c| c * PER_CALL).collect::<Vec<_>>());
    assert_eq!(records[..4], metrics_of(baseline())[..]);
    assert!(checkpoint::load(&out).is_ok());
}

/// The names of the run directories under `dir/runs`, oldest first, and what
/// `runs/latest` points at.
fn runs_in(dir: &Path) -> (Vec<String>, String) {
    let runs = dir.join(runs::ROOT);
    let mut names: Vec<String> = fs::read_dir(&runs)
        .expect("runs/")
        .map(|e| e.expect("an entry").file_name().into_string().expect("utf-8"))
        .filter(|n| n != runs::LATEST)
        .collect();
    names.sort_by_key(|n| fs::metadata(runs.join(n)).and_then(|m| m.modified()).expect("mtime"));
    let latest = fs::read_link(runs.join(runs::LATEST)).expect("runs/latest is a link");
    (names, latest.to_str().expect("utf-8").to_string())
}

#[test]
fn each_run_gets_a_directory_of_its_own_and_a_run_is_never_overwritten() {
    let dir = agent_dir(None);
    let total = (2 * PER_CALL).to_string();
    let mut args = vec!["train", "tiny.pod", "-q", "--total-steps", &total];
    args.extend(SHAPE);
    for _ in 0..2 {
        let o = podc(dir.path(), &args).output().expect("podc starts");
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let (names, latest) = runs_in(dir.path());
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.iter().all(|n| n.starts_with("Tiny__Catch__0__")), "{names:?}");
    assert_eq!(latest, names[1], "runs/latest names the newest");
    for name in &names {
        assert_eq!(metrics_of(&dir.path().join("runs").join(name)).len(), 2);
    }
    // An `--out` that holds a run is refused, naming the ways on; `--force` writes over it.
    let out = ["--out", "runs/latest"];
    let o = podc(dir.path(), &[&args[..], &out].concat()).output().expect("podc starts");
    assert_fails(
        &o,
        "`--out runs/latest` holds a run already: continue it with `--resume runs/latest`, write over it with `--force`",
    );
    let o = podc(dir.path(), &[&args[..], &out, &["--force"]].concat()).output().expect("podc starts");
    assert!(o.status.success(), "{}", stderr(&o));
    // Resumed without `--out`, a run continues in its own directory.
    let more = (3 * PER_CALL).to_string();
    let resumed = [&args[..2], &["-q", "--total-steps", &more, "--resume", "runs/latest"], &SHAPE].concat();
    let o = podc(dir.path(), &resumed).output().expect("podc starts");
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(metrics_of(&dir.path().join("runs/latest")).len(), 3);
    assert_eq!(runs_in(dir.path()).0.len(), 2, "no new directory");
}

/// SIGINT and SIGTERM mid-run: the run stops within 10 s with the signal's exit status,
/// checkpointed, with its curve, saying how to resume; resumed, it ends as the
/// uninterrupted run does, metrics and checkpoint bit for bit.
#[test]
fn a_signal_stops_a_run_checkpointed_and_the_resumed_run_equals_the_uninterrupted_one() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (signal, status) in [(Signal::INT, 130), (Signal::TERM, 143)] {
        let out = dir.path().join(format!("run{status}"));
        let os = out.to_str().expect("utf-8");
        let mut args = vec!["train", "tiny.pod", "-q", "--total-steps", "100000000", "--out", os];
        args.extend(SHAPE);
        let child = podc(tiny(), &args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("podc starts");
        let mut child = Killed(child);
        let start = Instant::now();
        while metrics::read(&out).map_or(0, |r| r.len()) < 3 {
            assert!(child.0.try_wait().expect("wait").is_none(), "the run ended before the signal");
            assert!(start.elapsed() < Duration::from_secs(300), "no reports in 300 s");
            std::thread::sleep(Duration::from_millis(10));
        }
        kill_process(Pid::from_child(&child.0), signal).expect("signal sent");
        let sent = Instant::now();
        let code = loop {
            if let Some(s) = child.0.try_wait().expect("wait") {
                break s.code();
            }
            assert!(sent.elapsed() < Duration::from_secs(10), "still running 10 s after {signal:?}");
            std::thread::sleep(Duration::from_millis(10));
        };
        assert_eq!(code, Some(status));
        let mut err = String::new();
        std::io::Read::read_to_string(child.0.stderr.as_mut().expect("piped"), &mut err).expect("read");
        assert!(err.contains(&format!("--resume {os}")), "{err}");
        assert!(out.join("curve.png").exists());
        let calls = committed_calls(&out);
        assert_eq!(metrics_of(&out).len() as u64, calls, "the log ends at the checkpoint");
        // Resumed to a few calls past the checkpoint, it is the uninterrupted run.
        train_ok(&out, 0, calls + 2, &["--resume", os]);
        let whole = dir.path().join(format!("whole{status}"));
        train_ok(&whole, 0, calls + 2, &[]);
        assert_eq!(metrics_of(&out), metrics_of(&whole));
        let tensors = |d: &Path| fs::read(d.join(checkpoint::TENSORS_FILE)).expect("a checkpoint");
        assert!(tensors(&out) == tensors(&whole), "the checkpoints differ");
    }
}

#[test]
fn without_a_terminal_progress_comes_as_plain_lines() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("run");
    // A run long enough that its first line (after 2 s and 1% of the run) comes before
    // its end on any machine; it is stopped once the line is read.
    let mut args = vec!["train", "tiny.pod", "--total-steps", "3200000", "--out", out.to_str().expect("utf-8")];
    args.extend(SHAPE);
    let child = podc(tiny(), &args).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().expect("podc starts");
    let mut child = Killed(child);
    let err = std::io::BufReader::new(child.0.stderr.take().expect("piped"));
    let line = std::io::BufRead::lines(err)
        .map(|l| l.expect("utf-8"))
        .find(|l| l.starts_with("env steps "))
        .expect("a progress line before the run ends");
    assert!(line.contains("/3200000 (") && line.contains("/s  return ") && line.contains("  eta "), "{line}");
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let env_only = podc(tiny(), &["train", "envs/catch.pod", "-q"]).output().expect("podc starts");
    assert_fails(&env_only, "error: `envs/catch.pod`: the file declares no `agent`");

    let bad = TINY.replace("categorical_sample(key, logits(p, obs))", "logits(p, obs)");
    let dir = agent_dir(Some(("bad.pod", &bad)));
    let o = podc(dir.path(), &["train", "bad.pod", "-q"]).output().expect("podc starts");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    insta::assert_snapshot!("agent_type_error", stderr(&o));

    let o = train_tiny(&dir.path().join("out"), 0, 1, &["--envs", "3", "--devices", "2"]);
    assert_fails(&o, "`--envs 3` must be a positive multiple of `--devices 2`");
}

/// The mean return, weighted by episodes, of the records that cover the last 5% of the
/// env steps.
fn final_return(records: &[metrics::Record]) -> f64 {
    let last = records.last().and_then(|r| r["env_steps"].as_u64()).expect("a record") as f64;
    let (mut sum, mut episodes) = (0.0, 0.0);
    for r in records.iter().filter(|r| r["env_steps"].as_u64().unwrap() as f64 > 0.95 * last) {
        if let Some(ret) = r["episode_return"].as_f64() {
            let n = r["episodes"].as_f64().expect("episodes");
            sum += ret * n;
            episodes += n;
        }
    }
    assert!(episodes > 0.0, "no episode ended in the last 5% of the run");
    sum / episodes
}

/// The continuous-action example (`examples/pendulum_ppo.pod`: a Gaussian policy, `box`
/// actions, a behaviour record) compiles and runs a couple of updates; its learning run
/// (5M steps) is recorded in docs/training.md, too long for CI.
#[test]
fn pendulum_ppo_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("pendulum");
    let o = podc(Path::new(env!("CARGO_MANIFEST_DIR")), &["train", "examples/pendulum_ppo.pod", "--envs", "8"])
        .args(["--updates-per-call", "1", "--total-steps", "2048", "-q", "--out"])
        .arg(&out)
        .output()
        .expect("podc runs");
    assert!(o.status.success(), "{}", stderr(&o));
    let records = metrics_of(&out);
    assert_eq!(records.last().expect("a record")["env_steps"], 2048);
    assert!(records.iter().all(|r| r["loss"].as_f64().is_some_and(f64::is_finite)), "{records:?}");
}

/// Every example file passes `podc check` (those that need a host env, such as
/// `atari_impala.pod` on `ale:Pong`, are checked here and trained in docs/training.md).
#[test]
fn every_example_checks() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files: Vec<PathBuf> = fs::read_dir(root.join("examples"))
        .expect("examples/")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "pod"))
        .collect();
    files.sort();
    assert!(files.len() >= 10, "{files:?}");
    let o = podc(root, &["check"]).args(&files).output().expect("podc runs");
    assert!(o.status.success(), "{}", stderr(&o));
}

/// SAC (`examples/sac.pod`) compiles and learns past its random phase: the critics',
/// policy's and temperature's updates all move (small sizes by `--set`); its learning run
/// is in docs/training.md's seeds table.
#[test]
fn sac_runs_and_updates_every_part() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("sac");
    let o = podc(Path::new(env!("CARGO_MANIFEST_DIR")), &["train", "examples/sac.pod", "--envs", "2"])
        .args(["--set", "HIDDEN=8", "--set", "BUFFER=64", "--set", "BATCH=16", "--set", "LEARNING_STARTS=20"])
        .args(["--updates-per-call", "10", "--total-steps", "100", "-q", "--out"])
        .arg(&out)
        .output()
        .expect("podc runs");
    assert!(o.status.success(), "{}", stderr(&o));
    let records = metrics_of(&out);
    assert_eq!(records.len(), 5);
    let series = |k: &str| records.iter().map(|r| r[k].as_f64().expect(k)).collect::<Vec<f64>>();
    let (alpha, q) = (series("alpha"), series("q"));
    assert_eq!(alpha[0], 1.0, "no update before LEARNING_STARTS: {alpha:?}");
    assert!(alpha[4] < alpha[2] && q[4] != q[3], "alpha and the critics learn: {alpha:?} {q:?}");
    assert!(
        records.iter().all(|r| ["loss", "actor", "entropy"].iter().all(|k| r[*k].as_f64().is_some_and(f64::is_finite)))
    );
}

/// The convolutional example (`examples/breakout_minatar_ppo.pod`) compiles and runs an
/// update; its learning run (5M steps) is recorded in docs/training.md.
#[test]
fn breakout_minatar_ppo_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("breakout");
    let o = podc(Path::new(env!("CARGO_MANIFEST_DIR")), &["train", "examples/breakout_minatar_ppo.pod", "--envs", "8"])
        .args(["--updates-per-call", "1", "--total-steps", "1024", "-q", "--out"])
        .arg(&out)
        .output()
        .expect("podc runs");
    assert!(o.status.success(), "{}", stderr(&o));
    let records = metrics_of(&out);
    assert_eq!(records.last().expect("a record")["env_steps"], 1024);
    assert!(records.iter().all(|r| r["loss"].as_f64().is_some_and(f64::is_finite)), "{records:?}");
}

/// `podc train ARGS --out DIR`; the run's records. The learning runs (the `*_in_release`
/// tests, named for the release build they once made with a nested `cargo run --release`)
/// use the `podc` that `cargo test` builds: it trains about 1.3 times slower than a
/// release build (the device program is the same; the host's share is small), which costs
/// less than building podc a second time.
fn release_train(out: &Path, args: &[&str]) -> Vec<metrics::Record> {
    let o = Command::new(env!("CARGO_BIN_EXE_podc"))
        .arg("train")
        .args(args)
        .args(["-q", "--out"])
        .arg(out)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("podc starts");
    assert!(o.status.success(), "the learning run failed: {}", stderr(&o));
    metrics::read(out).expect("metrics.jsonl")
}

/// The last records of a run, for a failure message.
fn curve_tail(records: &[metrics::Record]) -> String {
    let tail: Vec<String> = records[records.len().saturating_sub(10)..]
        .iter()
        .map(|r| format!("{:>7} steps: return {} over {} episodes", r["env_steps"], r["episode_return"], r["episodes"]))
        .collect();
    tail.join("\n")
}

/// The example agent, trained as its header says.
#[test]
fn catch_a2c_learns_catch_in_release() {
    if tier::slow("a learning run") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out: PathBuf = dir.path().join("catch");
    let records = release_train(&out, &["examples/catch_a2c.pod", "--total-steps", "500000", "--seed", "0"]);
    let ret = final_return(&records);
    assert!(
        ret >= 0.9,
        "A2C did not learn Catch: final mean return {ret:.3}; the curve ends\n{}",
        curve_tail(&records)
    );
    let png = fs::read(out.join("curve.png")).expect("curve.png");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "curve.png is not a PNG");
}

/// DQN learns CartPole with the command in its header (about 20 s): the replay buffer,
/// epsilon schedule, target network and learning-rate decay together.
#[test]
fn dqn_learns_cartpole_in_release() {
    if tier::slow("a learning run") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let args =
        ["examples/dqn.pod", "--envs", "10", "--updates-per-call", "500", "--total-steps", "500000", "--seed", "0"];
    let records = release_train(&dir.path().join("dqn"), &args);
    let ret = final_return(&records);
    assert!(
        ret >= 475.0,
        "DQN did not learn CartPole: final mean return {ret:.1}; the curve ends\n{}",
        curve_tail(&records)
    );
}

/// MemoryChain asks at the end of an episode for a bit shown at its start: the recurrent
/// PPO agent learns to answer (the optimal return is 1), the same network with its
/// memory wiped every step stays at chance (0).
#[test]
fn recurrent_ppo_remembers_and_feed_forward_ppo_cannot_in_release() {
    if tier::slow("a learning run") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    for (agent, ok) in [("RecurrentPPO", 0.9..=1.0), ("FeedForwardPPO", -0.2..=0.2)] {
        let args = ["examples/memory_ppo.pod", "--agent", agent, "--total-steps", "200000", "--seed", "0"];
        let records = release_train(&dir.path().join(agent), &args);
        let ret = final_return(&records);
        assert!(ok.contains(&ret), "{agent}: final mean return {ret:.3}; the curve ends\n{}", curve_tail(&records));
    }
}

/// Issue 11's multi-seed run: every seed of the CartPole A2C example balances the pole
/// at the end, not only their mean.
#[test]
fn every_seed_of_cartpole_a2c_learns_in_release() {
    if tier::slow("a learning run") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("a2c4");
    let records = release_train(&out, &["examples/cartpole_a2c.pod", "--seeds", "4", "--total-steps", "2000000"]);
    for seed in 0..4 {
        let own: Vec<metrics::Record> = records.iter().filter(|r| r["seed"] == seed).cloned().collect();
        let ret = final_return(&own);
        assert!(ret >= 475.0, "seed {seed}: final mean return {ret:.1}; the curve ends\n{}", curve_tail(&own));
    }
}
