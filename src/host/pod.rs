//! `pod:FILE.pod`: a `.pod` env compiled (batched with `vmap`) and stepped through PJRT,
//! behind the same [`HostEnv`] interface as the Python envs. No Python is involved; it is
//! the reference the other backends' tests and the Sebulba driver compare against.
//!
//! **Keys.** After `reset(seed)`, with `base = key(seed)` (`jax.random.key(seed)` of the
//! 64-bit seed, `[seed >> 32, seed as u32]`), batch step `t` uses, for env `i`,
//! `split(fold_in(base, t), B)[i]`: `t = 0` for the reset, then `1, 2, …` for each
//! `step` since the reset. Each env's auto-resetting step then splits its key as Anakin's
//! does (the first half steps, the second resets).

use super::{EnvSpec, HostEnv, HostError, StepOut};
use crate::array::{Array, Data};
use crate::driver::{build_env, pick_env};
use crate::lower::stablehlo::lower_module;
use crate::programs::env::host_keys_program;
use crate::runtime::{Buffer, Client, Executable};
use crate::transform::vmap::vmap;
use std::path::Path;

pub struct PodEnv {
    client: Client,
    spec: EnvSpec,
    num_envs: usize,
    /// `(keys: u32[B, 2]) -> (state.., t, obs)`, batched.
    reset: Executable,
    /// `(state.., t, action, keys) -> (state.., t, obs, reward, terminated, truncated, final_obs)`, batched.
    step: Executable,
    /// `(base: u32[2], t: i32) -> u32[B, 2]`: the keys of one batch step.
    keys: Executable,
    /// State leaves of one env, not counting the step counter `t`.
    n_state: usize,
    /// The batch's state and step counters, on the device; empty before the first reset.
    state: Vec<Buffer>,
    base: Option<Buffer>,
    t: i32,
    /// The results of the step in flight (obs, reward, terminated, truncated, final_obs).
    results: Vec<Buffer>,
}

impl PodEnv {
    /// Compiles the env `name` (or the file's only env) of `file` for `num_envs` envs,
    /// loading the file as `load` says.
    pub fn new(
        client: &Client,
        file: &Path,
        name: Option<&str>,
        num_envs: usize,
        load: &crate::driver::LoadOptions,
    ) -> Result<PodEnv, HostError> {
        if num_envs == 0 {
            return Err(HostError::Usage("a host env batch needs at least one env".into()));
        }
        let (spec, n_state, [reset, step, keys]) = programs(file, name, num_envs, load)?;
        let compile = |f: &crate::ir::Func| client.compile(&lower_module(f, 1), 1);
        Ok(PodEnv {
            client: client.clone(),
            spec,
            num_envs,
            reset: compile(&reset)?,
            step: compile(&step)?,
            keys: compile(&keys)?,
            n_state,
            state: vec![],
            base: None,
            t: 0,
            results: vec![],
        })
    }

    /// The keys of batch step `t` for `num_envs` envs, as documented above.
    fn step_keys(&self, t: i32) -> Result<Buffer, HostError> {
        let base = self.base.as_ref().ok_or_else(|| HostError::Usage("step before reset".into()))?;
        let t = self.client.upload(&Array::i32(vec![], vec![t]), 0)?;
        Ok(self.keys.execute(&[base, &t])?.remove(0))
    }
}

/// The env `name` (or the file's only env) of `file`, built, with its spaces.
fn load_env(
    file: &Path,
    name: Option<&str>,
    load: &crate::driver::LoadOptions,
) -> Result<(crate::resolve::Program, crate::elab::env::EnvFuncs, EnvSpec), HostError> {
    let (prog, diags) = crate::driver::check_file_with(file, load).map_err(HostError::Pod)?;
    if !diags.is_empty() {
        return Err(HostError::Pod(crate::diag::render_plain(&prog.map, &diags)));
    }
    let how = format!("`pod:{}?env=NAME`", file.display());
    let name = pick_env(&prog, file, name, &how).map_err(HostError::Pod)?;
    let env = build_env(&prog, &load.overrides, &name)
        .map_err(|d| HostError::Pod(crate::diag::render_plain(&prog.map, &[*d])))?;
    let obs = match env.info.observation.leaves().as_deref() {
        Some([one]) => one.clone(),
        _ => {
            return Err(HostError::Pod(format!(
                "env `{name}` observes `{}`: a host env's observation must be one array",
                env.info.observation
            )));
        }
    };
    let spec =
        EnvSpec { name: env.info.name.clone(), obs, action: env.info.action.clone(), time_limit: env.info.time_limit };
    Ok((prog, env, spec))
}

/// The spaces of the env `name` (or the file's only env) of `file`, the length of its state,
/// and the programs a batch of `num_envs` runs: reset, step and the step keys.
pub fn programs(
    file: &Path,
    name: Option<&str>,
    num_envs: usize,
    load: &crate::driver::LoadOptions,
) -> Result<(EnvSpec, usize, [crate::ir::Func; 3]), HostError> {
    let (prog, env, spec) = load_env(file, name, load)?;
    let reset = vmap(&env.reset, &[true], num_envs);
    let step = vmap(&env.step, &vec![true; env.step.graph.params.len()], num_envs);
    Ok((spec, env.state_len(), [reset, step, host_keys_program(&prog, num_envs)]))
}

/// The spaces of the env `name` (or the file's only env) of `file`, checked and built but not compiled by XLA.
pub fn spec(file: &Path, name: Option<&str>, load: &crate::driver::LoadOptions) -> Result<EnvSpec, HostError> {
    Ok(load_env(file, name, load)?.2)
}

fn download(b: &Buffer) -> Result<Array, HostError> {
    Ok(b.download()?)
}

fn bools(a: &Array) -> Result<&[bool], HostError> {
    match &a.data {
        Data::Bool(v) => Ok(v),
        _ => Err(HostError::Pod(format!("expected a bool array from the env's step, got {}", a.dtype()))),
    }
}

impl HostEnv for PodEnv {
    fn spec(&self) -> &EnvSpec {
        &self.spec
    }

    fn num_envs(&self) -> usize {
        self.num_envs
    }

    fn reset(&mut self, seed: u64, out: &mut StepOut) -> Result<(), HostError> {
        super::check_out(&self.spec, self.num_envs, out)?;
        self.results.clear();
        self.base = Some(self.client.upload(&crate::io::seed_key(seed as i64), 0)?);
        self.t = 0;
        let keys = self.step_keys(0)?;
        let mut outs = self.reset.execute(&[&keys])?;
        let obs = download(&outs[self.n_state + 1])?.to_bytes();
        outs.truncate(self.n_state + 1);
        self.state = outs;
        out.obs.copy_from_slice(&obs);
        out.final_obs.copy_from_slice(&obs);
        out.reward.fill(0.0);
        out.terminated.fill(false);
        out.truncated.fill(false);
        Ok(())
    }

    /// Runs the step on the device; `recv` downloads its results.
    fn send(&mut self, actions: &Array) -> Result<(), HostError> {
        super::check_actions(&self.spec, self.num_envs, actions)?;
        if self.state.is_empty() {
            return Err(HostError::Usage("step before reset".into()));
        }
        if !self.results.is_empty() {
            return Err(HostError::Usage("send while a step is in flight: recv it first".into()));
        }
        let t = self.t.checked_add(1).ok_or_else(|| HostError::Usage("more than 2^31 steps since the reset".into()))?;
        let keys = self.step_keys(t)?;
        let a = self.client.upload(actions, 0)?;
        let mut args: Vec<&Buffer> = self.state.iter().collect();
        args.extend([&a, &keys]);
        let mut outs = self.step.execute(&args)?;
        // outs: state.., t, obs, reward, terminated, truncated, final_obs
        self.results = outs.split_off(self.n_state + 1);
        self.state = outs;
        self.t = t;
        Ok(())
    }

    fn recv(&mut self, out: &mut StepOut) -> Result<(), HostError> {
        super::check_out(&self.spec, self.num_envs, out)?;
        let [obs, reward, terminated, truncated, final_obs] = match std::mem::take(&mut self.results).try_into() {
            Ok(r) => r,
            Err(_) => return Err(HostError::Usage("recv without a step in flight: send first".into())),
        };
        out.obs.copy_from_slice(&download(&obs)?.to_bytes());
        out.final_obs.copy_from_slice(&download(&final_obs)?.to_bytes());
        match download(&reward)?.data {
            Data::F32(v) => out.reward.copy_from_slice(&v),
            _ => return Err(HostError::Pod("the env's reward is not f32".into())),
        }
        out.terminated.copy_from_slice(bools(&download(&terminated)?)?);
        out.truncated.copy_from_slice(bools(&download(&truncated)?)?);
        Ok(())
    }
}
