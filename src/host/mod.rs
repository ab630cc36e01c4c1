//! Host environments: batches of environments stepped on the CPU, outside the device
//! program, for Sebulba.
//!
//! Every backend implements [`HostEnv`]: a fixed batch of environments with **same-step
//! auto-reset**, writing each step into buffers the caller owns ([`StepOut`]), in exactly
//! the layout of Anakin's trajectory: when an episode ends, `final_obs` holds its last
//! observation and the `obs` row is already the next episode's first; `terminated` (the
//! task ended) and `truncated` (a time limit, or an interrupted step) stay distinct.
//!
//! Backends, chosen by a URI ([`EnvUri`]):
//! - `gymnasium:ID?k=v&...`, `envpool:ID?...` and `ale:GAME?...` (Atari, [`atari`]):
//!   Python envs in worker processes ([`pool::WorkerPool`]), data in shared memory, one
//!   byte on a socket per step;
//! - `pod:FILE.pod`: a `.pod` env compiled and stepped through PJRT ([`pod::PodEnv`]).
//!
//! [`open`] builds the backend for a URI; `docs/sebulba.md` describes the protocol and
//! the fault model.

pub mod atari;
pub mod describe;
pub mod pod;
pub mod pool;
pub mod python;
mod shm;
pub mod uri;
pub mod worker;

pub use uri::{Backend, EnvUri, KwValue};

use crate::array::{Array, ArrayTy, Data};
use crate::runtime::Client;
pub use crate::space::ActionSpace;
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

/// Versions by name, as an env worker reports them: Python's (`python`) and those of the
/// packages that decide a host env's numbers (`gymnasium`, `numpy`, `envpool`, ...).
pub type Packages = std::collections::BTreeMap<String, String>;

/// What a host env is: the spaces an agent is checked against.
#[derive(Clone, Debug, PartialEq)]
pub struct EnvSpec {
    /// A name for messages and `extern env` blocks, e.g. `CartPoleV1`.
    pub name: String,
    /// One environment's observation.
    pub obs: ArrayTy,
    /// One environment's action: `discrete(n)` (`0..n`) or `box(n, ..)`.
    pub action: ActionSpace,
    /// Steps after which an episode is truncated, if the env has a limit.
    pub time_limit: Option<u64>,
}

impl EnvSpec {
    /// Bytes of one environment's observation.
    pub fn obs_bytes(&self) -> usize {
        self.obs.numel() * self.obs.dtype.size()
    }

    /// Bytes of one environment's action.
    pub fn action_bytes(&self) -> usize {
        let t = self.action.array_ty();
        t.numel() * t.dtype.size()
    }
}

impl fmt::Display for EnvSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "observation: {}, action: {}", describe::type_text(&self.obs), self.action)?;
        match self.time_limit {
            Some(n) => write!(f, ", time_limit: {n}"),
            None => write!(f, ", no time limit"),
        }
    }
}

/// One batch step's results, in buffers the caller owns and reuses.
///
/// Observations are raw little-endian bytes of the spec's dtype (as the device stores
/// them), `num_envs` rows of [`EnvSpec::obs_bytes`] each.
#[derive(Clone, Debug, PartialEq)]
pub struct StepOut {
    pub obs: Vec<u8>,
    pub reward: Vec<f32>,
    pub terminated: Vec<bool>,
    pub truncated: Vec<bool>,
    /// The observation each env's step reached, before any reset: for an env whose
    /// episode ended it is the episode's last observation; otherwise it equals `obs`.
    pub final_obs: Vec<u8>,
}

impl StepOut {
    /// Zeroed buffers for `num_envs` environments of `spec`.
    pub fn new(spec: &EnvSpec, num_envs: usize) -> StepOut {
        let n = spec.obs_bytes() * num_envs;
        StepOut {
            obs: vec![0; n],
            reward: vec![0.0; num_envs],
            terminated: vec![false; num_envs],
            truncated: vec![false; num_envs],
            final_obs: vec![0; n],
        }
    }

    /// The observations as an array `[num_envs, ..obs shape]`.
    pub fn obs_array(&self, spec: &EnvSpec) -> Result<Array, HostError> {
        batch_array(spec, &self.obs)
    }

    /// The final observations as an array `[num_envs, ..obs shape]`.
    pub fn final_obs_array(&self, spec: &EnvSpec) -> Result<Array, HostError> {
        batch_array(spec, &self.final_obs)
    }

    /// Whether env `i`'s episode ended this step.
    pub fn done(&self, i: usize) -> bool {
        self.terminated[i] || self.truncated[i]
    }
}

fn batch_array(spec: &EnvSpec, bytes: &[u8]) -> Result<Array, HostError> {
    let n = bytes.len() / spec.obs_bytes().max(1);
    let mut shape = vec![n];
    shape.extend(&spec.obs.shape);
    let ty = ArrayTy::new(spec.obs.dtype, shape);
    Array::from_bytes(&ty, bytes)
        .ok_or_else(|| HostError::Usage(format!("{} bytes are not whole observations of {spec}", bytes.len())))
}

/// A batch of environments on the host with same-step auto-reset.
pub trait HostEnv: Send {
    /// The spaces of one environment.
    fn spec(&self) -> &EnvSpec;

    /// The versions of what steps the envs, for Python backends (none for `pod:` envs,
    /// whose programs a run's fingerprint hashes instead).
    fn packages(&self) -> Packages {
        Packages::new()
    }

    /// How many environments the batch holds.
    fn num_envs(&self) -> usize;

    /// Starts every environment's first episode; writes the first observations into
    /// `out.obs` (and `out.final_obs`) and clears the other fields. The same seed gives
    /// the same episodes (see each backend for how the seed spreads over the envs).
    fn reset(&mut self, seed: u64, out: &mut StepOut) -> Result<(), HostError>;

    /// Steps every environment with its action, auto-resetting those whose episode ends.
    /// `actions` is `[num_envs, ..]` of the spec's action type: `i32[num_envs]` each in
    /// `0..n` for `discrete(n)`, `f32[num_envs, n]` for `box(n)` (bounds are the env's to
    /// enforce).
    fn step(&mut self, actions: &Array, out: &mut StepOut) -> Result<(), HostError> {
        self.send(actions)?;
        self.recv(out)
    }

    /// Starts a step and returns without waiting for it, so that the caller can work
    /// (e.g. act on another batch) while the envs step. Finish it with [`HostEnv::recv`].
    fn send(&mut self, actions: &Array) -> Result<(), HostError>;

    /// Waits for the step [`HostEnv::send`] started and writes its results.
    fn recv(&mut self, out: &mut StepOut) -> Result<(), HostError>;

    /// Workers restarted after a fault so far (always 0 for backends without workers).
    fn restarts(&self) -> u64 {
        0
    }

    /// Env 0's frame, `u8[H, W, 3]` RGB, where the last reset or step left it (a step's
    /// before its auto-reset, so that an episode's last state is drawn). Only a batch
    /// opened with [`Options::render`] draws (`podc play`).
    fn frame(&mut self) -> Result<Array, HostError> {
        Err(HostError::Usage(format!("`{}` envs are not drawn on the host", self.spec().name)))
    }
}

/// Checks a step's actions against the batch, so that no backend indexes out of bounds.
pub(crate) fn check_actions(spec: &EnvSpec, num_envs: usize, actions: &Array) -> Result<(), HostError> {
    let one = spec.action.array_ty();
    let want = ArrayTy::new(one.dtype, std::iter::once(num_envs).chain(one.shape).collect());
    if actions.ty() != want {
        let (found, want) = (describe::type_text(&actions.ty()), describe::type_text(&want));
        return Err(HostError::Usage(format!(
            "actions `{found}` for a batch of {num_envs} envs of `{}`: expected `{want}`",
            spec.action
        )));
    }
    if let (ActionSpace::Discrete(n), Data::I32(v)) = (&spec.action, &actions.data)
        && let Some(a) = v.iter().find(|&&a| a < 0 || a as u64 >= *n)
    {
        return Err(HostError::Usage(format!("action {a} is outside `discrete({n})`")));
    }
    Ok(())
}

pub(crate) fn check_out(spec: &EnvSpec, num_envs: usize, out: &StepOut) -> Result<(), HostError> {
    let n = spec.obs_bytes() * num_envs;
    let ok = out.obs.len() == n
        && out.final_obs.len() == n
        && out.reward.len() == num_envs
        && out.terminated.len() == num_envs
        && out.truncated.len() == num_envs;
    if ok {
        Ok(())
    } else {
        Err(HostError::Usage(format!("the StepOut buffers are not sized for {num_envs} envs of {spec}")))
    }
}

/// How to run a host env.
#[derive(Clone, Debug)]
pub struct Options {
    pub num_envs: usize,
    /// Worker processes the envs are split over (Python backends).
    pub env_workers: usize,
    /// The Python to run workers with (else `PODC_PYTHON`, `$VIRTUAL_ENV`, the cache venv).
    pub python: Option<PathBuf>,
    /// Modules a worker imports before making its envs (e.g. to register them).
    pub env_import: Vec<String>,
    /// A worker that takes longer than this for one step is killed and restarted.
    pub step_timeout: Duration,
    /// Worker restarts allowed over the batch's life; one more is an error.
    pub max_restarts: u64,
    /// The PJRT plugin for `pod:` envs (else the usual discovery of the backend's).
    pub plugin: Option<PathBuf>,
    /// The backend and client options of the client opened for `pod:` envs.
    pub client: crate::runtime::ClientOptions,
    /// How a `pod:` env's file is loaded: `--lib` directories, and `--set` values when it
    /// is the run's root file.
    pub load: crate::driver::LoadOptions,
    /// Draw env 0's frames ([`HostEnv::frame`]): Gymnasium envs are made with
    /// `render_mode="rgb_array"`; a backend or env that cannot draw fails to start.
    pub render: bool,
    /// Once set, a wait on a worker (start-up, reset, step) ends at once with
    /// [`HostError::Cancelled`] instead of at its deadline, so that a run that stops is not
    /// held up by a hung worker.
    pub cancel: Option<Arc<AtomicBool>>,
}

impl Options {
    pub fn new(num_envs: usize) -> Options {
        Options {
            num_envs,
            env_workers: 1,
            python: None,
            env_import: vec![],
            step_timeout: Duration::from_secs(60),
            max_restarts: 10,
            plugin: None,
            client: crate::runtime::ClientOptions::default(),
            load: crate::driver::LoadOptions::default(),
            render: false,
            cancel: None,
        }
    }
}

/// Opens the host env a URI names. `client` runs `pod:` envs; when it is `None` a client
/// is opened for them from `opts.plugin`.
pub fn open(uri: &str, opts: &Options, client: Option<&Client>) -> Result<Box<dyn HostEnv>, HostError> {
    let uri = EnvUri::parse(uri)?;
    match uri.backend {
        Backend::Gymnasium | Backend::EnvPool | Backend::Ale => Ok(Box::new(pool::WorkerPool::start(&uri, opts)?)),
        Backend::Pod => {
            let (file, env_name) = pod_target(&uri)?;
            let owned;
            let client = match client {
                Some(c) => c,
                None => {
                    owned = crate::runtime::Runtime::open_with(opts.plugin.as_deref(), &opts.client)?;
                    &owned
                }
            };
            Ok(Box::new(pod::PodEnv::new(client, &file, env_name.as_deref(), opts.num_envs, &opts.load)?))
        }
    }
}

/// The programs that run a `pod:` URI's env for batches of `opts.num_envs` (reset, step
/// and the step keys, see [`pod::programs`]); `None` for the other backends.
pub fn pod_programs(uri: &str, opts: &Options) -> Result<Option<[crate::ir::Func; 3]>, HostError> {
    let parsed = EnvUri::parse(uri)?;
    if parsed.backend != Backend::Pod {
        return Ok(None);
    }
    let (file, env_name) = pod_target(&parsed)?;
    Ok(Some(pod::programs(&file, env_name.as_deref(), opts.num_envs, &opts.load)?.2))
}

/// A `pod:` URI's file and `?env=NAME`.
fn pod_target(uri: &EnvUri) -> Result<(PathBuf, Option<String>), HostError> {
    let mut env_name = None;
    for (k, v) in &uri.kwargs {
        match (k.as_str(), v) {
            ("env", KwValue::Str(name)) => env_name = Some(name.clone()),
            _ => return Err(HostError::Uri(format!("`{uri}`: `pod:` URIs take only `?env=NAME`"))),
        }
    }
    Ok((PathBuf::from(&uri.id), env_name))
}

/// The spaces of the env a URI names and its worker's packages, without keeping it (`podc
/// env describe`); a `pod:` env's are its declared ones, and XLA does not compile it.
pub fn describe_uri(uri: &str, opts: &Options) -> Result<(EnvSpec, Packages), HostError> {
    let parsed = EnvUri::parse(uri)?;
    if parsed.backend == Backend::Pod {
        let (file, env_name) = pod_target(&parsed)?;
        return Ok((pod::spec(&file, env_name.as_deref(), &opts.load)?, Packages::new()));
    }
    let mut one = opts.clone();
    one.num_envs = 1;
    one.env_workers = 1;
    let env = open(uri, &one, None)?;
    Ok((env.spec().clone(), env.packages()))
}

/// Everything that can go wrong with host envs. None is a panic.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("bad env URI: {0}")]
    Uri(String),
    #[error("{0}")]
    Usage(String),
    /// No usable Python, or the cache venv could not be made; `fix` says what to do.
    #[error("{reason}\n  {fix}")]
    Python { reason: String, fix: String },
    /// The named Python lacks a package a backend needs.
    #[error("{python} cannot import `{module}` (needed by `{backend}:` envs)\n  to install it, run: {command}")]
    MissingPackage { python: String, module: String, backend: String, command: String },
    /// The env could not be made (a bad ID, bad keyword arguments, an unsupported space).
    #[error("cannot make `{uri}`: {message}")]
    Make { uri: String, message: String },
    /// A worker failed and could not be replaced.
    #[error("env worker {worker} failed: {reason}{}", tail(stderr))]
    Worker { worker: usize, reason: String, stderr: String },
    /// Workers failed more often than allowed.
    #[error(
        "env workers were restarted {restarts} times, the most allowed; the last failure (worker {worker}): {reason}{}",
        tail(stderr)
    )]
    TooManyRestarts { restarts: u64, worker: usize, reason: String, stderr: String },
    /// A `pod:` env did not compile; the rendered diagnostics.
    #[error("{0}")]
    Pod(String),
    #[error(transparent)]
    Runtime(#[from] crate::runtime::RuntimeError),
    #[error("{0}")]
    Io(String),
    /// [`Options::cancel`] was set while waiting for a worker.
    #[error("cancelled while waiting for an env worker")]
    Cancelled,
}

fn tail(stderr: &str) -> String {
    if stderr.trim().is_empty() {
        String::new()
    } else {
        let lines: Vec<&str> = stderr.trim_end().lines().collect();
        format!("\n  the worker's stderr ended with:\n    {}", lines.join("\n    "))
    }
}
