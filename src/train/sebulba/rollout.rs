//! A rollout on the host: an actor thread's `[T, B, ..]` trajectory, and joining the
//! threads' rollouts into each learner device's share.
//!
//! The trajectory is kept on the host because every row passes through it anyway: the
//! observations come from the host envs and the actions go back to them. The learner
//! uploads each device's share once per update.

use crate::array::DType;
use crate::types::{Dim, StructDef, Ty};
use std::ops::Range;

/// One thread's rollout: the arrays of `Trajectory<T, B>` in its order (each field's
/// arrays, as the learner program takes them), as its definition gives them.
#[derive(Clone, Debug)]
pub struct TrajectoryLayout {
    pub steps: usize,
    /// Environments of one actor thread.
    pub envs: usize,
    /// Each array's field (`obs`, `behaviour`, `carry`, ..).
    field: Vec<String>,
    /// Bytes of one environment's entry in each array.
    pub elem: Vec<usize>,
    /// Whether each array has a row per step (`[T, B, ..]`), else one (`[B, ..]`:
    /// `last_obs`, the carry at the rollout's start).
    per_step: Vec<bool>,
}

impl TrajectoryLayout {
    pub fn new(def: &StructDef, steps: usize, envs: usize) -> TrajectoryLayout {
        let (t, b) = (Dim::Param("T".into()), Dim::Param("B".into()));
        let mut layout = TrajectoryLayout { steps, envs, field: vec![], elem: vec![], per_step: vec![] };
        for (name, ty) in Ty::struct_fields(def, &[t.clone(), b.clone()]) {
            for (dtype, dims) in arrays(&ty) {
                let per_step = dims.first() == Some(&t);
                let entry = &dims[1 + usize::from(per_step)..];
                let n: u64 = entry.iter().map(|d| if let Dim::Known(n) = d { *n } else { 1 }).product();
                assert!(dims.get(usize::from(per_step)) == Some(&b), "a trajectory array is batched over `B`");
                layout.field.push(name.clone());
                layout.elem.push(n as usize * dtype.size());
                layout.per_step.push(per_step);
            }
        }
        layout
    }

    /// The array of a field that is one array (`obs`, `reward`, ..).
    pub fn array(&self, field: &str) -> usize {
        self.field.iter().position(|f| f == field).unwrap_or_else(|| panic!("`Trajectory` has a field `{field}`"))
    }

    /// The arrays of a field of records (`behaviour`, `carry`): none when it is absent.
    pub fn arrays(&self, field: &str) -> Range<usize> {
        let first = self.field.iter().position(|f| f == field).unwrap_or(self.field.len());
        first..first + self.field[first..].iter().take_while(|f| *f == field).count()
    }

    fn rows(&self, array: usize) -> usize {
        if self.per_step[array] { self.steps } else { 1 }
    }
}

/// The arrays a type flattens to, with their dimensions (symbolic ones too).
fn arrays(ty: &Ty) -> Vec<(DType, Vec<Dim>)> {
    match ty {
        Ty::Array(d, dims) => vec![(*d, dims.clone())],
        Ty::Tuple(ts) => ts.iter().flat_map(arrays).collect(),
        Ty::Struct(def, args) => Ty::struct_fields(def, args).iter().flat_map(|(_, t)| arrays(t)).collect(),
        Ty::Error => vec![],
    }
}

/// Episode statistics: sums over the episodes that ended.
#[derive(Clone, Copy, Debug, Default)]
pub struct EpisodeStats {
    pub return_sum: f64,
    pub length_sum: f64,
    pub count: u64,
}

impl EpisodeStats {
    pub fn add(&mut self, o: &EpisodeStats) {
        self.return_sum += o.return_sum;
        self.length_sum += o.length_sum;
        self.count += o.count;
    }
}

/// One actor thread's rollout, with what the learner logs about it.
pub struct Rollout {
    pub fields: Vec<Vec<u8>>,
    /// The policy version that acted.
    pub version: u64,
    pub episodes: EpisodeStats,
    /// Seconds the thread waited (for a policy, or for the learner to take its rollout)
    /// since its previous rollout.
    pub idle_s: f64,
    /// Seconds the thread spent acting (the observations up, the actor program, its
    /// results down, the actions to the envs) over this rollout.
    pub acting_s: f64,
    /// Seconds the thread waited for the envs' steps over this rollout.
    pub stepping_s: f64,
}

impl Rollout {
    pub fn new(layout: &TrajectoryLayout) -> Rollout {
        let fields = (0..layout.elem.len()).map(|f| vec![0; layout.rows(f) * layout.envs * layout.elem[f]]).collect();
        Rollout { fields, version: 0, episodes: EpisodeStats::default(), idle_s: 0.0, acting_s: 0.0, stepping_s: 0.0 }
    }

    /// Writes `bytes` (whole entries) into row `t` of `field`, from environment `env0` on.
    pub fn write(&mut self, layout: &TrajectoryLayout, field: usize, t: usize, env0: usize, bytes: &[u8]) {
        let e = layout.elem[field];
        let at = (t * layout.envs + env0) * e;
        self.fields[field][at..at + bytes.len()].copy_from_slice(bytes);
    }
}

/// Joins the threads' rollouts along the environment axis (thread 0's environments
/// first) and cuts the result into `devices` equal shares: `[device][field]` bytes.
pub fn assemble(parts: &[Rollout], layout: &TrajectoryLayout, devices: usize) -> Vec<Vec<Vec<u8>>> {
    let total = layout.envs * parts.len();
    let per_device = total / devices;
    let mut out: Vec<Vec<Vec<u8>>> = (0..devices).map(|_| Vec::with_capacity(layout.elem.len())).collect();
    for (f, &e) in layout.elem.iter().enumerate() {
        let rows = layout.rows(f);
        let mut shares: Vec<Vec<u8>> = (0..devices).map(|_| Vec::with_capacity(rows * per_device * e)).collect();
        for t in 0..rows {
            // Row `t` of every thread, in thread order, is the joined row `t`.
            let mut env = 0;
            for p in parts {
                let row = &p.fields[f][t * layout.envs * e..(t + 1) * layout.envs * e];
                for chunk in row.chunks(e) {
                    shares[env / per_device].extend_from_slice(chunk);
                    env += 1;
                }
            }
        }
        for (d, s) in shares.into_iter().enumerate() {
            out[d].push(s);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::elab::agent::trajectory_def;

    fn f32s(dims: &[u64]) -> Ty {
        Ty::Array(DType::F32, dims.iter().map(|&d| Dim::Known(d)).collect())
    }

    #[test]
    fn the_layout_follows_the_trajectory_definition() {
        // Observations f32[4], actions f32[3], no behaviour record, a carry (f32[4], i32[2]).
        let carry = Ty::Tuple(vec![f32s(&[4]), Ty::Array(DType::I32, vec![Dim::Known(2)])]);
        let key = Ty::Tuple(vec![f32s(&[4]), f32s(&[3]), Ty::Tuple(vec![]), Ty::Tuple(vec![carry])]);
        let l = TrajectoryLayout::new(&trajectory_def(&key), 2, 2);
        assert_eq!(l.elem, [16, 12, 4, 1, 1, 16, 16, 16, 8]);
        assert_eq!((0..9).map(|a| l.rows(a)).collect::<Vec<_>>(), [2, 2, 2, 2, 2, 2, 1, 1, 1]);
        assert_eq!((l.array("reward"), l.array("last_obs")), (2, 6));
        assert_eq!((l.arrays("behaviour"), l.arrays("carry")), (9..9, 7..9));
    }

    #[test]
    fn assemble_joins_threads_and_splits_devices() {
        // Two threads of 2 envs, 2 steps, one-byte entries: env columns 0,1 | 2,3.
        let layout = TrajectoryLayout {
            steps: 2,
            envs: 2,
            field: ["obs", "last_obs", "carry"].map(String::from).to_vec(),
            elem: vec![1; 3],
            per_step: vec![true, false, false],
        };
        let mut parts = vec![Rollout::new(&layout), Rollout::new(&layout)];
        for (k, p) in parts.iter_mut().enumerate() {
            for t in 0..2 {
                let row: Vec<u8> = (0..2).map(|i| (10 * t + 2 * k + i) as u8).collect();
                p.write(&layout, 0, t, 0, &row);
            }
        }
        let shares = assemble(&parts, &layout, 2);
        // Device 0 holds envs 0, 1 (thread 0), device 1 envs 2, 3 (thread 1), row by row.
        assert_eq!(shares[0][0], vec![0, 1, 10, 11]);
        assert_eq!(shares[1][0], vec![2, 3, 12, 13]);
        assert_eq!(shares[0][1].len(), 2, "one row of last_obs");
        assert_eq!(shares[0][2].len(), 2, "one row of carry");
    }
}
