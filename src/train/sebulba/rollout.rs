//! A rollout on the host: an actor thread's `[T, B, ..]` trajectory, and joining the
//! threads' rollouts into each learner device's share.
//!
//! The trajectory is kept on the host because every row passes through it anyway: the
//! observations come from the host envs and the actions go back to them. The learner
//! uploads each device's share once per update.

use crate::array::ArrayTy;

/// The trajectory's fields, in `Trajectory`'s order: obs, action, reward, terminated,
/// truncated, final_obs, last_obs, then the behaviour record's arrays and the carry's.
pub const OBS: usize = 0;
pub const ACTION: usize = 1;
pub const REWARD: usize = 2;
pub const TERMINATED: usize = 3;
pub const TRUNCATED: usize = 4;
pub const FINAL_OBS: usize = 5;
pub const LAST_OBS: usize = 6;
pub const BEHAVIOUR: usize = 7;

/// The shape of one thread's rollout.
#[derive(Clone, Debug)]
pub struct TrajectoryLayout {
    pub steps: usize,
    /// Environments of one actor thread.
    pub envs: usize,
    /// Bytes of one environment's entry in each field.
    pub elem: Vec<usize>,
    /// The first of the carry's fields (one row each: the carry at the rollout's start).
    pub carry: usize,
}

/// The per-environment arrays of a trajectory: what one environment's entry is made of.
pub struct Entries<'a> {
    pub obs: &'a ArrayTy,
    pub action: &'a ArrayTy,
    pub behaviour: &'a [ArrayTy],
    pub carry: &'a [ArrayTy],
}

impl TrajectoryLayout {
    pub fn new(steps: usize, envs: usize, e: Entries) -> TrajectoryLayout {
        let bytes = |t: &ArrayTy| t.numel() * t.dtype.size();
        let o = bytes(e.obs);
        let mut elem = vec![o, bytes(e.action), 4, 1, 1, o, o];
        elem.extend(e.behaviour.iter().map(bytes));
        let carry = elem.len();
        elem.extend(e.carry.iter().map(bytes));
        TrajectoryLayout { steps, envs, elem, carry }
    }

    /// Rows of a field: `T`, or one for `last_obs` and the carry.
    fn rows(&self, field: usize) -> usize {
        if field == LAST_OBS || field >= self.carry { 1 } else { self.steps }
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
}

impl Rollout {
    pub fn new(layout: &TrajectoryLayout) -> Rollout {
        let fields = (0..layout.elem.len()).map(|f| vec![0; layout.rows(f) * layout.envs * layout.elem[f]]).collect();
        Rollout { fields, version: 0, episodes: EpisodeStats::default(), idle_s: 0.0 }
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
    use crate::array::DType;

    #[test]
    fn assemble_joins_threads_and_splits_devices() {
        // Two threads of 2 envs, 2 steps, one-byte entries: env columns 0,1 | 2,3.
        let layout = TrajectoryLayout { steps: 2, envs: 2, elem: vec![1; 8], carry: 7 };
        let mut parts = vec![Rollout::new(&layout), Rollout::new(&layout)];
        for (k, p) in parts.iter_mut().enumerate() {
            for t in 0..2 {
                let row: Vec<u8> = (0..2).map(|i| (10 * t + 2 * k + i) as u8).collect();
                p.write(&layout, OBS, t, 0, &row);
            }
        }
        let shares = assemble(&parts, &layout, 2);
        // Device 0 holds envs 0, 1 (thread 0), device 1 envs 2, 3 (thread 1), row by row.
        assert_eq!(shares[0][OBS], vec![0, 1, 10, 11]);
        assert_eq!(shares[1][OBS], vec![2, 3, 12, 13]);
        assert_eq!(shares[0][LAST_OBS].len(), 2);
        assert_eq!(shares[0][7].len(), 2, "one row of carry");
        let (f4, f3, i2) =
            (ArrayTy::new(DType::F32, vec![4]), ArrayTy::new(DType::F32, vec![3]), ArrayTy::new(DType::I32, vec![2]));
        let l =
            TrajectoryLayout::new(2, 2, Entries { obs: &f4, action: &f3, behaviour: &[], carry: &[f4.clone(), i2] });
        assert_eq!(l.elem, [16, 12, 4, 1, 1, 16, 16, 16, 8]);
        assert_eq!((l.rows(6), l.rows(7), l.rows(8), l.rows(5)), (1, 1, 1, 2));
    }
}
