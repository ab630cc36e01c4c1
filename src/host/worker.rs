//! One Python worker process and its side of the protocol (see `worker.py` and
//! `docs/sebulba.md`): a memfd for the data (the worker's stdin), a Unix socket for the
//! handshake (its stdout), its stderr kept as a tail for fault reports.

use super::shm::Shm;
use super::uri::EnvUri;
use super::{ActionSpace, EnvSpec, HostError, Packages};
use crate::array::{Array, ArrayTy, DType};
use serde_json::{Value, json};
use std::io::{ErrorKind, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The worker script, shipped inside podc.
pub const SCRIPT: &str = include_str!("worker.py");

/// Bytes of stderr kept for fault reports.
const TAIL_BYTES: usize = 4096;
/// Lines of that tail shown in a report.
const TAIL_LINES: usize = 20;
/// How often a wait looks at the cancel flag.
const CANCEL_POLL: Duration = Duration::from_millis(50);

/// What one worker is asked to run.
pub struct WorkerConfig<'a> {
    pub python: &'a Path,
    pub script: &'a Path,
    pub uri: &'a EnvUri,
    pub num_envs: usize,
    pub env_import: &'a [String],
    /// How long making the env may take before the worker counts as hung.
    pub start_timeout: Duration,
    /// Whether the worker draws env 0's frames (`F`).
    pub render: bool,
    /// Once set, waits on the worker give up with [`Fault::Cancelled`].
    pub cancel: Option<&'a Arc<AtomicBool>>,
}

/// Where each section lives in the shared memory (64-byte aligned).
#[derive(Clone, Copy, Debug)]
struct ShmLayout {
    actions: usize,
    obs: usize,
    final_obs: usize,
    reward: usize,
    terminated: usize,
    truncated: usize,
    seed: usize,
    size: usize,
}

impl ShmLayout {
    fn new(n: usize, obs_bytes: usize, action_bytes: usize) -> ShmLayout {
        let mut at = 0;
        let mut section = |bytes: usize| {
            let start = at;
            at = (at + bytes).div_ceil(64) * 64;
            start
        };
        let actions = section(action_bytes * n);
        let obs = section(obs_bytes * n);
        let final_obs = section(obs_bytes * n);
        let reward = section(4 * n);
        let terminated = section(n);
        let truncated = section(n);
        let seed = section(8);
        ShmLayout { actions, obs, final_obs, reward, terminated, truncated, seed, size: at }
    }

    fn json(&self) -> Value {
        json!({"size": self.size, "actions": self.actions, "obs": self.obs, "final_obs": self.final_obs,
               "reward": self.reward, "terminated": self.terminated, "truncated": self.truncated, "seed": self.seed})
    }
}

/// Why a worker stopped answering.
#[derive(Debug)]
pub enum Fault {
    /// End of file or a broken socket: it died (killed, or an exception).
    Died,
    /// No answer before the deadline.
    Hung,
    /// It answered something else than the protocol says.
    Protocol(String),
    /// The caller's cancel flag was set while waiting: not the worker's fault.
    Cancelled,
}

pub struct Worker {
    child: Child,
    chan: UnixStream,
    shm: Shm,
    layout: ShmLayout,
    pub spec: EnvSpec,
    /// The versions the worker reported (see [`Packages`]).
    pub packages: Packages,
    pub num_envs: usize,
    stderr: Arc<Mutex<Vec<u8>>>,
    stderr_reader: Option<JoinHandle<()>>,
    /// The command sent and not yet answered. While there is one the worker may be
    /// writing the shared memory, so podc neither reads nor writes it: a command whose
    /// answer did not come stays pending until the worker is killed and reaped.
    pending: Option<u8>,
    cancel: Option<Arc<AtomicBool>>,
}

impl Worker {
    /// Starts a worker and waits for its spaces.
    pub fn spawn(cfg: &WorkerConfig) -> Result<Worker, HostError> {
        let mut w = Worker::launch(cfg)?;
        w.handshake(cfg)?;
        Ok(w)
    }

    /// Starts the process only, so that several workers make their envs at once.
    ///
    /// The worker dies with the *thread* that launches it (`PR_SET_PDEATHSIG` follows the
    /// thread), so launch from the thread that owns the pool for its whole life.
    pub fn launch(cfg: &WorkerConfig) -> Result<Worker, HostError> {
        let io = |what: &str, e: std::io::Error| HostError::Io(format!("cannot start an env worker: {what}: {e}"));
        let shm = Shm::create("podracer-env").map_err(|e| io("memfd_create", e))?;
        let (chan, theirs) = UnixStream::pair().map_err(|e| io("socketpair", e))?;
        let config = json!({
            "backend": cfg.uri.backend.scheme(),
            "id": cfg.uri.id,
            "kwargs": cfg.uri.kwargs_json(),
            "num_envs": cfg.num_envs,
            "env_import": cfg.env_import,
            "ppid": std::process::id(),
            "render": cfg.render,
        });
        let mut cmd = Command::new(cfg.python);
        cmd.arg(cfg.script)
            .arg(config.to_string())
            .stdin(Stdio::from(shm.fd().map_err(|e| io("dup", e))?))
            .stdout(Stdio::from(OwnedFd::from(theirs)))
            .stderr(Stdio::piped())
            // Its own process group: a Ctrl-C at the terminal reaches podc only, which
            // then takes its workers down (no tracebacks from every worker).
            .process_group(0);
        let mut child = cmd.spawn().map_err(|e| match e.kind() {
            ErrorKind::NotFound => HostError::Python {
                reason: format!("Python `{}` was not found", cfg.python.display()),
                fix: "pass --python PATH, or set PODC_PYTHON".into(),
            },
            _ => io(&format!("running {}", cfg.python.display()), e),
        })?;
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let stderr_reader = child.stderr.take().map(|mut pipe| {
            let tail = Arc::clone(&stderr);
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = pipe.read(&mut buf) {
                    let mut t = tail.lock().unwrap_or_else(|p| p.into_inner());
                    t.extend_from_slice(&buf[..n]);
                    if t.len() > 2 * TAIL_BYTES {
                        let cut = t.len() - TAIL_BYTES;
                        t.drain(..cut);
                    }
                }
            })
        });
        let placeholder = EnvSpec {
            name: String::new(),
            obs: ArrayTy::scalar(DType::F32),
            action: ActionSpace::Discrete(1),
            time_limit: None,
        };
        Ok(Worker {
            child,
            chan,
            shm,
            layout: ShmLayout::new(0, 0, 0),
            spec: placeholder,
            packages: Packages::new(),
            num_envs: cfg.num_envs,
            stderr,
            stderr_reader,
            pending: None,
            cancel: cfg.cancel.cloned(),
        })
    }

    /// Reads the worker's spaces and shares the memory sized for them.
    pub fn handshake(&mut self, cfg: &WorkerConfig) -> Result<(), HostError> {
        let io = |what: &str, e: std::io::Error| HostError::Io(format!("cannot start an env worker: {what}: {e}"));
        let line = match self.read_line(Instant::now() + cfg.start_timeout) {
            Ok(l) => l,
            Err(Fault::Cancelled) => return Err(HostError::Cancelled),
            Err(fault) => {
                let reason = format!("{} before reporting its spaces", self.describe(&fault));
                let stderr = self.kill_and_tail();
                return Err(HostError::Worker { worker: 0, reason, stderr });
            }
        };
        let report: Value = serde_json::from_str(&line)
            .map_err(|e| HostError::Io(format!("an env worker's start-up report is not JSON ({e}): {line}")))?;
        if let Some(kind) = report.get("error").and_then(Value::as_str) {
            let message = report.get("message").and_then(Value::as_str).unwrap_or("").to_string();
            return Err(match kind {
                "missing_module" => {
                    let module = report.get("module").and_then(Value::as_str).unwrap_or("?").to_string();
                    super::python::missing_package(cfg.python, &module, cfg.uri.backend)
                }
                _ => HostError::Make { uri: cfg.uri.to_string(), message },
            });
        }
        self.spec = parse_spec(&report, cfg.uri)?;
        self.packages = report
            .get("packages")
            .and_then(Value::as_object)
            .map(|m| m.iter().filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string()))).collect())
            .unwrap_or_default();
        self.layout = ShmLayout::new(cfg.num_envs, self.spec.obs_bytes(), self.spec.action_bytes());
        self.shm.map(self.layout.size).map_err(|e| io("mapping the shared memory", e))?;
        let mut line = self.layout.json().to_string();
        line.push('\n');
        if let Err(e) = self.chan.write_all(line.as_bytes()) {
            let stderr = self.kill_and_tail();
            return Err(HostError::Worker {
                worker: 0,
                reason: format!("the worker went away at start-up: {e}"),
                stderr,
            });
        }
        Ok(())
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `R` (reset with `seed`) without waiting.
    pub fn send_reset(&mut self, seed: u64) -> Result<(), Fault> {
        let at = self.layout.seed;
        self.shared_mut()?[at..at + 8].copy_from_slice(&seed.to_le_bytes());
        self.send(b'R')
    }

    /// Writes the actions (raw little-endian bytes, one row per env) and sends `S`
    /// without waiting.
    pub fn send_step(&mut self, actions: &[u8]) -> Result<(), Fault> {
        let at = self.layout.actions;
        self.shared_mut()?[at..at + actions.len()].copy_from_slice(actions);
        self.send(b'S')
    }

    /// An error while a command is pending (the worker may be writing the shared memory).
    fn idle(&self) -> Result<(), Fault> {
        match self.pending {
            Some(cmd) => Err(Fault::Protocol(format!("{:?} is still pending", cmd as char))),
            None => Ok(()),
        }
    }

    /// The shared memory to write a command's input into, when no command is pending.
    fn shared_mut(&mut self) -> Result<&mut [u8], Fault> {
        self.idle()?;
        Ok(self.shm.bytes_mut())
    }

    fn send(&mut self, cmd: u8) -> Result<(), Fault> {
        self.idle()?;
        self.chan.write_all(&[cmd]).map_err(|_| Fault::Died)?;
        self.pending = Some(cmd);
        Ok(())
    }

    /// Waits for the answer to the pending command until `deadline`.
    pub fn wait(&mut self, deadline: Instant) -> Result<(), Fault> {
        let Some(cmd) = self.pending else {
            return Err(Fault::Protocol("no command is pending".into()));
        };
        let mut b = [0u8];
        self.read_exact_until(&mut b, deadline)?;
        if b[0] != cmd.to_ascii_lowercase() {
            return Err(Fault::Protocol(format!("answered {:?} to {:?}", b[0] as char, cmd as char)));
        }
        self.pending = None;
        Ok(())
    }

    fn read_exact_until(&mut self, buf: &mut [u8], deadline: Instant) -> Result<(), Fault> {
        let mut got = 0;
        while got < buf.len() {
            if self.cancel.as_ref().is_some_and(|c| c.load(Ordering::Relaxed)) {
                return Err(Fault::Cancelled);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(Fault::Hung);
            }
            // Short reads, so that a cancel is seen while the worker is silent. A zero
            // timeout would mean "block forever"; `left` is positive here.
            let slice = if self.cancel.is_some() { left.min(CANCEL_POLL) } else { left };
            self.chan.set_read_timeout(Some(slice)).map_err(|e| Fault::Protocol(e.to_string()))?;
            match self.chan.read(&mut buf[got..]) {
                Ok(0) => return Err(Fault::Died),
                Ok(n) => got += n,
                // The slice ran out; the loop sees whether the deadline did.
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => return Err(Fault::Died),
            }
        }
        Ok(())
    }

    fn read_line(&mut self, deadline: Instant) -> Result<String, Fault> {
        let mut line = vec![];
        let mut b = [0u8];
        while b[0] != b'\n' {
            self.read_exact_until(&mut b, deadline)?;
            line.push(b[0]);
        }
        String::from_utf8(line).map_err(|_| Fault::Protocol("a report that is not UTF-8".into()))
    }

    /// Env 0's frame (`F`): a JSON line with its shape, then its bytes.
    pub fn frame(&mut self, deadline: Instant) -> Result<Array, Fault> {
        self.send(b'F')?;
        self.wait(deadline)?;
        let line = self.read_line(deadline)?;
        let shape: Option<Vec<usize>> = serde_json::from_str::<Value>(&line)
            .ok()
            .and_then(|v| v.get("shape")?.as_array()?.iter().map(|d| d.as_u64().map(|d| d as usize)).collect());
        let Some(shape @ [_, _, 3]) = shape.as_deref() else {
            return Err(Fault::Protocol(format!("a frame's header is not `{{\"shape\": [H, W, 3]}}`: {line}")));
        };
        let ty = ArrayTy::new(DType::U8, shape.to_vec());
        let mut bytes = vec![0; ty.numel()];
        self.read_exact_until(&mut bytes, deadline)?;
        Ok(Array::from_bytes(&ty, &bytes).expect("H * W * 3 bytes"))
    }

    pub fn obs(&self) -> &[u8] {
        self.section(self.layout.obs, self.spec.obs_bytes() * self.num_envs)
    }

    pub fn final_obs(&self) -> &[u8] {
        self.section(self.layout.final_obs, self.spec.obs_bytes() * self.num_envs)
    }

    pub fn reward(&self) -> impl Iterator<Item = f32> + '_ {
        let b = self.section(self.layout.reward, 4 * self.num_envs);
        b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
    }

    pub fn terminated(&self) -> impl Iterator<Item = bool> + '_ {
        self.section(self.layout.terminated, self.num_envs).iter().map(|&b| b != 0)
    }

    pub fn truncated(&self) -> impl Iterator<Item = bool> + '_ {
        self.section(self.layout.truncated, self.num_envs).iter().map(|&b| b != 0)
    }

    /// Part of the shared memory, which the last command's answer wrote. Reading it while
    /// a command is pending is a bug of the caller (the worker may be writing).
    fn section(&self, at: usize, len: usize) -> &[u8] {
        assert!(self.pending.is_none(), "the worker's output read while a command is pending");
        &self.shm.bytes()[at..at + len]
    }

    /// A fault in words, with the exit status when the worker has exited.
    pub fn describe(&mut self, fault: &Fault) -> String {
        match fault {
            Fault::Died => {
                // The socket closes a moment before the process is reaped.
                let deadline = Instant::now() + Duration::from_millis(500);
                loop {
                    match self.child.try_wait() {
                        Ok(Some(status)) => return format!("the worker exited ({})", status_text(status)),
                        Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
                        _ => return "the worker closed its socket".into(),
                    }
                }
            }
            Fault::Hung => "the worker did not answer before the step deadline (hung); it was killed".into(),
            Fault::Protocol(p) => format!("protocol error: {p}"),
            Fault::Cancelled => "the wait for the worker was cancelled".into(),
        }
    }

    /// Kills the worker (if it still runs), reaps it, and returns the tail of its stderr.
    pub fn kill_and_tail(&mut self) -> String {
        let _ = self.child.kill();
        if self.child.wait().is_ok() {
            // Reaped: nothing writes the shared memory any more.
            self.pending = None;
        }
        // The pipe closes with the process; a grandchild holding it open must not hang us.
        if let Some(h) = self.stderr_reader.take() {
            let deadline = Instant::now() + Duration::from_millis(500);
            while !h.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            if h.is_finished() {
                let _ = h.join();
            }
        }
        let t = self.stderr.lock().unwrap_or_else(|p| p.into_inner());
        let text = String::from_utf8_lossy(&t);
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(TAIL_LINES)..].join("\n")
    }

    /// Closes the socket: the worker exits at end of file.
    pub fn close(&mut self) {
        let _ = self.chan.shutdown(std::net::Shutdown::Both);
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.close();
        let deadline = Instant::now() + Duration::from_millis(1000);
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn status_text(status: std::process::ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(9)) => "killed by SIGKILL".into(),
        (None, Some(s)) => format!("killed by signal {s}"),
        _ => status.to_string(),
    }
}

/// The spaces from a worker's start-up report.
fn parse_spec(v: &Value, uri: &EnvUri) -> Result<EnvSpec, HostError> {
    let bad = |what: &str| HostError::Io(format!("an env worker's start-up report has no valid `{what}`: {v}"));
    let dtype =
        v.get("obs_dtype").and_then(Value::as_str).and_then(DType::from_name).ok_or_else(|| bad("obs_dtype"))?;
    let shape = v
        .get("obs_shape")
        .and_then(Value::as_array)
        .and_then(|a| a.iter().map(|d| d.as_u64().map(|d| d as usize)).collect::<Option<Vec<_>>>())
        .ok_or_else(|| bad("obs_shape"))?;
    let action = parse_action(v.get("action").ok_or_else(|| bad("action"))?).ok_or_else(|| bad("action"))?;
    let time_limit = match v.get("time_limit") {
        None | Some(Value::Null) => None,
        Some(t) => Some(t.as_u64().filter(|&t| t > 0).ok_or_else(|| bad("time_limit"))?),
    };
    let name = super::describe::env_name(uri.backend, &uri.id);
    Ok(EnvSpec { name, obs: ArrayTy::new(dtype, shape), action, time_limit })
}

/// `{"discrete": n}`, or `{"box": n}` with `"low"` and `"high"` lists when bounded.
fn parse_action(v: &Value) -> Option<ActionSpace> {
    let floats = |k: &str, n: u64| -> Option<Vec<f32>> {
        let xs: Vec<f32> = v.get(k)?.as_array()?.iter().map(|x| x.as_f64().map(|x| x as f32)).collect::<Option<_>>()?;
        (xs.len() as u64 == n).then_some(xs)
    };
    if let Some(n) = v.get("discrete").and_then(Value::as_u64).filter(|&n| n > 0) {
        return Some(ActionSpace::Discrete(n));
    }
    let n = v.get("box").and_then(Value::as_u64).filter(|&n| n > 0)?;
    let bounds = match (v.get("low"), v.get("high")) {
        (None, None) => None,
        _ => Some((floats("low", n)?, floats("high", n)?)),
    };
    Some(ActionSpace::Box { n, bounds })
}
