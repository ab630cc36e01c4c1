//! A training state that lives on devices between calls: its leaves (named, typed, and
//! either the same on every device or each device's own part), and per device the
//! buffers. Both drivers keep theirs in one (Anakin: the whole state on its D devices;
//! Sebulba: the learner and its keys on the learner devices); checkpoints go through it.

use crate::array::{Array, ArrayTy};
use crate::distributed::Session;
use crate::programs::anakin::{Leaf, LeafKind};
use crate::runtime::{Buffer, Client};

pub struct DeviceState {
    pub leaves: Vec<Leaf>,
    /// The devices the state lives on, in order.
    pub devices: Vec<usize>,
    /// Per device (in `devices`' order), one buffer per leaf; empty until set.
    pub buffers: Vec<Vec<Buffer>>,
    /// Where these devices sit in a job of several processes: the index of the first
    /// among all devices of the job, and their number.
    pub span: (usize, usize),
}

impl DeviceState {
    pub fn new(leaves: Vec<Leaf>, devices: Vec<usize>) -> DeviceState {
        let span = (0, devices.len());
        DeviceState { leaves, devices, buffers: vec![], span }
    }

    /// This state as devices `first ..` of the `total` devices of a job.
    pub fn within(self, first: usize, total: usize) -> DeviceState {
        DeviceState { span: (first, total), ..self }
    }

    /// Uploads each device's values (one per leaf) as the state.
    pub fn upload(&mut self, client: &Client, per_device: &[Vec<Array>]) -> Result<(), String> {
        let upload = |(values, &d): (&Vec<Array>, &usize)| {
            values.iter().map(|v| client.upload(v, d).map_err(|e| e.to_string())).collect::<Result<Vec<_>, _>>()
        };
        self.buffers = per_device.iter().zip(&self.devices).map(upload).collect::<Result<_, _>>()?;
        Ok(())
    }

    /// Downloads the first `n` leaves of one device (by its index in `devices`).
    pub fn download(&self, device: usize, n: usize) -> Result<Vec<Array>, String> {
        self.buffers[device][..n].iter().map(|b| b.download().map_err(|e| e.to_string())).collect()
    }

    /// The whole state by name: each shared leaf once (checked the same on every device),
    /// and each per-device leaf with the devices' parts joined along the first axis
    /// (environments), or stacked for the PRNG keys.
    pub fn snapshot(&self) -> Result<Vec<(String, Array)>, String> {
        snapshot_of(&self.leaves, &self.download_all()?)
    }

    /// In a job, the whole job's state ([`DeviceState::snapshot`] over every process's
    /// devices) on process 0, under `key` (fresh for each); the others send theirs and get
    /// `None`.
    pub fn gather(&self, job: &Session, key: &str) -> Result<Option<Vec<(String, Array)>>, String> {
        let mine: Vec<u8> = self.download_all()?.iter().flatten().flat_map(Array::to_bytes).collect();
        let Some(all) = job.gather(key, &mine)? else { return Ok(None) };
        let mut per_device = vec![];
        for bytes in &all {
            let mut at = 0;
            for _ in 0..self.devices.len() {
                let mut values = vec![];
                for leaf in &self.leaves {
                    let len = leaf.ty.numel() * leaf.ty.dtype.size();
                    let part = bytes.get(at..at + len).ok_or("a process sent a short snapshot")?;
                    values.push(Array::from_bytes(&leaf.ty, part).ok_or("a process sent a bad snapshot")?);
                    at += len;
                }
                per_device.push(values);
            }
        }
        snapshot_of(&self.leaves, &per_device).map(Some)
    }

    /// Every device's whole state.
    pub fn download_all(&self) -> Result<Vec<Vec<Array>>, String> {
        (0..self.buffers.len()).map(|d| self.download(d, self.leaves.len())).collect()
    }

    /// Puts a snapshot of the whole job back: these devices take their parts.
    pub fn restore(&mut self, client: &Client, arrays: &[(String, Array)]) -> Result<(), String> {
        let ((first, total), d) = (self.span, self.devices.len());
        let mut per_device: Vec<Vec<Array>> = vec![vec![]; d];
        for leaf in &self.leaves {
            let (_, a) = arrays
                .iter()
                .find(|(n, _)| *n == leaf.name)
                .ok_or_else(|| format!("the checkpoint has no array `{}`", leaf.name))?;
            let want = saved_ty(leaf, total);
            if a.ty() != want {
                return Err(format!("`{}` in the checkpoint is {:?}, the program expects {want:?}", leaf.name, a.ty()));
            }
            let parts = match leaf.kind {
                LeafKind::Shared => vec![a.clone(); d],
                LeafKind::PerEnv | LeafKind::PerDevice => split_parts(a, leaf, total).drain(first..first + d).collect(),
            };
            for (values, p) in per_device.iter_mut().zip(parts) {
                values.push(p);
            }
        }
        self.upload(client, &per_device)
    }
}

/// The whole state by name from every device's values (one per leaf): each shared leaf
/// once (checked the same on every device), and each per-device leaf with the devices'
/// parts joined along the first axis (environments), or stacked for the PRNG keys.
pub fn snapshot_of(leaves: &[Leaf], per_device: &[Vec<Array>]) -> Result<Vec<(String, Array)>, String> {
    let mut out = vec![];
    for (i, leaf) in leaves.iter().enumerate() {
        let parts: Vec<&Array> = per_device.iter().map(|d| &d[i]).collect();
        let value = match leaf.kind {
            LeafKind::Shared if parts.iter().any(|p| *p != parts[0]) => {
                return Err(format!(
                    "`{}` differs between devices: the update must average its gradients with `pmean`",
                    leaf.name
                ));
            }
            LeafKind::Shared => parts[0].clone(),
            LeafKind::PerEnv | LeafKind::PerDevice => join_parts(&parts, leaf),
        };
        out.push((leaf.name.clone(), value));
    }
    Ok(out)
}

/// A state array's type in a checkpoint: the devices' parts joined along the environment
/// axis or stacked (PRNG keys); the learner once.
pub fn saved_ty(leaf: &Leaf, devices: usize) -> ArrayTy {
    let mut shape = leaf.ty.shape.clone();
    match leaf.kind {
        LeafKind::Shared => {}
        LeafKind::PerEnv => shape[usize::from(leaf.seeded)] *= devices,
        LeafKind::PerDevice => shape.insert(0, devices),
    }
    ArrayTy::new(leaf.ty.dtype, shape)
}

/// How many seeds' rows the devices' parts of `leaf` interleave when joined: with a seed
/// axis, a per-environment array is joined seed by seed.
fn seed_rows(leaf: &Leaf) -> usize {
    match (leaf.kind, leaf.seeded) {
        (LeafKind::PerEnv, true) => leaf.ty.shape[0],
        _ => 1,
    }
}

/// Joins the devices' parts of an array into its [`saved_ty`].
pub fn join_parts(parts: &[&Array], leaf: &Leaf) -> Array {
    let rows = seed_rows(leaf);
    let bytes: Vec<Vec<u8>> = parts.iter().map(|p| p.to_bytes()).collect();
    let chunk = bytes[0].len() / rows;
    let joined: Vec<u8> =
        (0..rows).flat_map(|r| bytes.iter().flat_map(move |b| &b[r * chunk..(r + 1) * chunk])).copied().collect();
    Array::from_bytes(&saved_ty(leaf, parts.len()), &joined).expect("each part has the leaf's type")
}

/// The inverse of [`join_parts`], for an array already checked to have the saved type: the
/// devices' parts.
pub fn split_parts(a: &Array, leaf: &Leaf, devices: usize) -> Vec<Array> {
    let (bytes, rows) = (a.to_bytes(), seed_rows(leaf));
    let chunk = bytes.len() / rows / devices;
    (0..devices)
        .map(|d| {
            let part: Vec<u8> = (0..rows)
                .flat_map(|r| &bytes[(r * devices + d) * chunk..(r * devices + d + 1) * chunk])
                .copied()
                .collect();
            Array::from_bytes(&leaf.ty, &part).expect("checked size")
        })
        .collect()
}
