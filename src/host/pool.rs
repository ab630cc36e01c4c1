//! A batch of Python envs split over worker processes, with the fault model: a worker that
//! dies or hangs is killed, reported with its stderr tail, and replaced; its envs' step is
//! recorded as truncated (final observation: the last one seen), so the batch keeps its
//! shape and no collected data is lost.

use super::uri::EnvUri;
use super::worker::{Fault, Worker, WorkerConfig};
use super::{EnvSpec, HostEnv, HostError, Options, StepOut};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

/// One worker and the envs it holds: `first..first + worker.num_envs` of the batch.
struct Slot {
    worker: Worker,
    first: usize,
}

pub struct WorkerPool {
    uri: EnvUri,
    python: PathBuf,
    script: PathBuf,
    env_import: Vec<String>,
    render: bool,
    spec: EnvSpec,
    /// What the first worker reported of its packages.
    packages: super::Packages,
    num_envs: usize,
    slots: Vec<Slot>,
    step_timeout: Duration,
    max_restarts: u64,
    restarts: u64,
    cancel: Option<Arc<AtomicBool>>,
    seed: u64,
    /// The observations the caller last received, for the final observation of an
    /// interrupted step.
    last_obs: Vec<u8>,
    /// The last fault, in words (also printed on stderr when it happens).
    last_fault: Option<String>,
    /// What the last restarted worker said of its failure and its stderr: a failure that
    /// repeats them exactly, traceback included, is not retried.
    last_failure: Option<(String, String)>,
    /// A step sent and not yet received: its deadline, and the workers that failed
    /// to take it.
    in_flight: Option<(Instant, Vec<(usize, Fault)>)>,
}

impl WorkerPool {
    /// Starts `opts.env_workers` workers (at most one per env) holding `opts.num_envs`
    /// envs between them, as evenly as possible, and checks they agree on the spaces.
    pub fn start(uri: &EnvUri, opts: &Options) -> Result<WorkerPool, HostError> {
        if opts.num_envs == 0 {
            return Err(HostError::Usage("a host env batch needs at least one env".into()));
        }
        let python = match opts.render {
            true => super::python::find_rendering(opts.python.as_deref(), uri.backend)?,
            false => super::python::find(opts.python.as_deref(), uri.backend)?,
        };
        let script = super::python::worker_script()?;
        let n_workers = opts.env_workers.clamp(1, opts.num_envs);
        let mut pool = WorkerPool {
            uri: uri.clone(),
            python,
            script,
            env_import: opts.env_import.clone(),
            render: opts.render,
            spec: EnvSpec {
                name: String::new(),
                obs: crate::array::ArrayTy::scalar(crate::array::DType::F32),
                action: super::ActionSpace::Discrete(1),
                time_limit: None,
            },
            packages: super::Packages::new(),
            num_envs: opts.num_envs,
            slots: vec![],
            step_timeout: opts.step_timeout,
            max_restarts: opts.max_restarts,
            restarts: 0,
            cancel: opts.cancel.clone(),
            seed: 0,
            last_obs: vec![],
            last_fault: None,
            last_failure: None,
            in_flight: None,
        };
        // Launch all, then wait for each: the workers make their envs at the same time.
        let mut first = 0;
        let mut launched = vec![];
        for w in 0..n_workers {
            let n = opts.num_envs / n_workers + usize::from(w < opts.num_envs % n_workers);
            launched.push((Worker::launch(&pool.config(n))?, first));
            first += n;
        }
        for (i, (mut worker, first)) in launched.into_iter().enumerate() {
            worker.handshake(&pool.config(worker.num_envs)).map_err(|e| numbered(e, i))?;
            if i == 0 {
                pool.spec = worker.spec.clone();
                pool.packages = worker.packages.clone();
            } else if worker.spec != pool.spec {
                return Err(HostError::Make {
                    uri: uri.to_string(),
                    message: format!("workers disagree on the spaces: {} vs {}", pool.spec, worker.spec),
                });
            }
            pool.slots.push(Slot { worker, first });
        }
        pool.last_obs = vec![0; pool.spec.obs_bytes() * pool.num_envs];
        Ok(pool)
    }

    fn config(&self, num_envs: usize) -> WorkerConfig<'_> {
        WorkerConfig {
            python: &self.python,
            script: &self.script,
            uri: &self.uri,
            num_envs,
            env_import: &self.env_import,
            // Making an env (imports, EnvPool's threads, ROMs) is slower than a step.
            start_timeout: self.step_timeout.max(Duration::from_secs(60)),
            render: self.render,
            cancel: self.cancel.as_ref(),
        }
    }

    /// The worker processes' ids, in batch order.
    pub fn worker_pids(&self) -> Vec<u32> {
        self.slots.iter().map(|s| s.worker.pid()).collect()
    }

    /// The Python running the workers.
    pub fn python(&self) -> &std::path::Path {
        &self.python
    }

    /// The last worker fault, in words, if there was one.
    pub fn last_fault(&self) -> Option<&str> {
        self.last_fault.as_deref()
    }

    /// Copies slot `i`'s results into the caller's buffers.
    fn collect(&self, i: usize, out: &mut StepOut) {
        let s = &self.slots[i];
        let (lo, n, ob) = (s.first, s.worker.num_envs, self.spec.obs_bytes());
        let (obs, fin) = (s.worker.obs(), s.worker.final_obs());
        out.obs[lo * ob..(lo + n) * ob].copy_from_slice(obs);
        // The worker writes final observations only for the envs whose episode ended
        // (saving Python a copy of every frame); the others' are this step's observations.
        let ended = s.worker.terminated().zip(s.worker.truncated()).map(|(te, tr)| te || tr);
        for (k, ended) in ended.enumerate() {
            let from = if ended { fin } else { obs };
            out.final_obs[(lo + k) * ob..(lo + k + 1) * ob].copy_from_slice(&from[k * ob..(k + 1) * ob]);
        }
        for (d, r) in out.reward[lo..lo + n].iter_mut().zip(s.worker.reward()) {
            *d = r;
        }
        for (d, t) in out.terminated[lo..lo + n].iter_mut().zip(s.worker.terminated()) {
            *d = t;
        }
        for (d, t) in out.truncated[lo..lo + n].iter_mut().zip(s.worker.truncated()) {
            *d = t;
        }
    }

    /// Replaces slot `i`'s failed worker by a fresh one, reset. Each attempt counts
    /// against the bound, so a worker that keeps failing ends in an error, and a failure
    /// exactly like the one before the last restart ends in one at once; with a bound of
    /// 0 any failure is an error. A cancelled wait is no failure and ends in
    /// [`HostError::Cancelled`]. `in_step`: the fault interrupted a step (rather than a
    /// reset), which the caller records.
    fn restart(&mut self, i: usize, fault: Fault, in_step: bool) -> Result<(), HostError> {
        let mut fault = fault;
        loop {
            if matches!(fault, Fault::Cancelled) {
                return Err(HostError::Cancelled);
            }
            let s = &mut self.slots[i];
            let reason = s.worker.describe(&fault);
            let stderr = s.worker.kill_and_tail();
            let (lo, hi) = (s.first, s.first + s.worker.num_envs);
            if self.max_restarts == 0 {
                return Err(HostError::Worker { worker: i, reason, stderr });
            }
            // The same words and the same traceback: the same exception at the same place,
            // which a new worker will meet again. (A kill or a hang leaves no traceback:
            // those are retried up to the bound.)
            let failure = (reason, stderr);
            if !failure.1.trim().is_empty() && self.last_failure.as_ref() == Some(&failure) {
                let reason = format!(
                    "{}, exactly as before its last restart (its stderr is above): a failure that repeats is not retried",
                    failure.0
                );
                return Err(HostError::Worker { worker: i, reason, stderr: String::new() });
            }
            let (reason, stderr) = failure.clone();
            if self.restarts >= self.max_restarts {
                return Err(HostError::TooManyRestarts { restarts: self.restarts, worker: i, reason, stderr });
            }
            self.last_failure = Some(failure);
            self.restarts += 1;
            let report = format!("env worker {i} (envs {lo}..{hi}) failed: {reason}");
            eprintln!(
                "podc: {report}; restarting it ({} of at most {} restarts){}{}",
                self.restarts,
                self.max_restarts,
                if in_step { "; its envs' step is recorded as truncated" } else { "" },
                if stderr.trim().is_empty() {
                    String::new()
                } else {
                    format!("\n  its stderr ended with:\n    {}", stderr.trim_end().replace('\n', "\n    "))
                }
            );
            self.last_fault = Some(report);
            let mut fresh = Worker::spawn(&self.config(hi - lo)).map_err(|e| numbered(e, i))?;
            if fresh.spec != self.spec {
                let message = format!("a restarted worker reports other spaces: {} vs {}", fresh.spec, self.spec);
                return Err(HostError::Make { uri: self.uri.to_string(), message });
            }
            // A seed of its own per restart, so the new episodes differ from the old ones
            // yet a run with the same faults reproduces.
            let seed = self.seed.wrapping_add(self.restarts << 32).wrapping_add(lo as u64);
            let deadline = Instant::now() + self.config(0).start_timeout;
            match fresh.send_reset(seed).and_then(|()| fresh.wait(deadline)) {
                Ok(()) => {
                    self.slots[i].worker = fresh;
                    return Ok(());
                }
                Err(f) => {
                    self.slots[i].worker = fresh;
                    fault = f;
                }
            }
        }
    }
}

/// Puts the worker's index into a start-up error.
fn numbered(e: HostError, i: usize) -> HostError {
    match e {
        HostError::Worker { reason, stderr, .. } => HostError::Worker { worker: i, reason, stderr },
        e => e,
    }
}

impl HostEnv for WorkerPool {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    fn packages(&self) -> super::Packages {
        self.packages.clone()
    }

    fn num_envs(&self) -> usize {
        self.num_envs
    }

    /// Env `k` of the batch is seeded with `seed + k` (Gymnasium's and EnvPool's own
    /// convention for a vector env), whatever the number of workers.
    fn reset(&mut self, seed: u64, out: &mut StepOut) -> Result<(), HostError> {
        super::check_out(&self.spec, self.num_envs, out)?;
        if self.in_flight.is_some() {
            return Err(HostError::Usage("reset while a step is in flight: recv it first".into()));
        }
        self.seed = seed;
        let mut faults = vec![];
        for (i, s) in self.slots.iter_mut().enumerate() {
            if let Err(f) = s.worker.send_reset(seed.wrapping_add(s.first as u64)) {
                faults.push((i, f));
            }
        }
        let deadline = Instant::now() + self.config(0).start_timeout;
        for i in 0..self.slots.len() {
            if faults.iter().any(|(j, _)| *j == i) {
                continue;
            }
            if let Err(f) = self.slots[i].worker.wait(deadline) {
                faults.push((i, f));
            }
        }
        for (i, f) in faults {
            self.restart(i, f, false)?;
        }
        for i in 0..self.slots.len() {
            self.collect(i, out);
        }
        self.last_obs.copy_from_slice(&out.obs);
        Ok(())
    }

    fn send(&mut self, actions: &crate::array::Array) -> Result<(), HostError> {
        super::check_actions(&self.spec, self.num_envs, actions)?;
        if self.in_flight.is_some() {
            return Err(HostError::Usage("send while a step is in flight: recv it first".into()));
        }
        let mut faults = vec![];
        let (bytes, ab) = (actions.to_bytes(), self.spec.action_bytes());
        // Send to all, then wait for each in `recv`: the workers step at the same time.
        for (i, s) in self.slots.iter_mut().enumerate() {
            let n = s.worker.num_envs;
            if let Err(f) = s.worker.send_step(&bytes[s.first * ab..(s.first + n) * ab]) {
                faults.push((i, f));
            }
        }
        self.in_flight = Some((Instant::now() + self.step_timeout, faults));
        Ok(())
    }

    fn recv(&mut self, out: &mut StepOut) -> Result<(), HostError> {
        super::check_out(&self.spec, self.num_envs, out)?;
        let Some((deadline, mut faults)) = self.in_flight.take() else {
            return Err(HostError::Usage("recv without a step in flight: send first".into()));
        };
        for i in 0..self.slots.len() {
            if faults.iter().any(|(j, _)| *j == i) {
                continue;
            }
            match self.slots[i].worker.wait(deadline) {
                Ok(()) => self.collect(i, out),
                Err(f) => faults.push((i, f)),
            }
        }
        let ob = self.spec.obs_bytes();
        for (i, f) in faults {
            self.restart(i, f, true)?;
            let s = &self.slots[i];
            let (lo, hi) = (s.first, s.first + s.worker.num_envs);
            // The interrupted step: truncated, its final observation the last one seen,
            // and the rows continue with the new worker's first observations.
            out.final_obs[lo * ob..hi * ob].copy_from_slice(&self.last_obs[lo * ob..hi * ob]);
            out.obs[lo * ob..hi * ob].copy_from_slice(s.worker.obs());
            out.reward[lo..hi].fill(0.0);
            out.terminated[lo..hi].fill(false);
            out.truncated[lo..hi].fill(true);
        }
        self.last_obs.copy_from_slice(&out.obs);
        Ok(())
    }

    fn restarts(&self) -> u64 {
        self.restarts
    }

    fn frame(&mut self) -> Result<crate::array::Array, HostError> {
        if !self.render {
            return Err(HostError::Usage("frames are drawn only by a batch opened with `render`".into()));
        }
        if self.in_flight.is_some() {
            return Err(HostError::Usage("frame while a step is in flight: recv it first".into()));
        }
        let deadline = Instant::now() + self.step_timeout;
        let w = &mut self.slots[0].worker;
        w.frame(deadline).map_err(|fault| {
            let reason = format!("{} while drawing a frame", w.describe(&fault));
            HostError::Worker { worker: 0, reason, stderr: w.kill_and_tail() }
        })
    }
}

impl Drop for WorkerPool {
    fn drop(&mut self) {
        // Close every socket first so the workers exit together; each Worker's Drop reaps.
        for s in &mut self.slots {
            s.worker.close();
        }
    }
}
