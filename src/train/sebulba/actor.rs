//! An actor thread: two half-batches of host environments, stepped in turn so that one
//! half steps while the device acts on the other (sample-factory's double buffering), or
//! one batch, writing a rollout of `T` steps for the learner.

use super::policy::{NoPolicy, PolicyStore, Want};
use super::rollout::{Rollout, TrajectoryLayout};
use crate::array::Array;
use crate::host::{self, EnvSpec, HostEnv, StepOut};
use crate::runtime::{Buffer, Client, Executable};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Everything one actor thread needs.
pub struct Actor {
    pub thread: usize,
    /// Env batches: 2 (double-buffered halves) or 1.
    pub buffers: usize,
    pub device: usize,
    pub client: Client,
    /// `(key, policy.., carry.., obs) -> (key, action, behaviour.., carry..)` for half a
    /// batch, on `device`.
    pub act: Arc<Executable>,
    pub uri: String,
    /// Options of one batch (its `num_envs` is the thread's, or half of it).
    pub opts: host::Options,
    /// The first batch's reset seed; the second's is `env_seed + num_envs`.
    pub env_seed: u64,
    pub key: Array,
    /// The agent's env, which the host env must match.
    pub expected: EnvSpec,
    pub layout: TrajectoryLayout,
    /// One environment's carry at the start of an episode (empty without a carry).
    pub initial_carry: Vec<Array>,
    pub policy: Arc<PolicyStore>,
    /// `None`: exactly one version behind; `Some(n)`: the newest, at most `n` behind.
    pub max_lag: Option<u64>,
    /// The version before the first update of this run (nonzero on resume).
    pub start_version: u64,
    pub tx: SyncSender<Result<Rollout, String>>,
    pub stop: Arc<AtomicBool>,
    pub restarts: Arc<AtomicU64>,
    /// Warnings for the user, printed once by the learner (e.g. differing time limits).
    pub notes: Arc<Mutex<Vec<String>>>,
}

struct Half {
    env: Box<dyn HostEnv>,
    out: StepOut,
    /// Environment columns of this half in the thread's rollout.
    env0: usize,
    ret: Vec<f64>,
    len: Vec<u64>,
    /// Each environment's carry: `[envs, ..]` per array of the carry.
    carry: Vec<Array>,
}

impl Actor {
    /// Runs until the learner stops; an error goes to the learner.
    pub fn run(self) {
        if let Err(e) = self.run_inner() {
            // The learner may already be gone; then nobody needs the error.
            let _ = self.tx.send(Err(e));
        }
    }

    fn open(&self) -> Result<Vec<Half>, String> {
        let n = self.opts.num_envs;
        let mut halves = vec![];
        for h in 0..self.buffers {
            let mut env = host::open(&self.uri, &self.opts, Some(&self.client)).map_err(|e| e.to_string())?;
            check_spec(&self.expected, env.spec(), &self.uri)?;
            // An agent's env without a time limit takes the host env's without a note.
            let declared = self.expected.time_limit;
            if h == 0 && self.thread == 0 && declared.is_some() && env.spec().time_limit != declared {
                let note = format!(
                    "`{}` has {}, the agent's env `{}` {}; the host env's is used",
                    self.uri,
                    limit(env.spec().time_limit),
                    self.expected.name,
                    limit(self.expected.time_limit)
                );
                self.notes.lock().unwrap_or_else(|e| e.into_inner()).push(note);
            }
            let mut out = StepOut::new(env.spec(), n);
            env.reset(self.env_seed + (h * n) as u64, &mut out).map_err(|e| e.to_string())?;
            let carry = self.initial_carry.iter().map(|c| c.stacked(n)).collect();
            halves.push(Half { env, out, env0: h * n, ret: vec![0.0; n], len: vec![0; n], carry });
        }
        Ok(halves)
    }

    fn run_inner(&self) -> Result<(), String> {
        let mut halves = self.open()?;
        let mut key = self.client.upload(&self.key, self.device).map_err(|e| e.to_string())?;
        let mut current: Option<(u64, Vec<Buffer>)> = None;
        let mut idle = 0.0;
        for r in 0u64.. {
            if self.stopped() {
                return Ok(());
            }
            // Rollout `r` feeds update `start + r`; by default it acts with the policy one
            // version older (the first rollout with the starting one), as Cleanba does.
            let behind = self.start_version + r.saturating_sub(1);
            let want = match self.max_lag {
                None => Want::Exact(behind),
                Some(n) => Want::AtLeast((self.start_version + r).saturating_sub(n).max(self.start_version)),
            };
            let t0 = Instant::now();
            let (version, policy) = match self.policy.get(want) {
                Ok(got) => got,
                Err(NoPolicy::Stopped) => return Ok(()),
                Err(NoPolicy::Evicted { version, oldest }) => {
                    return Err(format!(
                        "internal error: actor thread {} needs policy version {version}, but the oldest kept is {oldest}",
                        self.thread
                    ));
                }
            };
            idle += t0.elapsed().as_secs_f64();
            if current.as_ref().map(|c| c.0) != Some(version) {
                let bufs = policy.iter().map(|a| self.client.upload(a, self.device)).collect::<Result<Vec<_>, _>>();
                current = Some((version, bufs.map_err(|e| e.to_string())?));
            }
            let params = &current.as_ref().expect("set above").1;
            let mut roll = Rollout::new(&self.layout);
            roll.version = version;
            if let [a, b] = &mut halves[..] {
                // A steps while the device acts on B, and the other way round.
                self.act_send(a, params, &mut key, &mut roll, 0)?;
                for t in 0..self.layout.steps {
                    if self.stopped() {
                        return Ok(());
                    }
                    self.act_send(b, params, &mut key, &mut roll, t)?;
                    self.recv(a, &mut roll, t)?;
                    if t + 1 < self.layout.steps {
                        self.act_send(a, params, &mut key, &mut roll, t + 1)?;
                    }
                    self.recv(b, &mut roll, t)?;
                }
            } else {
                for t in 0..self.layout.steps {
                    if self.stopped() {
                        return Ok(());
                    }
                    self.act_send(&mut halves[0], params, &mut key, &mut roll, t)?;
                    self.recv(&mut halves[0], &mut roll, t)?;
                }
            }
            for h in &halves {
                roll.write(&self.layout, self.layout.array("last_obs"), 0, h.env0, &h.out.obs);
            }
            let total: u64 = halves.iter().map(|h| h.env.restarts()).sum();
            self.restarts.store(total, Ordering::Relaxed);
            roll.idle_s = idle;
            let t0 = Instant::now();
            if self.tx.send(Ok(roll)).is_err() {
                return Ok(()); // the learner is done
            }
            idle = t0.elapsed().as_secs_f64();
        }
        Ok(())
    }

    /// Whether the learner has stopped: checked every env step, so that a long rollout
    /// does not hold up the end of the run.
    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Acts on a half's current observations, records them, and starts its step.
    fn act_send(
        &self,
        h: &mut Half,
        params: &[Buffer],
        key: &mut Buffer,
        roll: &mut Rollout,
        t: usize,
    ) -> Result<(), String> {
        let t0 = Instant::now();
        let l = &self.layout;
        if t == 0 {
            for (a, c) in l.arrays("carry").zip(&h.carry) {
                roll.write(l, a, 0, h.env0, &c.to_bytes());
            }
        }
        let obs = h.out.obs_array(h.env.spec()).map_err(|e| e.to_string())?;
        let upload = |a: &Array| self.client.upload(a, self.device).map_err(|e| e.to_string());
        let carry = h.carry.iter().map(upload).collect::<Result<Vec<_>, _>>()?;
        let obs = upload(&obs)?;
        let mut args: Vec<&Buffer> = vec![key];
        args.extend(params);
        args.extend(&carry);
        args.push(&obs);
        let mut outs = self.act.execute(&args).map_err(|e| e.to_string())?.into_iter();
        *key = outs.next().ok_or("the actor program returned no key")?;
        let mut outs = outs.map(|b| b.download().map_err(|e| e.to_string()));
        let action = outs.next().ok_or("the actor program returned no action")??;
        roll.write(l, l.array("obs"), t, h.env0, &h.out.obs);
        roll.write(l, l.array("action"), t, h.env0, &action.to_bytes());
        for field in l.arrays("behaviour") {
            let b = outs.next().ok_or("the actor program returned too few arrays")??;
            roll.write(l, field, t, h.env0, &b.to_bytes());
        }
        h.carry = outs.collect::<Result<_, _>>()?;
        let sent = h.env.send(&action).map_err(|e| e.to_string());
        roll.acting_s += t0.elapsed().as_secs_f64();
        sent
    }

    /// Finishes a half's step and records what came of it.
    fn recv(&self, h: &mut Half, roll: &mut Rollout, t: usize) -> Result<(), String> {
        let t0 = Instant::now();
        h.env.recv(&mut h.out).map_err(|e| e.to_string())?;
        roll.stepping_s += t0.elapsed().as_secs_f64();
        let (l, o) = (&self.layout, &h.out);
        let reward: Vec<u8> = o.reward.iter().flat_map(|r| r.to_le_bytes()).collect();
        roll.write(l, l.array("reward"), t, h.env0, &reward);
        roll.write(l, l.array("terminated"), t, h.env0, &o.terminated.iter().map(|&b| b as u8).collect::<Vec<_>>());
        roll.write(l, l.array("truncated"), t, h.env0, &o.truncated.iter().map(|&b| b as u8).collect::<Vec<_>>());
        roll.write(l, l.array("final_obs"), t, h.env0, &o.final_obs);
        for i in 0..o.reward.len() {
            h.ret[i] += o.reward[i] as f64;
            h.len[i] += 1;
            if o.done(i) {
                for (c, fresh) in h.carry.iter_mut().zip(&self.initial_carry) {
                    c.set_row(i, fresh);
                }
                roll.episodes.return_sum += h.ret[i];
                roll.episodes.length_sum += h.len[i] as f64;
                roll.episodes.count += 1;
                h.ret[i] = 0.0;
                h.len[i] = 0;
            }
        }
        Ok(())
    }
}

fn limit(t: Option<u64>) -> String {
    t.map_or("no time limit".into(), |n| format!("time limit {n}"))
}

/// The host env must have the agent's observation and actions.
pub fn check_spec(agent: &EnvSpec, host: &EnvSpec, uri: &str) -> Result<(), String> {
    if agent.obs == host.obs && agent.action == host.action {
        return Ok(());
    }
    Err(format!(
        "the host env `{uri}` does not match the agent's env `{}`:\n  the agent's env: {agent}\n  `{uri}`: {host}",
        agent.name
    ))
}
