//! Training across processes (`src/distributed`): a job of N processes gives the run of one
//! process with N times the devices (bit for bit for two processes), however the
//! processes learn their places (`podc launch`, flags, Slurm's or torchrun's variables);
//! two hosts simulated with network namespaces; a killed process stops the job with a
//! message naming it; mismatched settings are refused before training.
//!
//! Every test needs gloo (`apt-get install libgloo-dev`, which `.ci/run` installs); where
//! it is missing they pass saying so.

#[path = "../tier/mod.rs"]
mod tier;

use serde_json::Value;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tempfile::TempDir;

const CATCH: &str = "examples/catch_a2c.pod";
const STEPS: &str = "40960";

/// Whether gloo is there; if not, says which test cannot run.
fn gloo(test: &str) -> bool {
    match podracer::distributed::gloo::available() {
        Ok(()) => true,
        Err(e) => {
            eprintln!("skipped {test}: {e}");
            false
        }
    }
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn podc(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_podc"));
    c.current_dir(root()).args(args);
    for v in ["PODC_COORDINATOR", "PODC_NUM_PROCESSES", "PODC_PROCESS_ID"] {
        c.env_remove(v);
    }
    c
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

fn run_ok(mut c: Command) -> String {
    let o = c.output().expect("run podc");
    assert!(o.status.success(), "podc failed:\n{}", text(&o));
    text(&o)
}

fn out(dir: &TempDir, name: &str) -> String {
    dir.path().join(name).display().to_string()
}

/// The metrics without the timings, which differ from run to run (Sebulba's idle
/// fractions among them).
fn metrics(dir: &Path) -> Vec<Value> {
    fs::read_to_string(dir.join("metrics.jsonl"))
        .expect("metrics.jsonl")
        .lines()
        .map(|l| {
            let mut v: Value = serde_json::from_str(l).expect("a JSON line");
            let o = v.as_object_mut().expect("an object");
            for k in ["steps_per_sec", "wall_s", "actor_idle", "actor_acting", "actor_stepping", "learner_idle"] {
                o.remove(k);
            }
            v
        })
        .collect()
}

/// Asserts that two runs wrote the same metrics and checkpoint, bit for bit.
fn assert_same_run(a: &Path, b: &Path) {
    assert_eq!(metrics(a), metrics(b), "metrics of {} and {}", a.display(), b.display());
    for f in ["checkpoint.safetensors", "checkpoint.json"] {
        assert!(
            fs::read(a.join(f)).unwrap() == fs::read(b.join(f)).unwrap(),
            "{f} of {} and {}",
            a.display(),
            b.display()
        );
    }
}

/// `podc train examples/catch_a2c.pod --devices 2`, the run every two-process job must
/// reproduce.
fn two_devices() -> &'static Path {
    static DIR: OnceLock<(TempDir, PathBuf)> = OnceLock::new();
    &DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        run_ok(podc(&[
            "train",
            CATCH,
            "--devices",
            "2",
            "--total-steps",
            STEPS,
            "-q",
            "--out",
            &run.display().to_string(),
        ]));
        (dir, run)
    })
    .1
}

#[test]
fn launch_gives_the_run_of_one_process_with_as_many_devices() {
    if !gloo("launch_gives_the_run_of_one_process_with_as_many_devices") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let a = out(&dir, "a");
    let log = run_ok(podc(&[
        "launch",
        "--processes",
        "2",
        "--",
        "train",
        CATCH,
        "--devices",
        "1",
        "--total-steps",
        STEPS,
        "--out",
        &a,
    ]));
    assert_same_run(Path::new(&a), two_devices());
    // Process 0 reports; process 1 says nothing.
    assert!(log.contains("[0] training `A2C`") && log.contains("in each of 2 processes"), "{log}");
    assert!(!log.contains("[1] "), "{log}");
}

#[test]
fn ppo_across_processes_matches_one_process() {
    if tier::slow("PPO on CartPole across two processes") || !gloo("ppo_across_processes_matches_one_process") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let common = ["examples/cartpole_ppo.pod", "--envs", "16", "--total-steps", "20480", "-q"];
    let (one, two) = one_and_two(&dir, &common, &["--devices", "2"], &["--devices", "1"]);
    assert_same_run(&two, &one);
}

/// Trains `common` in one process with the flags `one`, and as a job of two processes
/// with the flags `two`; their run directories in `dir`.
fn one_and_two(dir: &TempDir, common: &[&str], one: &[&str], two: &[&str]) -> (PathBuf, PathBuf) {
    let (a, b) = (dir.path().join("one"), dir.path().join("two"));
    for (mut c, flags, out) in
        [(podc(&["train"]), one, &a), (podc(&["launch", "--processes", "2", "--", "train"]), two, &b)]
    {
        c.args(common).args(flags).arg("--out").arg(out);
        run_ok(c);
    }
    (a, b)
}

#[test]
fn four_processes_match_four_devices_within_rounding() {
    if tier::slow("four processes against four devices") || !gloo("four_processes_match_four_devices_within_rounding") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (out(&dir, "a"), out(&dir, "b"));
    let steps = "10240";
    run_ok(podc(&["train", CATCH, "--devices", "4", "--total-steps", steps, "-q", "--out", &b]));
    run_ok(podc(&["launch", "--processes", "4", "--", "train", CATCH, "--total-steps", steps, "-q", "--out", &a]));
    let (ma, mb) = (metrics(Path::new(&a)), metrics(Path::new(&b)));
    assert_eq!(ma.len(), mb.len());
    for (x, y) in ma.iter().zip(&mb) {
        for (k, v) in x.as_object().unwrap() {
            match (v.as_f64(), y[k].as_f64()) {
                (Some(p), Some(q)) => assert!((p - q).abs() <= 1e-5 * p.abs().max(1.0), "{k}: {p} vs {q}"),
                _ => assert_eq!(v, &y[k], "{k}"),
            }
        }
    }
}

/// Starts the two processes of a job by hand, `env(rank)` giving each its variables, and
/// checks they give the two-device run.
fn by_hand(flags: &dyn Fn(usize) -> Vec<String>, env: &dyn Fn(usize) -> Vec<(String, String)>) {
    let dir = tempfile::tempdir().unwrap();
    let a = out(&dir, "a");
    let children: Vec<Child> = (0..2)
        .map(|rank| {
            let mut c = podc(&["train", CATCH, "--total-steps", STEPS, "-q", "--out", &a]);
            c.args(flags(rank)).envs(env(rank)).stdout(Stdio::piped()).stderr(Stdio::piped());
            c.spawn().expect("start podc")
        })
        .collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
    }
    assert_same_run(Path::new(&a), two_devices());
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn processes_find_their_places_from_flags_or_launchers_variables() {
    if !gloo("processes_find_their_places_from_flags_or_launchers_variables") {
        return;
    }
    let port = free_port();
    by_hand(
        &|rank| {
            ["--coordinator", &format!("127.0.0.1:{port}"), "--num-processes", "2", "--process-id", &rank.to_string()]
                .map(String::from)
                .to_vec()
        },
        &|_| vec![],
    );
    let port = free_port();
    let s = |k: &str, v: String| (k.to_string(), v);
    by_hand(&|_| vec![], &|rank| {
        vec![
            s("MASTER_ADDR", "127.0.0.1".into()),
            s("MASTER_PORT", port.to_string()),
            s("RANK", rank.to_string()),
            s("WORLD_SIZE", "2".into()),
        ]
    });
    // Slurm's port comes from the job id: 61440 + id % 4096.
    let job = 20_000 + u32::from(free_port()) % 1000;
    by_hand(&|_| vec![], &|rank| {
        vec![
            s("SLURM_PROCID", rank.to_string()),
            s("SLURM_NTASKS", "2".into()),
            s("SLURM_STEP_NODELIST", "localhost".into()),
            s("SLURM_JOB_ID", job.to_string()),
        ]
    });
}

#[test]
fn mismatched_settings_are_refused_before_training() {
    if !gloo("mismatched_settings_are_refused_before_training") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let port = free_port().to_string();
    let coordinator = format!("127.0.0.1:{port}");
    let children: Vec<Child> = [("0", "20480"), ("1", "40960")]
        .iter()
        .map(|(rank, steps)| {
            let mut c = podc(&["train", CATCH, "--total-steps", steps, "--out", &out(&dir, "a")]);
            c.args(["--coordinator", &coordinator, "--num-processes", "2", "--process-id", rank]);
            c.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap()
        })
        .collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert!(!o.status.success());
        let t = text(&o);
        assert!(t.contains("`total_steps` = ") && t.contains("the same flags"), "{t}");
    }
    assert!(!dir.path().join("a").exists(), "nothing was written");
}

#[test]
fn an_unreachable_coordinator_is_an_error_after_the_timeout() {
    if !gloo("an_unreachable_coordinator_is_an_error_after_the_timeout") {
        return;
    }
    let port = free_port().to_string();
    let t = Instant::now();
    let o = podc(&["train", CATCH, "--coordinator", &format!("127.0.0.1:{port}"), "--num-processes", "2"])
        .args(["--process-id", "1", "--distributed-timeout", "2"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        text(&o).contains("cannot reach the coordinator at 127.0.0.1:") && text(&o).contains("after 2 s"),
        "{}",
        text(&o)
    );
    assert!(t.elapsed() < Duration::from_secs(20));
}

/// Starts a long two-process job, kills process `victim` with SIGKILL once the run has a
/// checkpoint, and checks that the job ends within 30 s naming it, that no process is
/// left, and that the checkpoint loads.
fn kill_one(victim: usize) {
    let dir = tempfile::tempdir().unwrap();
    let a = out(&dir, "a");
    let launch = long_job(&a, &["--checkpoint-every", "1"]);
    std::thread::sleep(Duration::from_millis(500));
    let pids = children_of(launch.id());
    assert_eq!(pids.len(), 2, "the launch's processes: {pids:?}");
    let pid = rustix::process::Pid::from_raw(pids[victim]).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::KILL).unwrap();
    let killed = Instant::now();
    let o = launch.wait_with_output().unwrap();
    assert!(killed.elapsed() < Duration::from_secs(30), "the job took {:?} to stop", killed.elapsed());
    let t = text(&o);
    assert!(!o.status.success(), "{t}");
    let named = match victim {
        0 => "lost the coordinator",
        _ => "process 1 (on ",
    };
    assert!(t.contains(named), "{t}");
    for p in pids {
        assert!(!Path::new(&format!("/proc/{p}")).exists(), "process {p} is left");
    }
    run_ok(podc(&["eval", CATCH, "--checkpoint", &a, "--episodes", "2"]));
}

/// `podc launch` of a two-process job far longer than any test, writing to `out`, once
/// it has written a checkpoint.
fn long_job(out: &str, flags: &[&str]) -> Child {
    let launch = podc(&["launch", "--processes", "2", "--", "train", CATCH, "--total-steps", "50000000", "--out", out])
        .args(flags)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !Path::new(out).join("checkpoint.json").exists() {
        assert!(start.elapsed() < Duration::from_secs(120), "no checkpoint after two minutes");
        std::thread::sleep(Duration::from_millis(100));
    }
    launch
}

/// The pids of a process's children, oldest first (`podc launch` starts rank 0 first).
fn children_of(pid: u32) -> Vec<i32> {
    let mut kids: Vec<i32> = fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|p| {
            fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| s.rsplit(')').next()?.split_whitespace().nth(1)?.parse::<u32>().ok())
                == Some(pid)
        })
        .collect();
    kids.sort();
    kids
}

#[test]
fn a_killed_process_stops_the_job_naming_it() {
    if tier::slow("killing processes of a job") || !gloo("a_killed_process_stops_the_job_naming_it") {
        return;
    }
    kill_one(1);
    kill_one(0);
}

/// Two network namespaces joined by a veth pair: two hosts with their own addresses.
struct Hosts {
    names: [String; 2],
}

impl Hosts {
    fn new() -> Result<Hosts, String> {
        let tag = std::process::id() % 100_000;
        let names = [format!("podc{tag}a"), format!("podc{tag}b")];
        let hosts = Hosts { names: names.clone() };
        let ip = |args: &[&str]| -> Result<(), String> {
            let o = Command::new("ip").args(args).output().map_err(|e| format!("`ip`: {e}"))?;
            o.status.success().then_some(()).ok_or_else(|| format!("`ip {}`: {}", args.join(" "), text(&o)))
        };
        let (a, b) = (&names[0], &names[1]);
        let (va, vb) = (format!("v{tag}a"), format!("v{tag}b"));
        ip(&["netns", "add", a])?;
        ip(&["netns", "add", b])?;
        ip(&["link", "add", &va, "type", "veth", "peer", "name", &vb])?;
        ip(&["link", "set", &va, "netns", a])?;
        ip(&["link", "set", &vb, "netns", b])?;
        for (ns, v, addr) in [(a, &va, "10.231.0.1/24"), (b, &vb, "10.231.0.2/24")] {
            ip(&["-n", ns, "addr", "add", addr, "dev", v])?;
            ip(&["-n", ns, "link", "set", v, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(hosts)
    }
}

impl Drop for Hosts {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = Command::new("ip").args(["netns", "del", n]).output();
        }
    }
}

#[test]
fn two_hosts_give_the_same_run() {
    if !gloo("two_hosts_give_the_same_run") {
        return;
    }
    let hosts = match Hosts::new() {
        Ok(h) => h,
        Err(e) => {
            eprintln!("skipped two_hosts_give_the_same_run: no network namespaces here ({e})");
            return;
        }
    };
    let dir = tempfile::tempdir().unwrap();
    // Each host its own run directory: nothing is shared through files.
    let outs = [out(&dir, "host0"), out(&dir, "host1")];
    let children: Vec<Child> = (0..2)
        .map(|rank| {
            let mut c = Command::new("ip");
            c.current_dir(root())
                .args(["netns", "exec", &hosts.names[rank], env!("CARGO_BIN_EXE_podc")])
                .args(["train", CATCH, "--total-steps", STEPS, "-q", "--out", &outs[rank]])
                .args(["--coordinator", "10.231.0.1:29511", "--num-processes", "2", "--process-id", &rank.to_string()])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            c.spawn().unwrap()
        })
        .collect();
    for c in children {
        let o = c.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", text(&o));
    }
    assert_same_run(Path::new(&outs[0]), two_devices());
    assert!(!PathBuf::from(&outs[1]).exists(), "process 1 wrote nothing");
}

#[test]
fn sebulba_across_processes_matches_one_process() {
    if !gloo("sebulba_across_processes_matches_one_process") {
        return;
    }
    // The agent's own `.pod` CartPole stepped on the host: actors, host envs and a learner
    // in each process, against one process with all of them.
    let dir = tempfile::tempdir().unwrap();
    let common = ["examples/cartpole_impala.pod", "--arch", "sebulba", "--total-steps", "20480", "-q"];
    let one_process = ["--actor-threads", "2", "--actor-devices", "0,1", "--learner-devices", "0,1"];
    let (one, two) = one_and_two(&dir, &common, &one_process, &["--actor-threads", "1"]);
    assert_same_run(&two, &one);
}

#[test]
fn an_interrupted_job_stops_every_process_at_one_checkpoint() {
    if tier::slow("interrupting a job") || !gloo("an_interrupted_job_stops_every_process_at_one_checkpoint") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let a = out(&dir, "a");
    let launch = long_job(&a, &[]);
    let pids = children_of(launch.id());
    let pid = rustix::process::Pid::from_raw(launch.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let o = launch.wait_with_output().unwrap();
    let t = text(&o);
    assert_eq!(o.status.code(), Some(130), "{t}");
    assert!(t.contains("[0] stopped by SIGINT") && t.contains("--resume"), "{t}");
    for p in pids {
        assert!(!Path::new(&format!("/proc/{p}")).exists(), "process {p} is left");
    }
    // The checkpoint is the last report's: the metrics log ends where it does.
    let meta: Value = serde_json::from_slice(&fs::read(Path::new(&a).join("checkpoint.json")).unwrap()).unwrap();
    let last = metrics(Path::new(&a)).last().unwrap()["env_steps"].clone();
    assert_eq!(meta["meta"]["env_steps"], last, "{meta}");
}
