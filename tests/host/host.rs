//! Host environments (`src/host`): Gymnasium through worker processes against Gymnasium
//! in-process, the `pod:` backend against the `.pod` env's device step, the fault model
//! (SIGKILL, exceptions, hangs, the restart bound), no worker outliving its parent, URIs
//! and `podc env describe`.
//!
//! The Python tests use the cache venv, made by podc's own code on first use (which takes
//! a minute once), whatever `PODC_PYTHON` or `VIRTUAL_ENV` say.

use crate::tier;

use podracer::array::{Array, Data};
use podracer::host::pool::WorkerPool;
use podracer::host::{ActionSpace, Backend, EnvUri, HostEnv, HostError, Options, StepOut};
use podracer::runtime::{Client, Runtime};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

const FAULTY: &str = "tests/fixtures/host/faulty_envs.py";

fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| Runtime::open(None, None).unwrap_or_else(|e| panic!("the pod: tests need PJRT: {e}")))
}

/// The cache venv, made (or extended) by podc's own code, with what `backend` needs: the
/// tests name it explicitly so that a `PODC_PYTHON` or `VIRTUAL_ENV` of the caller's
/// cannot change what they test.
fn cache_python(backend: Backend) -> PathBuf {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one_at_a_time = LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let cache = podracer::runtime::plugin::cache_dir().unwrap();
    podracer::host::python::cache_venv(&cache, backend).unwrap_or_else(|e| panic!("{e}"))
}

/// Options with the cache venv's Python, for `backend`.
fn options(backend: Backend, num_envs: usize) -> Options {
    let mut opts = Options::new(num_envs);
    opts.python = Some(cache_python(backend));
    opts
}

fn pool(uri: &str, num_envs: usize, workers: usize) -> WorkerPool {
    let mut opts = options(EnvUri::parse(uri).unwrap().backend, num_envs);
    opts.env_workers = workers;
    WorkerPool::start(&EnvUri::parse(uri).unwrap(), &opts).unwrap_or_else(|e| panic!("{uri}: {e}"))
}

fn faulty(
    how: &str,
    fail_at: u32,
    num_envs: usize,
    workers: usize,
    timeout: Duration,
    max_restarts: u64,
) -> WorkerPool {
    let mut opts = options(Backend::Gymnasium, num_envs);
    opts.env_workers = workers;
    opts.env_import = vec![FAULTY.into()];
    opts.step_timeout = timeout;
    opts.max_restarts = max_restarts;
    let uri = format!("gymnasium:PodTest/Faulty-v0?fail_at={fail_at}&how={how}");
    WorkerPool::start(&EnvUri::parse(&uri).unwrap(), &opts).unwrap()
}

/// Deterministic actions in `0..n` (splitmix64).
fn actions(seed: u64, steps: usize, envs: usize, n: u64) -> Vec<Vec<i32>> {
    let mut z = seed;
    (0..steps)
        .map(|_| {
            (0..envs)
                .map(|_| {
                    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
                    let mut x = z;
                    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                    ((x ^ (x >> 31)) % n) as i32
                })
                .collect()
        })
        .collect()
}

/// One batch step's `discrete` actions.
fn discrete(a: &[i32]) -> Array {
    Array::i32(vec![a.len()], a.to_vec())
}

fn f32s(a: &Array) -> Vec<f32> {
    match &a.data {
        Data::F32(v) => v.clone(),
        _ => panic!("expected f32 observations"),
    }
}

/// A JSON list of lists of numbers, flattened to f32.
fn flat(v: &Value) -> Vec<f32> {
    match v {
        Value::Array(xs) => xs.iter().flat_map(flat).collect(),
        x => vec![x.as_f64().expect("a number") as f32],
    }
}

fn bools(v: &Value) -> Vec<bool> {
    v.as_array().unwrap().iter().map(|b| b.as_bool().unwrap()).collect()
}

/// (a) A Gymnasium env through two workers gives exactly what Gymnasium gives in-process,
/// with keyword arguments (a time limit of 12, so episodes end).
fn gymnasium_equals_in_process(id: &str, spec: &str, acts: &[Array], ends: &dyn Fn(usize, usize) -> bool) {
    let (n, seed) = (acts[0].shape[0], 7);
    let mut env = pool(&format!("gymnasium:{id}?max_episode_steps=12"), n, 2);
    assert_eq!(env.spec().to_string(), spec);
    let rows: Vec<Value> = acts.iter().map(podracer::io::nested_json).collect();
    let cfg = json!({"id": id, "kwargs": {"max_episode_steps": 12}, "num_envs": n, "seed": seed, "actions": rows});
    let reference =
        Command::new(env.python()).arg("tests/fixtures/host/gym_reference.py").arg(cfg.to_string()).output().unwrap();
    assert!(reference.status.success(), "{}", String::from_utf8_lossy(&reference.stderr));
    let want: Value = serde_json::from_slice(&reference.stdout).unwrap();

    let mut out = StepOut::new(env.spec(), n);
    env.reset(seed, &mut out).unwrap();
    assert_eq!(f32s(&out.obs_array(env.spec()).unwrap()), flat(&want["reset"]));
    let (mut terminated, mut truncated) = (0, 0);
    for (t, a) in acts.iter().enumerate() {
        env.step(a, &mut out).unwrap();
        let w = &want["steps"][t];
        assert_eq!(f32s(&out.obs_array(env.spec()).unwrap()), flat(&w["obs"]), "obs at step {t}");
        assert_eq!(f32s(&out.final_obs_array(env.spec()).unwrap()), flat(&w["final_obs"]), "final_obs at step {t}");
        assert_eq!(out.reward, flat(&w["reward"]), "reward at step {t}");
        assert_eq!(out.terminated, bools(&w["terminated"]), "terminated at step {t}");
        assert_eq!(out.truncated, bools(&w["truncated"]), "truncated at step {t}");
        terminated += out.terminated.iter().filter(|&&x| x).count();
        truncated += out.truncated.iter().filter(|&&x| x).count();
    }
    assert!(ends(terminated, truncated), "episodes ended: {terminated} terminated, {truncated} truncated");
    assert_eq!(env.restarts(), 0);
}

#[test]
fn gymnasium_through_workers_equals_in_process() {
    if tier::slow("Python env workers") {
        return;
    }
    let acts: Vec<Array> = actions(1, 40, 5, 2).iter().map(|a| discrete(a)).collect();
    let spec = "observation: f32[4], action: discrete(2), time_limit: 12";
    gymnasium_equals_in_process("CartPole-v1", spec, &acts, &|te, tr| te > 0 && tr > 0);
}

/// A `Box` action space: `f32[B, 1]` torques through shared memory, some beyond the bounds
/// (Gymnasium clips them).
#[test]
fn gymnasium_box_actions_through_workers_equal_in_process() {
    if tier::slow("Python env workers") {
        return;
    }
    let acts: Vec<Array> = actions(3, 30, 4, 600)
        .iter()
        .map(|a| Array::f32(vec![4, 1], a.iter().map(|&x| x as f32 / 100.0 - 3.0).collect()))
        .collect();
    let spec = "observation: f32[3], action: box(1, -2.0, 2.0), time_limit: 12";
    gymnasium_equals_in_process("Pendulum-v1", spec, &acts, &|te, tr| te == 0 && tr > 0);
}

/// The split over workers does not change the batch (env k is seeded `seed + k` either
/// way), and neither does stepping in two phases (`send`, then `recv`).
#[test]
fn worker_count_and_split_steps_do_not_change_results() {
    if tier::slow("Python env workers") {
        return;
    }
    let run = |workers, split: bool| {
        let mut env = pool("gymnasium:Acrobot-v1", 3, workers);
        let mut out = StepOut::new(env.spec(), 3);
        env.reset(3, &mut out).unwrap();
        let mut all = vec![out.clone()];
        for a in actions(2, 5, 3, 3) {
            if split {
                env.send(&discrete(&a)).unwrap();
                assert!(matches!(env.send(&discrete(&a)), Err(HostError::Usage(_))), "one step in flight at a time");
                env.recv(&mut out).unwrap();
            } else {
                env.step(&discrete(&a), &mut out).unwrap();
            }
            all.push(out.clone());
        }
        assert!(matches!(env.recv(&mut out), Err(HostError::Usage(_))), "nothing in flight");
        assert!(
            matches!(env.step(&discrete(&[0, 1, 3]), &mut out), Err(HostError::Usage(_))),
            "action 3 is out of range"
        );
        assert!(matches!(env.step(&discrete(&[0, 1]), &mut out), Err(HostError::Usage(_))), "too few actions");
        all
    };
    assert_eq!(run(1, false), run(3, true));
}

/// `split(fold_in(key(seed), t), B)`: the documented keys of the `pod:` backend.
fn keys(seed: u64, t: i32, b: usize) -> Array {
    let src = format!("fn main(base: Key, t: i32) -> u32[{b}, 2] {{ split(fold_in(base, t), {b}) }}");
    let (prog, diags) = podracer::driver::check_source("keys", &src, None);
    assert!(diags.is_empty());
    let e = podracer::driver::build(&prog, &[], "main").unwrap();
    podracer::driver::eval(&e, &[podracer::io::seed_key(seed as i64), Array::i32(vec![], vec![t])]).remove(0)
}

fn row(a: &Array, i: usize) -> Array {
    let per: usize = a.shape[1..].iter().product();
    let data = match &a.data {
        Data::U32(v) => Data::U32(v[i * per..(i + 1) * per].to_vec()),
        Data::F32(v) => Data::F32(v[i * per..(i + 1) * per].to_vec()),
        Data::I32(v) => Data::I32(v[i * per..(i + 1) * per].to_vec()),
        Data::U8(v) => Data::U8(v[i * per..(i + 1) * per].to_vec()),
        Data::Bool(v) => Data::Bool(v[i * per..(i + 1) * per].to_vec()),
    };
    Array::new(a.shape[1..].to_vec(), data)
}

/// Whether two results of one env agree: ints and bools exactly, floats to rounding.
fn same_to_rounding(a: &Array, b: &Array) -> bool {
    match (&a.data, &b.data) {
        (Data::F32(u), Data::F32(v)) => {
            a.shape == b.shape && u.iter().zip(v).all(|(p, q)| p == q || (p - q).abs() <= 1e-6 + 1e-5 * q.abs())
        }
        _ => a == b,
    }
}

/// (b) The `pod:` backend, batched on the host, gives exactly the `.pod` env's reset and
/// step batched with `vmap` and compiled apart, with the documented keys; and each env's
/// own (unbatched) device step, from the same state, agrees with its row to rounding.
/// Not exactly: XLA need not round a batch as it rounds one env (0.11's `sin` and `cos`
/// do not).
fn pod_equals_device_step(file: &str, steps: usize) {
    let (b, seed) = (3, 11);
    let mut env = podracer::host::open(&format!("pod:{file}"), &Options::new(b), Some(client())).unwrap();
    let (prog, diags) = podracer::driver::check_file(Path::new(file)).unwrap();
    assert!(diags.is_empty());
    let name = podracer::elab::env::env_names(&prog).remove(0);
    let funcs = podracer::elab::env::build_env(&prog, &[], &name).unwrap();
    let compile = |f| client().compile(&podracer::lower::stablehlo::lower_module(f, 1), 1).unwrap();
    let n_params = funcs.step.graph.params.len();
    let (reset, step) = (compile(&funcs.reset), compile(&funcs.step));
    let vmap = podracer::transform::vmap::vmap;
    let (reset_b, step_b) =
        (compile(&vmap(&funcs.reset, &[true], b)), compile(&vmap(&funcs.step, &vec![true; n_params], b)));
    let run = |exe: &podracer::runtime::Executable, args: &[Array]| -> Vec<Array> {
        let bufs: Vec<_> = args.iter().map(|a| client().upload(a, 0).unwrap()).collect();
        exe.execute(&bufs.iter().collect::<Vec<_>>()).unwrap().iter().map(|x| x.download().unwrap()).collect()
    };
    // Each env's own program on row i of `args` agrees with row i of the batch's `outs`.
    let each_env = |exe, args: &[Array], outs: &[Array], what: &str| {
        for i in 0..b {
            let own = run(exe, &args.iter().map(|a| row(a, i)).collect::<Vec<_>>());
            for (j, (x, y)) in own.iter().zip(outs).enumerate() {
                assert!(
                    same_to_rounding(x, &row(y, i)),
                    "{what}, env {i}, output {j}: {x:?} alone, {:?} batched",
                    row(y, i)
                );
            }
        }
    };
    let n_state = n_params - 3;
    let spec = env.spec().clone();

    let mut out = StepOut::new(&spec, b);
    env.reset(seed, &mut out).unwrap();
    let k0 = keys(seed, 0, b);
    let o = run(&reset_b, std::slice::from_ref(&k0));
    assert_eq!(o[n_state + 1], out.obs_array(&spec).unwrap(), "reset obs");
    each_env(&reset, std::slice::from_ref(&k0), &o, "reset");
    let mut state = o[..n_state + 1].to_vec();
    let mut ended = 0;
    let batches: Vec<Array> = match &spec.action {
        ActionSpace::Discrete(n) => actions(5, steps, b, *n).iter().map(|a| discrete(a)).collect(),
        // In [-3, 3): beyond Pendulum's bounds, so that it clips too.
        ActionSpace::Box { n, .. } => actions(5, steps, b * *n as usize, 600)
            .iter()
            .map(|a| Array::f32(vec![b, *n as usize], a.iter().map(|&x| x as f32 / 100.0 - 3.0).collect()))
            .collect(),
    };
    for (t, a) in batches.iter().enumerate() {
        env.step(a, &mut out).unwrap();
        let mut args = state.clone();
        args.extend([a.clone(), keys(seed, t as i32 + 1, b)]);
        let o = run(&step_b, &args);
        // o: state.., t, obs, reward, terminated, truncated, final_obs
        let k = n_state + 1;
        assert_eq!(o[k], out.obs_array(&spec).unwrap(), "obs at step {t}");
        assert_eq!(o[k + 1], Array::f32(vec![b], out.reward.clone()), "reward at step {t}");
        assert_eq!(o[k + 2].data, Data::Bool(out.terminated.clone()), "terminated at step {t}");
        assert_eq!(o[k + 3].data, Data::Bool(out.truncated.clone()), "truncated at step {t}");
        assert_eq!(o[k + 4], out.final_obs_array(&spec).unwrap(), "final_obs at step {t}");
        each_env(&step, &args, &o, &format!("step {t}"));
        ended += (0..b).filter(|&i| out.done(i)).count();
        state = o[..k].to_vec();
    }
    assert!(ended > 0, "the run should cross episode ends");
}

#[test]
fn pod_catch_equals_device_step() {
    pod_equals_device_step("examples/envs/catch.pod", 25);
}

#[test]
fn pod_cartpole_equals_device_step() {
    pod_equals_device_step("examples/envs/cartpole.pod", 40);
}

#[test]
fn pod_pendulum_equals_device_step() {
    // Continuous actions; 201 steps cross the 200-step time limit.
    pod_equals_device_step("examples/envs/pendulum.pod", 201);
}

/// (c) SIGKILL one of two workers between steps: the next step keeps the batch's shape,
/// the killed worker's rows are truncated with their last observation as final, the other
/// rows step normally, and the restart is counted.
#[test]
fn sigkill_of_a_worker_truncates_its_rows_and_restarts_it() {
    if tier::slow("Python env workers") {
        return;
    }
    let (n, spec_envs) = (4, "gymnasium:CartPole-v1");
    let mut env = pool(spec_envs, n, 2);
    let mut out = StepOut::new(env.spec(), n);
    env.reset(0, &mut out).unwrap();
    let acts = actions(9, 8, n, 2);
    for a in &acts[..3] {
        env.step(&discrete(a), &mut out).unwrap();
    }
    let before = out.clone();
    let victim = env.worker_pids()[1];
    rustix::process::kill_process(
        rustix::process::Pid::from_raw(victim as i32).unwrap(),
        rustix::process::Signal::KILL,
    )
    .unwrap();
    env.step(&discrete(&acts[3]), &mut out).unwrap();
    let ob = env.spec().obs_bytes();
    assert_eq!(out.obs.len(), n * ob);
    assert_eq!(env.restarts(), 1);
    assert_eq!(&out.truncated[2..], &[true, true]);
    assert_eq!(&out.terminated[2..], &[false, false]);
    assert_eq!(&out.reward[2..], &[0.0, 0.0]);
    assert_eq!(&out.final_obs[2 * ob..], &before.obs[2 * ob..], "final obs: the last seen");
    assert_ne!(&out.obs[2 * ob..], &before.obs[2 * ob..], "the rows go on with new episodes");
    assert_eq!(&out.reward[..2], &[1.0, 1.0], "the other worker stepped");
    assert!(env.last_fault().unwrap().contains("killed by SIGKILL"), "{:?}", env.last_fault());
    assert_ne!(env.worker_pids()[1], victim);
    for a in &acts[4..] {
        env.step(&discrete(a), &mut out).unwrap();
    }
}

/// A Python exception in a worker: restarted like a crash.
#[test]
fn python_exception_restarts_the_worker() {
    if tier::slow("Python env workers") {
        return;
    }
    let mut env = faulty("raise", 3, 2, 1, Duration::from_secs(60), 10);
    let mut out = StepOut::new(env.spec(), 2);
    env.reset(0, &mut out).unwrap();
    for a in actions(4, 5, 2, 2) {
        env.step(&discrete(&a), &mut out).unwrap();
    }
    // Steps 1, 2 fine; 3 fails (restart 1); 4, 5 are the new worker's steps 1, 2.
    assert_eq!(env.restarts(), 1);
    assert!(env.last_fault().unwrap().contains("exit status 1"), "{:?}", env.last_fault());
}

/// A hung worker is killed at the step deadline and restarted; the step returns in time.
#[test]
fn hung_worker_is_killed_at_the_deadline() {
    if tier::slow("Python env workers") {
        return;
    }
    let mut env = faulty("hang", 2, 2, 1, Duration::from_millis(1500), 10);
    let mut out = StepOut::new(env.spec(), 2);
    env.reset(0, &mut out).unwrap();
    env.step(&discrete(&[0, 1]), &mut out).unwrap();
    let t0 = Instant::now();
    env.step(&discrete(&[0, 1]), &mut out).unwrap();
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    assert_eq!(env.restarts(), 1);
    assert_eq!(out.truncated, vec![true, true]);
    assert!(env.last_fault().unwrap().contains("hung"), "{:?}", env.last_fault());
}

/// Past the bound, a fault is an error that shows the worker's stderr.
#[test]
fn restarts_are_bounded() {
    if tier::slow("Python env workers") {
        return;
    }
    // Each worker's error names its process: no failure repeats another.
    let mut env = faulty("raise_pid", 2, 1, 1, Duration::from_secs(60), 2);
    let mut out = StepOut::new(env.spec(), 1);
    env.reset(0, &mut out).unwrap();
    let mut err = None;
    for _ in 0..9 {
        if let Err(e) = env.step(&discrete(&[1]), &mut out) {
            err = Some(e);
            break;
        }
    }
    let e = err.expect("the third fault is one too many");
    assert!(matches!(e, HostError::TooManyRestarts { restarts: 2, .. }), "{e:?}");
    let text = e.to_string();
    assert!(text.contains("ValueError: boom at step 2 in process"), "{text}");
    assert_eq!(env.restarts(), 2);
}

/// A failure that repeats the last one exactly (the same exception at the same place) is
/// an error at once, well within the bound, without its traceback a second time; with a
/// bound of 0 (`podc eval`) the first failure is an error.
#[test]
fn a_repeated_failure_is_not_retried() {
    if tier::slow("Python env workers") {
        return;
    }
    let fail = |max_restarts: u64| {
        let mut env = faulty("raise", 2, 1, 1, Duration::from_secs(60), max_restarts);
        let mut out = StepOut::new(env.spec(), 1);
        env.reset(0, &mut out).unwrap();
        let e = (0..9).find_map(|_| env.step(&discrete(&[1]), &mut out).err()).expect("a fault ends the steps");
        (e, env.restarts())
    };
    let (e, restarts) = fail(10);
    assert_eq!(restarts, 1);
    let text = e.to_string();
    assert!(matches!(e, HostError::Worker { worker: 0, .. }), "{e:?}");
    assert!(text.contains("exactly as before its last restart"), "{text}");
    assert!(!text.contains("boom"), "the traceback was shown at the restart: {text}");
    let (e, restarts) = fail(0);
    assert_eq!(restarts, 0);
    assert!(matches!(e, HostError::Worker { worker: 0, .. }), "{e:?}");
    assert!(e.to_string().contains("ValueError: boom at step 2"), "{e}");
}

/// (d) When the process holding workers is SIGKILLed, no worker survives it, even one busy
/// in a step. The holder is this test binary, running [`holder_of_workers`] in a child
/// process.
#[test]
fn killing_the_parent_leaves_no_worker() {
    if tier::slow("Python env workers") {
        return;
    }
    // libtest names the helper by its path below the test binary's crate: `host::holder_of_workers`.
    let holder = format!("{}::holder_of_workers", module_path!().split_once("::").expect("a module").1);
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([holder.as_str(), "--exact", "--ignored", "--nocapture", "--test-threads=1"])
        .env("PODC_TEST_HOLD_WORKERS", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut pids: Vec<i32> = vec![];
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        // libtest prints `test holder_of_workers ... ` before it on the same line.
        if let Some((_, rest)) = line.split_once("WORKER PIDS ") {
            pids = rest.split_whitespace().map(|p| p.parse().unwrap()).collect();
            break;
        }
    }
    assert_eq!(pids.len(), 2, "the holder should report its workers");
    assert!(pids.iter().all(|&p| alive(p)));
    // Let the holder send the step that hangs.
    std::thread::sleep(Duration::from_millis(300));
    child.kill().unwrap();
    child.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    while pids.iter().any(|&p| alive(p)) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left: Vec<i32> = pids.into_iter().filter(|&p| alive(p)).collect();
    assert!(left.is_empty(), "workers {left:?} outlived their parent by 3 s");
}

/// Running and not a zombie (an orphan's zombie may wait for a reaper that never comes).
fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit(')').next().and_then(|s| s.split_whitespace().next()) != Some("Z"),
        Err(_) => false,
    }
}

/// Holds two workers until killed; run only by [`killing_the_parent_leaves_no_worker`].
#[test]
#[ignore = "a helper process of killing_the_parent_leaves_no_worker"]
fn holder_of_workers() {
    if std::env::var_os("PODC_TEST_HOLD_WORKERS").is_none() {
        return;
    }
    // Both workers hang in their first step, so they never read the end of file on their
    // socket: only PR_SET_PDEATHSIG can end them.
    let mut env = faulty("hang", 1, 2, 2, Duration::from_secs(60), 0);
    let mut out = StepOut::new(env.spec(), 2);
    env.reset(0, &mut out).unwrap();
    let pids: Vec<String> = env.worker_pids().iter().map(|p| p.to_string()).collect();
    println!("WORKER PIDS {}", pids.join(" "));
    let _ = env.step(&discrete(&[0, 0]), &mut out);
}

#[test]
fn bad_envs_are_clear_errors() {
    if tier::slow("Python env workers") {
        return;
    }
    let mut opts = options(Backend::Gymnasium, 2);
    let err = |uri: &str, opts: &Options| podracer::host::open(uri, opts, None).err().expect(uri).to_string();
    let e = err("gymnasium:NoSuchEnv-v9", &opts);
    assert!(e.contains("cannot make `gymnasium:NoSuchEnv-v9`") && e.contains("NoSuchEnv"), "{e}");
    let e = err("gymnasium:CartPole-v1?no_such_kwarg=3", &opts);
    assert!(e.contains("no_such_kwarg"), "{e}");
    let e = err("gym:CartPole-v1", &opts);
    assert!(e.contains("unknown backend `gym`"), "{e}");
    let e = err("pod:examples/envs/catch.pod?seed=1", &opts);
    assert!(e.contains("only `?env=NAME`"), "{e}");
    opts.python = Some("/no/such/python".into());
    let e = err("gymnasium:CartPole-v1", &opts);
    assert!(e.contains("/no/such/python") && e.contains("does not exist"), "{e}");
}

/// A Python without the packages: the error gives the exact pip command.
#[test]
fn missing_package_names_the_pip_command() {
    if tier::slow("Python env workers") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let venv = dir.path().join("empty");
    let made = Command::new("python3").args(["-m", "venv", "--without-pip"]).arg(&venv).status().unwrap();
    assert!(made.success());
    let python = venv.join("bin").join("python");
    let mut opts = Options::new(1);
    opts.python = Some(python.clone());
    let e = podracer::host::open("gymnasium:CartPole-v1", &opts, None).err().unwrap();
    assert!(matches!(e, HostError::MissingPackage { .. }), "{e:?}");
    assert!(e.to_string().contains(&format!("{} -m pip install numpy==", python.display())), "{e}");
}

#[test]
fn podc_env_describe() {
    if tier::slow("Python env workers") {
        return;
    }
    let podc = env!("CARGO_BIN_EXE_podc");
    let run = |uri: &str| {
        let python = cache_python(Backend::Gymnasium);
        let mut cmd = Command::new(podc);
        cmd.args(["env", "describe"]).args(uri.split(' ')).arg("--python").arg(python);
        let o = cmd.output().unwrap();
        assert!(o.status.success(), "{uri}: {}", String::from_utf8_lossy(&o.stderr));
        String::from_utf8(o.stdout).unwrap()
    };
    let acrobot = run("gymnasium:Acrobot-v1");
    assert!(acrobot.ends_with("extern env AcrobotV1 { observation: f32[6], action: discrete(3), time_limit: 500 }\n"));
    let faulty = run(&format!("gymnasium:PodTest/Faulty-v0 --env-import {FAULTY}"));
    assert!(faulty.ends_with("extern env FaultyV0 { observation: f32[4], action: discrete(2), time_limit: 500 }\n"));
    // What it prints is a declaration `podc check` accepts.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("acrobot.pod");
    std::fs::write(&file, &acrobot).unwrap();
    let check = Command::new(podc).arg("check").arg(&file).output().unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    let catch = run("pod:examples/envs/catch.pod");
    assert!(catch.ends_with("extern env Catch { observation: f32[10, 5], action: discrete(3), time_limit: 1000 }\n"));
    // Box action spaces, from Gymnasium and from a `.pod` env, are blocks that check too.
    let box_block = "{ observation: f32[3], action: box(1, -2.0, 2.0), time_limit: 200 }\n";
    for (uri, name) in [("gymnasium:Pendulum-v1", "PendulumV1"), ("pod:examples/envs/pendulum.pod", "Pendulum")] {
        let block = run(uri);
        assert!(block.ends_with(&format!("extern env {name} {box_block}")), "{block}");
        std::fs::write(&file, &block).unwrap();
        let check = Command::new(podc).arg("check").arg(&file).output().unwrap();
        assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    }
    let car = run("gymnasium:MountainCarContinuous-v0");
    assert!(car.ends_with("action: box(1, -1.0, 1.0), time_limit: 999 }\n"), "{car}");
    let fails = |args: &[&str], vars: &[(&str, &str)], says: &str| {
        let mut cmd = Command::new(podc);
        cmd.args(args).env_remove("PODC_PYTHON").env_remove("VIRTUAL_ENV").envs(vars.iter().copied());
        let o = cmd.output().unwrap();
        assert_eq!(o.status.code(), Some(1), "{args:?}");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(says) && !err.contains("panicked"), "{args:?}: {err}");
    };
    fails(&["env", "describe", "nope:X"], &[], "unknown backend `nope`");
    // Discovery order: --python, then PODC_PYTHON, then VIRTUAL_ENV.
    let d = ["env", "describe", "gymnasium:CartPole-v1"];
    fails(&d, &[("VIRTUAL_ENV", "/no/venv")], "the Python given by VIRTUAL_ENV (/no/venv/bin/python)");
    fails(&d, &[("VIRTUAL_ENV", "/no/venv"), ("PODC_PYTHON", "/no/py")], "given by PODC_PYTHON (/no/py)");
    let explicit = ["env", "describe", "gymnasium:CartPole-v1", "--python", "/no/x"];
    fails(&explicit, &[("PODC_PYTHON", "/no/py")], "given by --python (/no/x)");
}

/// `podc bench env URI`: host URIs print the `.pod` bench's JSON keys; `.pod` files are
/// benched as before; flags that do not apply to host envs are clear errors.
#[test]
fn podc_bench_env_uri() {
    if tier::slow("Python env workers") {
        return;
    }
    let podc = env!("CARGO_BIN_EXE_podc");
    let python = cache_python(Backend::Gymnasium);
    let bench = |target: &str, extra: &[&str]| {
        let o = Command::new(podc)
            .args(["bench", "env", target, "--envs", "4", "--steps", "3", "--runs", "1", "--json", "--python"])
            .arg(&python)
            .args(extra)
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    for target in
        ["gymnasium:CartPole-v1?max_episode_steps=2", "pod:examples/envs/catch.pod", "examples/envs/catch.pod"]
    {
        let (code, out, err) = bench(target, &[]);
        assert_eq!(code, Some(0), "{target}: {err}");
        let v: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{target}: {e}: {out}"));
        let mut keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        keys.sort();
        let mut want = vec!["compile_s", "devices", "envs", "steps", "steps_per_sec"];
        // A `.pod` file's program is compiled by podc, through the compilation cache.
        if !target.contains(':') {
            want.insert(0, "cache");
        }
        assert_eq!(keys, want, "{target}");
        assert!(v["steps_per_sec"].as_f64().unwrap() > 0.0 && v["envs"] == 4 && v["steps"] == 3, "{target}: {v}");
    }
    for (extra, says) in
        [(&["--devices", "2"][..], "`--devices` applies to `.pod` files"), (&["--env", "X"], "pod:FILE.pod?env=NAME")]
    {
        let (code, _, err) = bench("gymnasium:CartPole-v1", extra);
        assert_eq!(code, Some(1), "{extra:?}");
        assert!(err.contains(says) && !err.contains("panicked"), "{extra:?}: {err}");
    }
}

/// EnvPool: same-step auto-reset converted from its next-step one, truncation at the time
/// limit, and the worker split. Ignored by default: the first use installs EnvPool
/// (~850 MB with its assets) into the cache venv.
#[test]
#[ignore = "installs EnvPool (~850 MB) into the cache venv on first use"]
fn envpool_same_step_auto_reset() {
    let run = |workers| {
        let mut env = pool("envpool:CartPole-v1?max_episode_steps=12", 4, workers);
        assert_eq!(env.spec().to_string(), "observation: f32[4], action: discrete(2), time_limit: 12");
        let mut out = StepOut::new(env.spec(), 4);
        env.reset(5, &mut out).unwrap();
        let mut all = vec![out.clone()];
        let (mut te, mut tr) = (0, 0);
        for a in actions(3, 40, 4, 2) {
            let prev = out.clone();
            env.step(&discrete(&a), &mut out).unwrap();
            for i in 0..4 {
                let (o, f) =
                    (row(&out.obs_array(env.spec()).unwrap(), i), row(&out.final_obs_array(env.spec()).unwrap(), i));
                if out.done(i) {
                    // A fresh CartPole state: every component within ±0.05.
                    assert!(f32s(&o).iter().all(|x| x.abs() <= 0.05), "{o:?}");
                    assert_ne!(o, f);
                } else {
                    assert_eq!(o, f);
                }
                assert_ne!(f, row(&prev.obs_array(env.spec()).unwrap(), i), "every env moved");
            }
            te += out.terminated.iter().filter(|&&x| x).count();
            tr += out.truncated.iter().filter(|&&x| x).count();
            all.push(out.clone());
        }
        assert!(te > 0 && tr > 0, "{te} {tr}");
        all
    };
    assert_eq!(run(1), run(2));
    envpool_pong_has_the_atari_defaults();
    // A restarted worker's seeds are past 2**32; EnvPool's are int32.
    let mut env = pool("envpool:CartPole-v1", 2, 1);
    let mut out = StepOut::new(env.spec(), 2);
    env.reset((3 << 32) + 5, &mut out).unwrap();
}

/// `envpool:Pong-v5`: the spaces `ale:Pong` has, sticky actions by default (the worker's
/// frames are EnvPool's own with `repeat_action_probability=0.25`, step by step, until the
/// time limit), and a time limit that only truncates.
fn envpool_pong_has_the_atari_defaults() {
    let (n, seed, limit) = (3, 9, 60);
    let mut env = pool(&format!("envpool:Pong-v5?max_episode_steps={limit}"), n, 1);
    assert_eq!(env.spec().to_string(), format!("observation: u8[4, 84, 84], action: discrete(6), time_limit: {limit}"));
    let acts = actions(7, limit + 5, n, 6);
    let before_limit: Vec<&Vec<i32>> = acts.iter().take(limit - 1).collect();
    let kwargs = json!({"repeat_action_probability": 0.25, "max_episode_steps": limit});
    let cfg = json!({"envpool": true, "game": "Pong-v5", "kwargs": kwargs, "num_envs": n, "seed": seed, "actions": before_limit});
    let reference =
        Command::new(env.python()).arg("tests/fixtures/host/ale_reference.py").arg(cfg.to_string()).output().unwrap();
    assert!(reference.status.success(), "{}", String::from_utf8_lossy(&reference.stderr));
    let want: Value = serde_json::from_slice(&reference.stdout).unwrap();
    let mut out = StepOut::new(env.spec(), n);
    env.reset(seed, &mut out).unwrap();
    assert_eq!(row_crcs(&out.obs, n), u64s(&want["reset"]), "reset");
    for (t, a) in acts.iter().enumerate() {
        env.step(&discrete(a), &mut out).unwrap();
        if t + 1 < limit {
            assert_eq!(row_crcs(&out.obs, n), u64s(&want["steps"][t]["obs"]), "obs at step {t}");
            assert_eq!(out.reward, flat(&want["steps"][t]["reward"]), "reward at step {t}");
        }
        assert_eq!(out.truncated, vec![t + 1 == limit; n], "truncated at step {t}");
        assert_eq!(out.terminated, vec![false; n], "terminated at step {t}");
        if t + 1 == limit {
            assert_ne!(row_crcs(&out.obs, n), row_crcs(&out.final_obs, n), "new episodes at step {t}");
        } else {
            assert_eq!(out.obs, out.final_obs, "step {t}");
        }
    }
}

/// Env steps per second through workers, next to the worker's backend class and the raw
/// backend stepped in-process (`tests/fixtures/host/inprocess_rate.py`). A measurement,
/// not a check:
/// `cargo test --release --test host -- --ignored throughput --nocapture`.
#[test]
#[ignore = "a measurement; EnvPool rows need EnvPool in the cache venv"]
fn throughput() {
    let (envs, steps) = (64, 3000);
    for (uri, workers) in [
        ("gymnasium:CartPole-v1", 1),
        ("gymnasium:CartPole-v1", 2),
        ("envpool:CartPole-v1", 1),
        ("envpool:CartPole-v1", 2),
    ] {
        let mut env = pool(uri, envs, workers);
        let mut out = StepOut::new(env.spec(), envs);
        env.reset(0, &mut out).unwrap();
        let acts = actions(1, 64, envs, 2);
        for a in &acts[..10] {
            env.step(&discrete(a), &mut out).unwrap();
        }
        let t0 = Instant::now();
        for t in 0..steps {
            env.step(&discrete(&acts[t % acts.len()]), &mut out).unwrap();
        }
        let rate = (envs * steps) as f64 / t0.elapsed().as_secs_f64();
        let (backend, id) = uri.split_once(':').unwrap();
        let py = Command::new(env.python())
            .args(["tests/fixtures/host/inprocess_rate.py", backend, id, &envs.to_string(), &steps.to_string()])
            .output()
            .unwrap();
        let inproc = String::from_utf8_lossy(&py.stdout);
        let (class, raw) = inproc.trim().split_once(' ').unwrap_or(("?", "?"));
        println!(
            "{uri}, {envs} envs, {workers} worker(s): {rate:.0} steps/s; in-process: {class} (worker class), {raw} (raw)"
        );
    }
}

/// The CRC-32 of each env's observation bytes, as `ale_reference.py` reports them.
fn row_crcs(bytes: &[u8], n: usize) -> Vec<u64> {
    bytes.chunks_exact(bytes.len() / n).map(|r| u64::from(crc32fast::hash(r))).collect()
}

fn u64s(v: &Value) -> Vec<u64> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}

/// An `ale:` URI through `workers` workers against ale-py's vector env driven directly in
/// Python (`tests/fixtures/host/ale_reference.py`) with the same seed and actions, step by
/// step: observation bytes, final observations, rewards, terminated and truncated.
/// `ale_kwargs` are ale-py's own arguments for the settings the URI gives, on top of the
/// two defaults where podc's differ from ale-py's (sticky actions, no reward clipping).
/// Returns the episodes that terminated and that were truncated.
fn ale_equals_ale_py(
    uri: &str,
    spec: &str,
    ale_kwargs: Value,
    n: usize,
    workers: usize,
    steps: usize,
) -> (usize, usize) {
    let seed = 11;
    let mut env = pool(uri, n, workers);
    assert_eq!(env.spec().to_string(), spec);
    let ActionSpace::Discrete(n_actions) = env.spec().action else { panic!("{spec}") };
    let acts = actions(5, steps, n, n_actions);
    let game = EnvUri::parse(uri).unwrap().id;
    let mut kwargs = json!({"repeat_action_probability": 0.25, "reward_clipping": false});
    kwargs.as_object_mut().unwrap().extend(ale_kwargs.as_object().unwrap().clone());
    let cfg = json!({"game": game.to_lowercase(), "kwargs": kwargs, "num_envs": n, "seed": seed, "actions": acts});
    let reference =
        Command::new(env.python()).arg("tests/fixtures/host/ale_reference.py").arg(cfg.to_string()).output().unwrap();
    assert!(reference.status.success(), "{}", String::from_utf8_lossy(&reference.stderr));
    let want: Value = serde_json::from_slice(&reference.stdout).unwrap();

    let mut out = StepOut::new(env.spec(), n);
    env.reset(seed, &mut out).unwrap();
    assert_eq!(row_crcs(&out.obs, n), u64s(&want["reset"]), "reset");
    let (mut terminated, mut truncated) = (0, 0);
    for (t, a) in acts.iter().enumerate() {
        env.step(&discrete(a), &mut out).unwrap();
        let w = &want["steps"][t];
        assert_eq!(row_crcs(&out.obs, n), u64s(&w["obs"]), "obs at step {t}");
        assert_eq!(row_crcs(&out.final_obs, n), u64s(&w["final_obs"]), "final_obs at step {t}");
        assert_eq!(out.reward, flat(&w["reward"]), "reward at step {t}");
        assert_eq!(out.terminated, bools(&w["terminated"]), "terminated at step {t}");
        assert_eq!(out.truncated, bools(&w["truncated"]), "truncated at step {t}");
        terminated += out.terminated.iter().filter(|&&x| x).count();
        truncated += out.truncated.iter().filter(|&&x| x).count();
    }
    assert_eq!(env.restarts(), 0);
    (terminated, truncated)
}

/// `ale:Pong` with its defaults, over two workers, through full episodes (a random
/// policy loses 21 points in about 800 steps).
#[test]
fn ale_pong_through_workers_equals_ale_py() {
    if tier::slow("Python env workers") {
        return;
    }
    let spec = "observation: u8[4, 84, 84], action: discrete(6), time_limit: 27000";
    let (te, tr) = ale_equals_ale_py("ale:Pong", spec, json!({}), 4, 2, 1010);
    assert!(te > 0 && tr == 0, "{te} terminated, {tr} truncated");
}

/// A time limit only truncates: `max_episode_steps=50` is ale-py's 200 frames at
/// frameskip 4, and every env is truncated at steps 50 and 100, never terminated.
#[test]
fn ale_time_limit_truncates() {
    if tier::slow("Python env workers") {
        return;
    }
    let spec = "observation: u8[4, 84, 84], action: discrete(6), time_limit: 50";
    let kwargs = json!({"max_num_frames_per_episode": 200});
    let (te, tr) = ale_equals_ale_py("ale:Pong?max_episode_steps=50", spec, kwargs, 3, 1, 120);
    assert_eq!((te, tr), (0, 6));
}

/// The optional settings reach ale-py under its names: episodic life (a life lost
/// terminates and the game goes on: ale-py's `life_loss_info`), clipped rewards, another
/// frameskip (the time limit in frames follows it).
#[test]
fn ale_settings_reach_ale_py() {
    if tier::slow("Python env workers") {
        return;
    }
    let uri = "ale:Breakout?episodic_life=true&reward_clip=true&frameskip=3&max_episode_steps=50";
    let spec = "observation: u8[4, 84, 84], action: discrete(4), time_limit: 50";
    let kwargs =
        json!({"life_loss_info": true, "reward_clipping": true, "frameskip": 3, "max_num_frames_per_episode": 150});
    let (te, tr) = ale_equals_ale_py(uri, spec, kwargs, 3, 1, 160);
    assert!(te > 0 && tr > 0, "{te} terminated, {tr} truncated");
}

/// `podc env describe ale:Pong` prints a block `podc check` accepts; a misspelt game and
/// an unknown setting are clear errors.
#[test]
fn podc_env_describe_ale() {
    if tier::slow("Python env workers") {
        return;
    }
    let podc = env!("CARGO_BIN_EXE_podc");
    let python = cache_python(Backend::Ale);
    let run = |uri: &str| Command::new(podc).args(["env", "describe", uri, "--python"]).arg(&python).output().unwrap();
    let o = run("ale:Pong");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let block = String::from_utf8(o.stdout).unwrap();
    insta::assert_snapshot!("env_describe_ale_pong", block);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("pong.pod");
    std::fs::write(&file, &block).unwrap();
    let check = Command::new(podc).arg("check").arg(&file).output().unwrap();
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
    for (uri, says) in [
        ("ale:Pongg", "cannot make `ale:Pongg`: ValueError: ale-py 0.12.1 has no game `Pongg`; did you mean `Pong`"),
        ("ale:Pong?sticky=0.25", "`sticky` is not a setting of `ale:` envs; they are frameskip, maxpool,"),
        ("ale:Pong?frameskip=0", "`frameskip=0`: expected an integer ≥ 1"),
    ] {
        let o = run(uri);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(o.status.code() == Some(1) && err.contains(says) && !err.contains("panicked"), "{uri}: {err}");
    }
}

/// `podc env install` adds packages to podc's own Python: Box2D (a binary wheel) and
/// pygame (which Gymnasium's Box2D modules import when they load) make its LunarLander
/// work, and TensorBoard's own event reader finds every metric of a run in the event
/// files `podc train` writes. (Without pygame here, this test passed only when another
/// test had drawn a Gymnasium env, which installs it, first.)
#[test]
fn env_install_adds_packages_box2d_and_tensorboard() {
    if tier::slow("pip installs into podc's Python (network)") {
        return;
    }
    let podc = |args: &[&str], cwd: &Path| {
        let o = Command::new(env!("CARGO_BIN_EXE_podc")).args(args).current_dir(cwd).output().expect("podc starts");
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert!(o.status.success(), "podc {args:?}: {err}");
        (String::from_utf8_lossy(&o.stdout).into_owned(), err)
    };
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (_, err) = podc(&["env", "install", "box2d==2.3.10", "pygame==2.6.1", "tensorboard==2.21.0"], root);
    let python = err.split("podc's Python is ").nth(1).expect("the Python is named").trim().to_string();
    let (out, _) = podc(&["env", "describe", "gymnasium:LunarLander-v3"], root);
    assert!(
        out.contains("extern env LunarLanderV3 { observation: f32[8], action: discrete(4), time_limit: 1000 }"),
        "{out}"
    );

    let dir = tempfile::tempdir().expect("tempdir");
    let run = dir.path().join("run");
    let args = ["train", "examples/catch_a2c.pod", "-q", "--total-steps", "20000", "--seeds", "2"];
    podc(&[&args[..], &["--out", run.to_str().expect("utf-8")]].concat(), root);
    let read = "import sys, json\nfrom tensorboard.backend.event_processing.event_accumulator import EventAccumulator\n\
        ea = EventAccumulator(sys.argv[1]); ea.Reload()\n\
        print(json.dumps({t: [[e.step, e.value] for e in ea.Scalars(t)] for t in ea.Tags()['scalars']}))";
    let o = Command::new(&python).args(["-c", read, run.to_str().expect("utf-8")]).output().expect("python starts");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let scalars: Value = serde_json::from_slice(&o.stdout).expect("JSON");
    let records = podracer::train::metrics::read(&run).expect("metrics");
    for r in &records {
        let (seed, steps) = (r["seed"].as_i64().expect("a seed"), r["env_steps"].as_u64().expect("steps"));
        for (k, v) in r.iter().filter(|(k, v)| !["seed", "env_steps"].contains(&k.as_str()) && v.is_number()) {
            let series = scalars[format!("seed {seed}/{k}")].as_array().unwrap_or_else(|| panic!("no `{k}`"));
            let found =
                series.iter().find(|p| p[0].as_u64() == Some(steps)).unwrap_or_else(|| panic!("{k} at {steps}"));
            let (want, got) = (v.as_f64().expect("a number") as f32, found[1].as_f64().expect("a value") as f32);
            assert_eq!(want, got, "seed {seed} {k} at {steps}");
        }
    }
}
