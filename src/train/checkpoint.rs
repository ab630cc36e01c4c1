//! Checkpoints: the training state as `checkpoint.safetensors` (the arrays by name) and
//! `checkpoint.json` (the run's config and counters), never torn.
//!
//! Both files carry the same digest, a CRC-32 of the arrays (names, dtypes, shapes, bytes):
//! the safetensors file in its `__metadata__`, the JSON as `{"digest": …, "meta": …}`.
//! `save` writes `checkpoint.json.tmp` (fsynced), then replaces the safetensors file
//! atomically, then renames the JSON into place: the JSON is the commit record. A save
//! killed between its two renames leaves the new arrays beside the old JSON, but the new
//! JSON is already complete in `checkpoint.json.tmp`, so `load` takes whichever of the two
//! carries the arrays' digest. Any other disagreement is an error naming both files, and
//! the digest, recomputed on load, also catches bytes damaged after the write.

use super::atomic;
use crate::array::{Array, ArrayTy, DType};
use safetensors::{Dtype, SafeTensors, View};
use serde_json::{Value, json};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

pub const TENSORS_FILE: &str = "checkpoint.safetensors";
pub const META_FILE: &str = "checkpoint.json";

/// Why a checkpoint could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("no checkpoint: {} does not exist", path.display())]
    Missing { path: PathBuf },
    #[error("cannot read {}: {source}", path.display())]
    Io { path: PathBuf, source: io::Error },
    #[error("corrupt checkpoint file {}: {reason}", path.display())]
    Corrupt { path: PathBuf, reason: String },
    #[error(
        "checkpoint files disagree: {} is the record of checkpoint {meta_digest}, but {} holds \
         checkpoint {tensors_digest} (they come from different saves)",
        meta.display(),
        tensors.display()
    )]
    Mismatch { meta: PathBuf, meta_digest: String, tensors: PathBuf, tensors_digest: String },
}

/// One array, laid out as safetensors stores it.
struct Tensor {
    dtype: DType,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl View for &Tensor {
    fn dtype(&self) -> Dtype {
        match self.dtype {
            DType::F32 => Dtype::F32,
            DType::I32 => Dtype::I32,
            DType::U32 => Dtype::U32,
            DType::U8 => Dtype::U8,
            DType::Bool => Dtype::BOOL,
        }
    }

    fn shape(&self) -> &[usize] {
        &self.shape
    }

    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.bytes)
    }

    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}

/// Saves `tensors` and `meta` to `dir` (created if missing), replacing the checkpoint there.
pub fn save(dir: &Path, tensors: &[(String, Array)], meta: &Value) -> io::Result<()> {
    let (digest, st_bytes) = serialize(tensors, None)?;
    let record = serde_json::to_vec_pretty(&json!({ "digest": digest, "meta": meta }))?;
    fs::create_dir_all(dir)?;
    atomic::write_tmp(dir, META_FILE, &record)?;
    atomic::replace(dir, TENSORS_FILE, &st_bytes)?;
    atomic::commit(dir, META_FILE)
}

/// A checkpoint as one buffer, for sending to another process (see [`from_bytes`]).
pub fn to_bytes(tensors: &[(String, Array)], meta: &Value) -> io::Result<Vec<u8>> {
    Ok(serialize(tensors, Some(meta))?.1)
}

/// The arrays and meta of a [`to_bytes`] buffer.
pub fn from_bytes(bytes: &[u8]) -> Result<(Vec<(String, Array)>, Value), CheckpointError> {
    let path = Path::new("(a checkpoint sent by process 0)");
    let (arrays, _) = parse_tensors(path, bytes)?;
    let corrupt = |reason: String| CheckpointError::Corrupt { path: path.to_path_buf(), reason };
    let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| corrupt(e.to_string()))?;
    let meta = header.metadata().as_ref().and_then(|m| m.get("meta")).ok_or_else(|| corrupt("no meta".into()))?;
    Ok((arrays, serde_json::from_str(meta).map_err(|e| corrupt(e.to_string()))?))
}

/// The arrays in safetensors form, with their digest in its metadata (and `meta`, if
/// given), and the digest.
fn serialize(tensors: &[(String, Array)], meta: Option<&Value>) -> io::Result<(String, Vec<u8>)> {
    let mut named: Vec<(&str, Tensor)> = tensors
        .iter()
        .map(|(n, a)| (n.as_str(), Tensor { dtype: a.dtype(), shape: a.shape.clone(), bytes: a.to_bytes() }))
        .collect();
    named.sort_by(|a, b| a.0.cmp(b.0));
    if let Some(w) = named.windows(2).find(|w| w[0].0 == w[1].0) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("two arrays named `{}`", w[0].0)));
    }
    let digest = digest(named.iter().map(|(n, t)| (*n, t.dtype, &t.shape[..], &t.bytes[..])));
    let mut st_meta = HashMap::from([("digest".to_string(), digest.clone())]);
    if let Some(m) = meta {
        st_meta.insert("meta".into(), m.to_string());
    }
    let st_bytes = safetensors::serialize(named.iter().map(|(n, t)| (*n, t)), Some(st_meta))
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
    Ok((digest, st_bytes))
}

/// Loads the checkpoint in `dir`: the arrays sorted by name, and the meta as saved.
pub fn load(dir: &Path) -> Result<(Vec<(String, Array)>, Value), CheckpointError> {
    let st_path = dir.join(TENSORS_FILE);
    let (tensors, digest) = read_tensors(&st_path)?;
    let meta_path = dir.join(META_FILE);
    let (meta_digest, meta) = read_record(&meta_path)?;
    if meta_digest == digest {
        return Ok((tensors, meta));
    }
    // A save killed between its two renames: its record waits, complete, in the .tmp file.
    if let Ok((d, meta)) = read_record(&atomic::tmp_path(dir, META_FILE))
        && d == digest
    {
        return Ok((tensors, meta));
    }
    Err(CheckpointError::Mismatch { meta: meta_path, meta_digest, tensors: st_path, tensors_digest: digest })
}

fn read_file(path: &Path) -> Result<Vec<u8>, CheckpointError> {
    fs::read(path).map_err(|source| match source.kind() {
        io::ErrorKind::NotFound => CheckpointError::Missing { path: path.to_path_buf() },
        _ => CheckpointError::Io { path: path.to_path_buf(), source },
    })
}

fn read_tensors(path: &Path) -> Result<(Vec<(String, Array)>, String), CheckpointError> {
    parse_tensors(path, &read_file(path)?)
}

/// The arrays of a safetensors buffer (read from `path`), checked against their digest.
fn parse_tensors(path: &Path, bytes: &[u8]) -> Result<(Vec<(String, Array)>, String), CheckpointError> {
    let corrupt = |reason: String| CheckpointError::Corrupt { path: path.to_path_buf(), reason };
    let (_, header) = SafeTensors::read_metadata(bytes).map_err(|e| corrupt(e.to_string()))?;
    let stored = header.metadata().as_ref().and_then(|m| m.get("digest")).cloned();
    let stored = stored.ok_or_else(|| corrupt("no digest in its metadata".into()))?;
    let st = SafeTensors::deserialize(bytes).map_err(|e| corrupt(e.to_string()))?;
    let mut views = st.tensors();
    views.sort_by(|a, b| a.0.cmp(&b.0));
    let mut arrays = Vec::with_capacity(views.len());
    for (name, v) in &views {
        let dtype = match v.dtype() {
            Dtype::F32 => DType::F32,
            Dtype::I32 => DType::I32,
            Dtype::U32 => DType::U32,
            Dtype::U8 => DType::U8,
            Dtype::BOOL => DType::Bool,
            other => return Err(corrupt(format!("array `{name}` has dtype {other:?}, which podracer does not use"))),
        };
        let ty = ArrayTy::new(dtype, v.shape().to_vec());
        let a =
            Array::from_bytes(&ty, v.data()).ok_or_else(|| corrupt(format!("array `{name}` has the wrong size")))?;
        arrays.push((name.clone(), a));
    }
    let actual = digest(views.iter().zip(&arrays).map(|((n, v), (_, a))| (n.as_str(), a.dtype(), v.shape(), v.data())));
    if actual != stored {
        return Err(corrupt(format!("its arrays hash to {actual}, not to the {stored} it was saved with")));
    }
    Ok((arrays, stored))
}

fn read_record(path: &Path) -> Result<(String, Value), CheckpointError> {
    let corrupt = |reason: String| CheckpointError::Corrupt { path: path.to_path_buf(), reason };
    let bytes = read_file(path)?;
    let mut v: Value = serde_json::from_slice(&bytes).map_err(|e| corrupt(e.to_string()))?;
    let digest = v.get("digest").and_then(Value::as_str).map(str::to_string);
    let digest = digest.ok_or_else(|| corrupt("no string `digest`".into()))?;
    let meta = v.get_mut("meta").map(Value::take).ok_or_else(|| corrupt("no `meta`".into()))?;
    Ok((digest, meta))
}

/// CRC-32 of the arrays, in name order; every field is length-prefixed so that no two
/// different checkpoints feed the hasher the same bytes.
fn digest<'a>(tensors: impl Iterator<Item = (&'a str, DType, &'a [usize], &'a [u8])>) -> String {
    let mut h = crc32fast::Hasher::new();
    let mut field = |bytes: &[u8]| {
        h.update(&(bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    for (name, dtype, shape, bytes) in tensors {
        field(name.as_bytes());
        field(dtype.name().as_bytes());
        field(&shape.iter().flat_map(|&d| (d as u64).to_le_bytes()).collect::<Vec<u8>>());
        field(bytes);
    }
    format!("crc32:{:08x}", h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::array::Data;

    fn state() -> Vec<(String, Array)> {
        vec![
            (
                "learner.params.actor.hidden0.w".into(),
                Array::f32(vec![2, 3], vec![0.5, -1.0, 2.25, f32::MAX, -0.0, 1e-30]),
            ),
            ("learner.step".into(), Array::i32(vec![], vec![-7])),
            ("rng".into(), Array::new(vec![2], Data::U32(vec![0xdead_beef, 42]))),
            ("env.state.done".into(), Array::new(vec![2, 1, 2], Data::Bool(vec![true, false, false, true]))),
            ("env.state.frame".into(), Array::new(vec![2, 3], Data::U8(vec![0, 7, 128, 200, 254, 255]))),
            ("env.state.empty".into(), Array::f32(vec![0, 4], vec![])),
            ("env.state.ball_x".into(), Array::f32(vec![], vec![3.5])),
        ]
    }

    fn sorted(mut v: Vec<(String, Array)>) -> Vec<(String, Array)> {
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    #[test]
    fn round_trips_every_dtype_and_shape() {
        let dir = tempfile::tempdir().unwrap();
        let meta = json!({"config": {"envs": 8, "lr": 3e-4}, "env_steps": 1024});
        save(dir.path(), &state(), &meta).unwrap();
        let (tensors, back) = load(dir.path()).unwrap();
        assert_eq!(tensors, sorted(state()));
        assert_eq!(back, meta);
        // A second save replaces the first and leaves no temporary files.
        let mut next = state();
        next[1].1 = Array::i32(vec![], vec![8]);
        save(dir.path(), &next, &json!(2)).unwrap();
        assert_eq!(load(dir.path()).unwrap(), (sorted(next), json!(2)));
        let mut names: Vec<_> = fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
        names.sort();
        assert_eq!(names, [META_FILE, TENSORS_FILE]);
    }

    #[test]
    fn the_files_are_what_other_tools_expect() {
        let dir = tempfile::tempdir().unwrap();
        save(dir.path(), &state(), &json!({"step": 3})).unwrap();
        let bytes = fs::read(dir.path().join(TENSORS_FILE)).unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        assert_eq!(st.tensor("env.state.done").unwrap().dtype(), Dtype::BOOL);
        assert_eq!(st.tensor("env.state.done").unwrap().data(), [1, 0, 0, 1]);
        assert_eq!(st.tensor("env.state.frame").unwrap().dtype(), Dtype::U8);
        assert_eq!(st.tensor("env.state.frame").unwrap().data(), [0, 7, 128, 200, 254, 255]);
        assert_eq!(st.tensor("learner.step").unwrap().shape(), [] as [usize; 0]);
        let record: Value = serde_json::from_slice(&fs::read(dir.path().join(META_FILE)).unwrap()).unwrap();
        let (_, header) = SafeTensors::read_metadata(&bytes).unwrap();
        assert_eq!(record["digest"].as_str(), header.metadata().as_ref().unwrap().get("digest").map(String::as_str));
        assert_eq!(record["meta"], json!({"step": 3}));
    }

    #[test]
    fn duplicate_names_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = state();
        s.push(s[0].clone());
        let e = save(dir.path(), &s, &json!(null)).unwrap_err();
        assert!(e.to_string().contains("two arrays named `learner.params.actor.hidden0.w`"), "{e}");
    }

    #[test]
    fn missing_files_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let e = load(dir.path()).unwrap_err();
        assert!(matches!(&e, CheckpointError::Missing { path } if path.ends_with(TENSORS_FILE)), "{e}");
        save(dir.path(), &state(), &json!(1)).unwrap();
        fs::remove_file(dir.path().join(META_FILE)).unwrap();
        let e = load(dir.path()).unwrap_err();
        assert!(e.to_string().starts_with("no checkpoint:") && e.to_string().contains(META_FILE), "{e}");
    }

    /// Every truncation of either file, and every flipped byte of the arrays' file, is an
    /// error and not a panic. (The meta is plain JSON that people may edit; no digest
    /// covers it.)
    #[test]
    fn damaged_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        save(dir.path(), &state(), &json!({"step": 1})).unwrap();
        for file in [TENSORS_FILE, META_FILE] {
            let path = dir.path().join(file);
            let good = fs::read(&path).unwrap();
            for cut in 0..good.len() {
                fs::write(&path, &good[..cut]).unwrap();
                let e = load(dir.path()).unwrap_err();
                assert!(matches!(e, CheckpointError::Corrupt { .. }), "{file} cut at {cut}: {e}");
            }
            if file == TENSORS_FILE {
                for i in 0..good.len() {
                    let mut bad = good.clone();
                    bad[i] ^= 0x5a;
                    fs::write(&path, &bad).unwrap();
                    assert!(load(dir.path()).is_err(), "{file} byte {i}");
                }
            }
            fs::write(&path, &good).unwrap();
        }
        let e = {
            let path = dir.path().join(TENSORS_FILE);
            let mut bad = fs::read(&path).unwrap();
            let last = bad.len() - 1;
            bad[last] ^= 1;
            fs::write(&path, &bad).unwrap();
            load(dir.path()).unwrap_err()
        };
        assert!(e.to_string().contains("hash to crc32:"), "{e}");
    }

    #[test]
    fn files_from_different_saves_are_a_mismatch() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        save(a.path(), &state(), &json!(1)).unwrap();
        save(b.path(), &state()[1..], &json!(2)).unwrap();
        fs::copy(b.path().join(META_FILE), a.path().join(META_FILE)).unwrap();
        let e = load(a.path()).unwrap_err();
        assert!(matches!(e, CheckpointError::Mismatch { .. }));
        let msg = e.to_string();
        assert!(msg.contains(META_FILE) && msg.contains(TENSORS_FILE) && msg.matches("crc32:").count() == 2, "{msg}");
    }

    /// A save killed between its two renames: new arrays, old record, new record in .tmp.
    #[test]
    fn a_save_cut_between_renames_loads_the_new_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        save(dir.path(), &state(), &json!(1)).unwrap();
        let old_record = fs::read(dir.path().join(META_FILE)).unwrap();
        save(dir.path(), &state()[2..], &json!(2)).unwrap();
        fs::rename(dir.path().join(META_FILE), atomic::tmp_path(dir.path(), META_FILE)).unwrap();
        fs::write(dir.path().join(META_FILE), old_record).unwrap();
        assert_eq!(load(dir.path()).unwrap(), (sorted(state()[2..].to_vec()), json!(2)));
    }

    #[test]
    fn leftover_tmp_files_are_ignored() {
        let dir = tempfile::tempdir().unwrap();
        save(dir.path(), &state(), &json!(1)).unwrap();
        fs::write(atomic::tmp_path(dir.path(), TENSORS_FILE), b"\x08\0\0\0\0\0\0\0{}").unwrap();
        fs::write(atomic::tmp_path(dir.path(), META_FILE), b"{\"digest\": \"crc32:0").unwrap();
        assert_eq!(load(dir.path()).unwrap(), (sorted(state()), json!(1)));
        save(dir.path(), &state()[3..], &json!(2)).unwrap();
        assert_eq!(load(dir.path()).unwrap(), (sorted(state()[3..].to_vec()), json!(2)));
    }

    #[test]
    fn foreign_dtypes_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        save(dir.path(), &state(), &json!(1)).unwrap();
        let view = safetensors::tensor::TensorView::new(Dtype::F64, vec![1], &[0; 8]).unwrap();
        let meta = HashMap::from([("digest".to_string(), "crc32:00000000".to_string())]);
        let bytes = safetensors::serialize([("x", view)], Some(meta)).unwrap();
        fs::write(dir.path().join(TENSORS_FILE), bytes).unwrap();
        let e = load(dir.path()).unwrap_err();
        assert!(e.to_string().contains("array `x` has dtype F64"), "{e}");
    }
}
