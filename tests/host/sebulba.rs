//! The Sebulba driver end to end (`podc train --env URI`): runs on the `pod:` backend are
//! deterministic, a SIGKILLed env worker mid-run is restarted and counted, a host env that
//! does not match the agent's is a clear error, and a short run learns.

use crate::tier;

use podracer::host::Backend;
use podracer::train::run::{Driver, Next, Reported};
use podracer::train::sebulba::{Config, Sebulba};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn podc(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_podc"));
    c.args(args).current_dir(root());
    c
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// The cache venv (made by podc's own code), named explicitly so that the caller's
/// `PODC_PYTHON` or `VIRTUAL_ENV` cannot change what is tested.
fn cache_python() -> PathBuf {
    cache_python_for(Backend::Gymnasium)
}

fn cache_python_for(backend: Backend) -> PathBuf {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let cache = podracer::runtime::plugin::cache_dir().unwrap();
    podracer::host::python::cache_venv(&cache, backend).unwrap_or_else(|e| panic!("{e}"))
}

fn records(dir: &Path) -> Vec<Value> {
    podracer::train::metrics::read(dir).unwrap().into_iter().map(Value::Object).collect()
}

/// A record without what depends on timing.
fn untimed(r: &Value) -> Value {
    let mut r = r.clone();
    for k in ["steps_per_sec", "wall_s", "actor_idle", "actor_acting", "actor_stepping", "learner_idle"] {
        r.as_object_mut().unwrap().remove(k);
    }
    r
}

/// A2C on Catch through the `pod:` backend (`--arch sebulba`): small and quick.
fn train_catch(out: &Path, extra: &[&str]) -> Output {
    let out = out.to_str().unwrap();
    let mut args = vec!["train", "examples/catch_a2c.pod", "--arch", "sebulba", "-q", "--out", out];
    args.extend(extra);
    for flag in [["--envs", "8"], ["--rollout", "8"], ["--updates-per-call", "4"]] {
        if !extra.contains(&flag[0]) {
            args.extend(flag);
        }
    }
    podc(&args).output().unwrap()
}

#[test]
fn pod_runs_are_deterministic() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    for d in [&a, &b] {
        let o = train_catch(d, &["--total-steps", "2048", "--seed", "3"]);
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let (ra, rb) = (records(&a), records(&b));
    assert_eq!(ra.len(), 8);
    assert_eq!(ra.iter().map(untimed).collect::<Vec<_>>(), rb.iter().map(untimed).collect::<Vec<_>>());
    // Exactly one version behind, after the first rollout of each thread.
    assert_eq!(ra.last().unwrap()["policy_lag"], 1.0);
    for key in ["policy_lag", "actor_idle", "learner_idle", "worker_restarts", "loss", "episode_return"] {
        assert!(ra[0].get(key).is_some(), "no `{key}` in {}", ra[0]);
    }
    // Each actor thread's time, as fractions of a report's wall time: every report acts
    // and steps, and the parts cannot add up to much more than the whole (a rollout that
    // straddles two reports counts in the later one).
    for r in &ra {
        let share = |k: &str| r[k].as_f64().unwrap_or_else(|| panic!("no `{k}` in {r}"));
        let (acting, stepping, idle) = (share("actor_acting"), share("actor_stepping"), share("actor_idle"));
        assert!(acting > 0.0 && stepping > 0.0 && idle >= 0.0, "{r}");
        assert!(acting + stepping + idle < 1.5, "{r}");
    }
    // A different seed is a different run.
    let c = dir.path().join("c");
    let o = train_catch(&c, &["--total-steps", "2048", "--seed", "4"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_ne!(records(&c).iter().map(untimed).collect::<Vec<_>>(), ra.iter().map(untimed).collect::<Vec<_>>());
}

/// A run without `--out` is named after the host env it trains on, not the agent's
/// generic `extern env`.
#[test]
fn a_runs_directory_names_the_host_env() {
    if tier::slow("Python env workers") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ppo = root().join("examples/ppo.pod");
    let args = ["train", ppo.to_str().unwrap(), "--env", "gymnasium:CartPole-v1", "-q", "--total-steps", "4096"];
    let o = Command::new(env!("CARGO_BIN_EXE_podc"))
        .args(args)
        .args(["--updates-per-call", "1", "--python"])
        .arg(cache_python())
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let names: Vec<String> = std::fs::read_dir(dir.path().join("runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n != "latest")
        .collect();
    let [name] = &names[..] else { panic!("{names:?}") };
    assert!(name.starts_with("PPO__CartPole-v1__0__"), "{name}");
}

#[test]
fn resume_continues_from_the_learner_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let o = train_catch(&out, &["--total-steps", "1024", "--checkpoint-every", "1"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = train_catch(&out, &["--total-steps", "2048", "--resume", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r = records(&out);
    let steps: Vec<u64> = r.iter().map(|r| r["env_steps"].as_u64().unwrap()).collect();
    assert_eq!(steps, (1..=8).map(|i| i * 256).collect::<Vec<_>>());
    // Other flags than the checkpoint's are refused before anything runs.
    let o = train_catch(&out, &["--total-steps", "4096", "--resume", out.to_str().unwrap(), "--seed", "9"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("cannot resume") && !stderr(&o).contains("panicked"), "{}", stderr(&o));
}

/// SIGTERM (Slurm's warning) mid-run: the actors and the learner stop within 10 s, with a
/// checkpoint to resume from. (A resumed Sebulba run restarts its host envs, so it is not
/// the uninterrupted run; Anakin's is, see `tests/runtime/train.rs`.)
#[test]
fn sigterm_stops_a_sebulba_run_checkpointed() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("run");
    let os = out.to_str().unwrap();
    let args =
        ["train", "examples/catch_a2c.pod", "--arch", "sebulba", "-q", "--out", os, "--total-steps", "100000000"];
    let args = [&args[..], &["--envs", "8", "--rollout", "8", "--updates-per-call", "4"]].concat();
    let mut child = Command::new(env!("CARGO_BIN_EXE_podc"))
        .args(&args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while podracer::train::metrics::read(&out).map_or(0, |r| r.len()) < 2 {
        assert!(child.try_wait().unwrap().is_none(), "the run ended before the signal");
        assert!(start.elapsed() < Duration::from_secs(300), "no reports in 300 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    rustix::process::kill_process(rustix::process::Pid::from_child(&child), rustix::process::Signal::TERM).unwrap();
    let sent = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if sent.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("still running 10 s after SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_eq!(status.code(), Some(143));
    let (_, meta) = podracer::train::checkpoint::load(&out).unwrap();
    let updates = meta["updates"].as_u64().unwrap();
    assert_eq!(records(&out).len() as u64, updates / 4, "the log ends at the checkpoint");
    let more = ((updates + 8) * 64).to_string();
    let o = train_catch(&out, &["--total-steps", &more, "--resume", os]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(records(&out).len() as u64, updates / 4 + 2);
}

#[test]
fn a_short_run_learns_catch() {
    let dir = tempfile::tempdir().unwrap();
    // 640 updates of 8 envs x 8 steps: Anakin's A2C settings, but more updates per step.
    let o = train_catch(dir.path(), &["--updates-per-call", "20", "--total-steps", "40960"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r = records(dir.path());
    let ret = |r: &Value| r["episode_return"].as_f64().unwrap_or(-1.0);
    let (first, last) = (ret(&r[0]), ret(r.last().unwrap()));
    // A random policy catches about one ball in five (mean return about -0.6).
    assert!(first < 0.0 && last > 0.5, "mean return went from {first} to {last}");
}

#[test]
fn a_host_env_that_does_not_match_is_an_error() {
    if tier::slow("Python env workers") {
        return;
    }
    let py = cache_python();
    let o = podc(&["train", "examples/catch_a2c.pod", "--env", "gymnasium:CartPole-v1", "-q", "--python"])
        .arg(&py)
        .args(["--out", tempfile::tempdir().unwrap().path().to_str().unwrap()])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    for needle in
        ["does not match", "observation: f32[10, 5], action: discrete(3)", "observation: f32[4], action: discrete(2)"]
    {
        assert!(err.contains(needle), "no `{needle}` in: {err}");
    }
}

/// The children of a process (its threads' children), from `/proc`.
fn children(pid: u32) -> Vec<u32> {
    let mut out = vec![];
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten() {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        out.extend(text.split_whitespace().filter_map(|p| p.parse::<u32>().ok()));
    }
    out
}

#[test]
fn a_sigkilled_worker_is_restarted_and_counted() {
    if tier::slow("Python env workers") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let py = cache_python();
    let mut child = podc(&["train", "examples/cartpole_a2c.pod", "--env", "gymnasium:CartPole-v1", "-q"])
        .args(["--envs", "8", "--rollout", "16", "--updates-per-call", "5", "--total-steps", "60000", "--python"])
        .arg(&py)
        .args(["--out", dir.path().to_str().unwrap()])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the first report: the workers are up and stepping.
    let deadline = Instant::now() + Duration::from_secs(120);
    while podracer::train::metrics::read(dir.path()).map_or(true, |r| r.is_empty()) {
        assert!(Instant::now() < deadline, "no report within 120 s");
        assert!(child.try_wait().unwrap().is_none(), "podc ended before its first report");
        std::thread::sleep(Duration::from_millis(20));
    }
    let workers = children(child.id());
    assert!(!workers.is_empty(), "no env worker found");
    let killed = Command::new("kill").args(["-KILL", &workers[0].to_string()]).status().unwrap();
    assert!(killed.success());
    let o = child.wait_with_output().unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    let r = records(dir.path());
    assert_eq!(r.last().unwrap()["env_steps"], 60_160);
    assert!(r.last().unwrap()["worker_restarts"].as_u64().unwrap() >= 1, "{}", r.last().unwrap());
}

/// An agent whose `act` returns a behaviour record trains under both drivers.
#[test]
fn impala_with_behaviour_runs_under_both_drivers() {
    let dir = tempfile::tempdir().unwrap();
    for arch in ["anakin", "sebulba"] {
        let out = dir.path().join(arch);
        let o = podc(&["train", "examples/cartpole_impala.pod", "--arch", arch, "-q", "--envs", "8"])
            .args(["--updates-per-call", "2", "--total-steps", "2048", "--out", out.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(o.status.success(), "{arch}: {}", stderr(&o));
        assert_eq!(records(&out).last().unwrap()["env_steps"], 2048, "{arch}");
    }
}

/// Continuous actions through Sebulba: the Pendulum PPO agent, written for an `extern env`
/// with a `box` action space, trains on host envs: the `.pod` env through `pod:` (no
/// Python) and Gymnasium's Pendulum-v1 through a worker.
#[test]
fn box_actions_train_on_host_envs() {
    if tier::slow("Python env workers") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let src = std::fs::read_to_string(root().join("examples/pendulum_ppo.pod")).unwrap();
    let decl = "extern env Pendulum { observation: f32[3], action: box(1, -2.0, 2.0), time_limit: 200 }";
    let agent = dir.path().join("pendulum_ppo.pod");
    std::fs::write(&agent, src.replace("use envs::pendulum::Pendulum;", decl)).unwrap();
    let python = cache_python();
    for (name, uri) in [("pod", "pod:examples/envs/pendulum.pod"), ("gym", "gymnasium:Pendulum-v1")] {
        let out = dir.path().join(name);
        let o = podc(&["train", agent.to_str().unwrap(), "--env", uri, "-q", "--envs", "8", "--updates-per-call", "1"])
            .args(["--total-steps", "2048", "--out", out.to_str().unwrap(), "--python", python.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(o.status.success(), "{uri}: {}", stderr(&o));
        let r = records(&out);
        assert_eq!(r.last().unwrap()["env_steps"], 2048, "{uri}");
        assert!(r.iter().all(|x| x["loss"].as_f64().is_some_and(f64::is_finite)), "{uri}: {r:?}");
    }
}

/// A learner error while an env worker hangs in a step ends the run at once: the actor
/// waiting on the worker gives up when the run stops, not at the step deadline (a minute
/// here) or after the restarts that follow it.
#[test]
fn a_learner_error_ends_the_run_while_a_worker_hangs() {
    if tier::slow("Python env workers") {
        return;
    }
    const SRC: &str = "use std::distributions::categorical_sample;
extern env CartPole { observation: f32[4], action: discrete(2), time_limit: 500 }
struct M { total: f32 }
agent Still for CartPole {
    fn init(key: Key) -> f32[4] { zeros([4]) }
    fn act(w: f32[4], obs: f32[4], key: Key) -> i32 { categorical_sample(key, [0.0, sum(w * obs)]) }
    fn update<T, B>(w: f32[4], traj: Trajectory<T, B>, key: Key) -> (f32[4], M) { (w, M { total: mean(traj.reward) }) }
}
";
    let (prog, diags) = podracer::driver::check_source("still.pod", SRC, None);
    assert!(diags.is_empty(), "{}", podracer::diag::render_plain(&prog.map, &diags));
    let (envs, rollout) = (2, 4);
    let agent =
        podracer::elab::agent::build_agent(&prog, &[], "Still", envs, rollout).unwrap_or_else(|d| panic!("{d:?}"));
    let client = podracer::runtime::Runtime::open(None, None).unwrap();
    let mut host = podracer::host::Options::new(1);
    host.python = Some(cache_python());
    host.env_import = vec!["tests/fixtures/host/faulty_envs.py".into()];
    host.step_timeout = Duration::from_secs(60);
    let cfg = Config {
        // Each env's 5th step, the first of the second rollout, never answers.
        uri: "gymnasium:PodTest/Faulty-v0?fail_at=5&how=hang".into(),
        envs,
        rollout,
        updates_per_report: 1,
        actor_threads: 1,
        actor_devices: vec![0],
        learner_devices: vec![0],
        max_policy_lag: None,
        double_buffer: false,
        host,
        processes: 1,
        rank: 0,
    };
    let mut t = Sebulba::new(&client, &prog, &agent, cfg, Instant::now()).unwrap();
    t.init(0).unwrap();
    let mut failed_at = None;
    let mut on_report = |_: &Sebulba, _: Reported| -> Result<Next, String> {
        // Time for the actor to send the step that hangs.
        std::thread::sleep(Duration::from_millis(500));
        failed_at = Some(Instant::now());
        Err("the checkpoint could not be written".into())
    };
    let result = t.run(0, 0, 10, &mut on_report);
    assert_eq!(result, Err("the checkpoint could not be written".to_string()));
    let took = failed_at.expect("one report").elapsed();
    assert!(took < Duration::from_secs(10), "the run ended {took:?} after the error");
}

/// The actor program takes the policy's leaves only: for PPO, the actor MLP's, not the
/// critic's or the optimiser state's.
#[test]
fn the_actor_reads_only_the_policy() {
    let (prog, diags) = podracer::driver::check_file(&root().join("examples/cartpole_ppo.pod")).unwrap();
    assert!(diags.is_empty());
    let agent =
        podracer::elab::agent::build_agent(&prog, &[], "PPO", 32, 128).unwrap_or_else(|d| panic!("{}", d.message));
    let p = podracer::programs::sebulba::sebulba_programs(&prog, &agent, 16);
    let names = podracer::programs::leaf_names(&agent.info.learner, "learner");
    let read: Vec<&str> = p.policy.iter().map(|&i| names[i].as_str()).collect();
    assert!(!read.is_empty() && read.iter().all(|n| n.starts_with("learner.params.actor.")), "{read:?}");
    let actor = names.iter().filter(|n| n.starts_with("learner.params.actor.")).count();
    assert_eq!(read.len(), actor, "{read:?}");
    // The program's parameters: the key, those leaves, the observations.
    assert_eq!(p.act.graph.params.len(), 1 + actor + 1);
}

/// With `--max-policy-lag N` actors run ahead on the newest policy; the lag stays within N.
#[test]
fn max_policy_lag_bounds_the_lag() {
    let dir = tempfile::tempdir().unwrap();
    let o = train_catch(dir.path(), &["--total-steps", "2048", "--max-policy-lag", "2", "--single-buffer"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r = records(dir.path());
    assert_eq!(r.last().unwrap()["env_steps"], 2048);
    for rec in &r {
        let lag = rec["policy_lag"].as_f64().unwrap();
        assert!((0.0..=2.0).contains(&lag), "{rec}");
    }
}

/// A recurrent agent's carry (tests/agents/recall.pod replays it in `update` and reports
/// any mismatch) is kept per environment, reset where episodes end and recorded at the
/// rollout's start by both drivers, the Sebulba actors' double-buffered halves included.
#[test]
fn a_recurrent_agents_carry_is_kept_by_both_drivers() {
    let dir = tempfile::tempdir().unwrap();
    let sebulba = ["--env", "pod:tests/agents/recall.pod", "--double-buffer"];
    for (arch, extra) in [("anakin", &[][..]), ("sebulba", &sebulba[..])] {
        let out = dir.path().join(arch);
        let o = podc(&["train", "tests/agents/recall.pod", "--arch", arch, "-q", "--envs", "4", "--rollout", "7"])
            .args(["--updates-per-call", "2", "--total-steps", "280", "--out", out.to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{arch}: {}", stderr(&o));
        let r = records(&out);
        assert_eq!(r.last().unwrap()["env_steps"], 280, "{arch}");
        assert!(r.iter().map(|x| x["episodes"].as_f64().unwrap()).sum::<f64>() >= 40.0, "{arch}: episodes end");
        for rec in &r {
            assert_eq!(
                (rec["carry_mismatch"].as_f64(), rec["action_mismatch"].as_f64()),
                (Some(0.0), Some(0.0)),
                "{arch}: {rec}"
            );
        }
    }
}

/// On CPU actor devices the actor threads step their envs as one batch unless told
/// otherwise (the run's config records it).
#[test]
fn cpu_actors_step_one_batch_by_default() {
    let dir = tempfile::tempdir().unwrap();
    for (flag, single) in [(None, true), (Some("--double-buffer"), false), (Some("--single-buffer"), true)] {
        let out = dir.path().join(flag.unwrap_or("default"));
        let o = train_catch(&out, &[&["--total-steps", "256"][..], flag.as_slice()].concat());
        assert!(o.status.success(), "{flag:?}: {}", stderr(&o));
        let (_, meta) = podracer::train::checkpoint::load(&out).unwrap();
        assert_eq!(meta["config"]["single_buffer"], single, "{flag:?}");
    }
}

/// `--set` reaches an env stepped on the host when its file is the run's root file: the
/// `pod:` env is loaded with the run's overrides, as the Anakin program is.
#[test]
fn overrides_reach_a_pod_env_of_the_root_file() {
    if tier::slow("Python env workers") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("still.pod");
    std::fs::write(
        &file,
        "const REWARD: f32 = 1.0;
struct S { n: i32 }
env Count {
    observation: f32[2]
    action: discrete(2)
    time_limit: 5
    fn reset(key: Key) -> S { S { n: 0 } }
    fn step(s: S, a: i32, key: Key) -> Step<S> { Step { state: S { n: s.n + 1 }, reward: REWARD, terminated: false, truncated: false } }
    fn observe(s: S) -> f32[2] { [s.n as f32, 1.0] }
}
struct M { total: f32 }
agent Still for Count {
    fn init(key: Key) -> f32[2] { [0.0, 0.0] }
    fn act(w: f32[2], obs: f32[2], key: Key) -> i32 { 0 }
    fn update<T, B>(w: f32[2], traj: Trajectory<T, B>, key: Key) -> (f32[2], M) { (w, M { total: mean(traj.reward) }) }
}
",
    )
    .unwrap();
    let uri = format!("pod:{}", file.display());
    for (arch, extra) in [("anakin", vec![]), ("sebulba", vec!["--arch", "sebulba"]), ("uri", vec!["--env", &uri])] {
        let out = dir.path().join(arch);
        let o = podc(&["train", file.to_str().unwrap(), "-q", "--envs", "4", "--rollout", "10", "--set", "REWARD=3.0"])
            .args(["--updates-per-call", "1", "--total-steps", "80", "--out", out.to_str().unwrap()])
            .args(&extra)
            .output()
            .unwrap();
        assert!(o.status.success(), "{arch}: {}", stderr(&o));
        for r in records(&out) {
            assert_eq!(r["episode_return"], 15.0, "{arch}: five steps of the overridden reward: {r}");
        }
    }
}

/// Atari through Sebulba end to end: a tiny pixel agent (`tests/agents/atari_pixels.pod`,
/// `u8[4, 84, 84]` frames as `f32` in a linear A2C) on `ale:Pong`, a few hundred steps;
/// the run is the same with the envs split over one worker or two.
#[test]
fn a_pixel_agent_trains_on_ale_pong() {
    if tier::slow("Python env workers") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let python = cache_python_for(Backend::Ale);
    let run = |workers: &str| {
        let out = dir.path().join(workers);
        let o = podc(&["train", "tests/agents/atari_pixels.pod", "--env", "ale:Pong", "-q", "--envs", "8"])
            .args(["--rollout", "16", "--updates-per-call", "1", "--total-steps", "384", "--seed", "1"])
            .args(["--env-workers", workers, "--out", out.to_str().unwrap(), "--python", python.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(o.status.success(), "--env-workers {workers}: {}", stderr(&o));
        assert!(out.join("checkpoint.safetensors").exists());
        records(&out)
    };
    let one = run("1");
    assert_eq!(one.last().unwrap()["env_steps"], 384);
    assert!(one.iter().all(|r| r["loss"].as_f64().is_some_and(|l| l.is_finite() && l != 0.0)), "{one:?}");
    assert!(one.iter().all(|r| r["worker_restarts"] == 0), "{one:?}");
    let two = run("2");
    assert_eq!(one.iter().map(untimed).collect::<Vec<_>>(), two.iter().map(untimed).collect::<Vec<_>>());
}

/// `examples/ppo.pod` and `examples/ppo_continuous.pod`, unedited, take their sizes from
/// the env they train on (`.pod` envs through `pod:`: three observation sizes, both kinds
/// of action, each with a time limit the agent's env does not declare), and the run's
/// config records them, so that `--resume` keeps them. An env
/// of another kind is refused before anything compiles, naming both; a shape the agent
/// hard-codes is checked with the env's sizes, the diagnostic naming where they came from.
#[test]
fn agents_take_their_sizes_from_the_env_they_train_on() {
    let dir = tempfile::tempdir().unwrap();
    let train = |agent: &str, env: &str, out: &Path, extra: &[&str]| {
        let uri = format!("pod:examples/envs/{env}.pod");
        podc(&["train", agent, "--env", &uri, "-q", "--envs", "16", "--updates-per-call", "1"])
            .args(["--out", out.to_str().unwrap()])
            .args(extra)
            .output()
            .unwrap()
    };
    for (agent, env, want) in [
        ("examples/ppo.pod", "cartpole", serde_json::json!({"OBS": 4, "ACTIONS": 2, "TOTAL_UPDATES": 2})),
        ("examples/ppo.pod", "memory_chain", serde_json::json!({"OBS": 3, "ACTIONS": 2, "TOTAL_UPDATES": 2})),
        (
            "examples/ppo_continuous.pod",
            "pendulum",
            serde_json::json!({"OBS": 3, "ACTIONS": 1, "LOW": [-2.0], "HIGH": [2.0], "TOTAL_UPDATES": 2}),
        ),
    ] {
        let out = dir.path().join(env);
        let o = train(agent, env, &out, &["--total-steps", "4096"]);
        assert!(o.status.success(), "{env}: {}", stderr(&o));
        // An `extern env` without a time limit takes the host env's without a note.
        assert!(!stderr(&o).contains("time limit"), "{env}: {}", stderr(&o));
        // Resumed, the run binds the same sizes again and agrees with its checkpoint (it
        // has trained its length: the agents anneal over it).
        let o = train(agent, env, &out, &["--resume", out.to_str().unwrap()]);
        assert!(o.status.success(), "{env} resumed: {}", stderr(&o));
        assert!(stderr(&o).contains("nothing to do"), "{env} resumed: {}", stderr(&o));
        assert_eq!(records(&out).last().unwrap()["env_steps"], 4096, "{env}");
        let meta: Value = serde_json::from_str(&std::fs::read_to_string(out.join("checkpoint.json")).unwrap()).unwrap();
        assert_eq!(meta["meta"]["config"]["overrides"], want, "{env}");
    }

    for (agent, env, message) in [
        (
            "examples/ppo.pod",
            "catch",
            "error: `pod:examples/envs/catch.pod` observes `f32[10, 5]`, but the env `Env` of agent `PPO` declares `observation: f32[OBS]`",
        ),
        (
            "examples/ppo.pod",
            "pendulum",
            "error: `pod:examples/envs/pendulum.pod` acts in `box(1, -2.0, 2.0)`, but the env `Env` of agent `PPO` declares `action: discrete(ACTIONS)`",
        ),
        (
            "examples/ppo.pod",
            "fourrooms",
            "error: `pod:examples/envs/fourrooms.pod` observes `i32[4]`, but the env `Env` of agent `PPO` declares `observation: f32[OBS]`",
        ),
        (
            "examples/ppo_continuous.pod",
            "cartpole",
            "error: `pod:examples/envs/cartpole.pod` acts in `discrete(2)`, but the env `Env` of agent `PPO` declares `action: box(ACTIONS, LOW, HIGH)`",
        ),
    ] {
        let o = train(agent, env, &dir.path().join("refused"), &[]);
        assert_eq!(o.status.code(), Some(1), "{env}: {}", stderr(&o));
        assert_eq!(stderr(&o).trim(), message, "{env}");
    }

    let src = std::fs::read_to_string(root().join("examples/ppo.pod")).unwrap();
    let agent = dir.path().join("ppo_four.pod");
    std::fs::write(&agent, src.replace("fn value(p: Params, obs: f32[OBS])", "fn value(p: Params, obs: f32[4])"))
        .unwrap();
    let o = train(agent.to_str().unwrap(), "memory_chain", &dir.path().join("four"), &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let err = stderr(&o);
    assert!(err.contains("error[E0205]") && err.contains("ppo_four.pod:"), "{err}");
    assert!(
        err.contains("= `OBS = 3`, `ACTIONS = 2` from the spaces of `pod:examples/envs/memory_chain.pod`"),
        "{err}"
    );
}

/// The same agents on Gymnasium envs whose sizes they were not written with: Acrobot-v1
/// (6 observations, 3 actions) and MountainCarContinuous-v0 (bounds [-1, 1]).
#[test]
fn agents_take_their_sizes_from_gymnasium_envs() {
    if tier::slow("Python env workers") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let python = cache_python();
    for (agent, uri, want) in [
        ("examples/ppo.pod", "gymnasium:Acrobot-v1", serde_json::json!({"OBS": 6, "ACTIONS": 3, "TOTAL_UPDATES": 2})),
        (
            "examples/ppo_continuous.pod",
            "gymnasium:MountainCarContinuous-v0",
            serde_json::json!({"OBS": 2, "ACTIONS": 1, "LOW": [-1.0], "HIGH": [1.0], "TOTAL_UPDATES": 2}),
        ),
    ] {
        let out = dir.path().join(uri.replace(':', "_"));
        let o = podc(&["train", agent, "--env", uri, "-q", "--envs", "16", "--updates-per-call", "1"])
            .args(["--total-steps", "4096", "--out", out.to_str().unwrap(), "--python", python.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(o.status.success(), "{uri}: {}", stderr(&o));
        let r = records(&out);
        assert_eq!(r.last().unwrap()["env_steps"], 4096, "{uri}");
        assert!(r.iter().all(|x| x["loss"].as_f64().is_some_and(f64::is_finite)), "{uri}: {r:?}");
        let meta: Value = serde_json::from_str(&std::fs::read_to_string(out.join("checkpoint.json")).unwrap()).unwrap();
        assert_eq!(meta["meta"]["config"]["overrides"], want, "{uri}");
    }
}
