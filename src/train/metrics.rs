//! The metrics log, `metrics.jsonl`: one JSON object per report, keys in the order they were
//! inserted, each line written whole with one `write` and so visible to readers (`tail -f`,
//! a plotting script) as soon as it is appended. A line cut short by a crash has no newline
//! yet; readers drop it.

use super::atomic;
use serde_json::{Map, Value};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::Path;

pub const FILE: &str = "metrics.jsonl";

/// One report: `env_steps`, `episode_return`, … (see `docs/training.md`).
pub type Record = Map<String, Value>;

/// An open metrics log that records are appended to.
pub struct MetricsLog {
    file: File,
}

impl MetricsLog {
    /// Starts a fresh log in `dir` (created if missing), replacing any earlier one.
    pub fn create(dir: &Path) -> io::Result<MetricsLog> {
        fs::create_dir_all(dir)?;
        Ok(MetricsLog { file: File::create(dir.join(FILE))? })
    }

    /// Continues, in `dir`, the log in `from` (the same directory, or the one a run is
    /// resumed from) of a run resumed from a checkpoint taken at `keep_until_env_steps`.
    /// The run may have reported past that checkpoint before it stopped; those records are
    /// dropped, since the resumed run will report those steps again. The file is rewritten
    /// atomically, so a crash here loses nothing.
    pub fn open_resume(from: &Path, dir: &Path, keep_until_env_steps: u64) -> io::Result<MetricsLog> {
        let records = match read(from) {
            Ok(records) => records,
            Err(e) if e.kind() == io::ErrorKind::NotFound => vec![],
            Err(e) => return Err(e),
        };
        let mut text = String::new();
        for (i, r) in records.iter().enumerate() {
            let steps = r.get("env_steps").and_then(Value::as_u64).ok_or_else(|| {
                let msg = format!("record {} has no integer `env_steps`", i + 1);
                invalid(&from.join(FILE), msg)
            })?;
            if steps <= keep_until_env_steps {
                text.push_str(&line(r)?);
            }
        }
        fs::create_dir_all(dir)?;
        atomic::replace(dir, FILE, text.as_bytes())?;
        Ok(MetricsLog { file: OpenOptions::new().append(true).open(dir.join(FILE))? })
    }

    /// Appends one record as a line and flushes it.
    pub fn append(&mut self, record: &Record) -> io::Result<()> {
        self.file.write_all(line(record)?.as_bytes())?;
        self.file.flush()
    }
}

fn line(record: &Record) -> io::Result<String> {
    Ok(serde_json::to_string(record)? + "\n")
}

fn invalid(path: &Path, msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{}: {msg}", path.display()))
}

/// Reads the log in `dir`, dropping a last line cut short by a crash. A malformed complete
/// line is an error naming its line number.
pub fn read(dir: &Path) -> io::Result<Vec<Record>> {
    let path = dir.join(FILE);
    let bytes = fs::read(&path).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
    let complete = &bytes[..bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1)];
    let mut out = vec![];
    for (i, l) in complete.split(|&b| b == b'\n').enumerate() {
        if l.trim_ascii().is_empty() {
            continue;
        }
        match serde_json::from_slice(l) {
            Ok(Value::Object(m)) => out.push(m),
            Ok(_) => return Err(invalid(&path, format!("line {}: not a JSON object", i + 1))),
            Err(e) => return Err(invalid(&path, format!("line {}: {e}", i + 1))),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rec(v: Value) -> Record {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn appends_and_reads_back_in_key_order() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = MetricsLog::create(dir.path()).unwrap();
        let r = rec(json!({"env_steps": 10, "episode_return": null, "loss": 0.5, "a": 1}));
        log.append(&r).unwrap();
        // Each line is on disk after `append`, before the log is dropped.
        let back = read(dir.path()).unwrap();
        assert_eq!(back, vec![r.clone()]);
        let keys: Vec<&str> = back[0].keys().map(String::as_str).collect();
        assert_eq!(keys, ["env_steps", "episode_return", "loss", "a"]);
        drop(log);
        // `create` starts over.
        MetricsLog::create(dir.path()).unwrap();
        assert!(read(dir.path()).unwrap().is_empty());
    }

    #[test]
    fn resume_drops_records_past_the_checkpoint_and_appends() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = MetricsLog::create(dir.path()).unwrap();
        for s in [100, 200, 300, 400] {
            log.append(&rec(json!({"env_steps": s}))).unwrap();
        }
        drop(log);
        let mut log = MetricsLog::open_resume(dir.path(), dir.path(), 250).unwrap();
        log.append(&rec(json!({"env_steps": 300, "resumed": true}))).unwrap();
        let back = read(dir.path()).unwrap();
        assert_eq!(
            back,
            vec![
                rec(json!({"env_steps": 100})),
                rec(json!({"env_steps": 200})),
                rec(json!({"env_steps": 300, "resumed": true}))
            ]
        );
        assert!(!dir.path().join("metrics.jsonl.tmp").exists());
    }

    #[test]
    fn resume_without_a_log_starts_one() {
        let dir = tempfile::tempdir().unwrap();
        let sub = dir.path().join("run");
        let mut log = MetricsLog::open_resume(&sub, &sub, 0).unwrap();
        log.append(&rec(json!({"env_steps": 0}))).unwrap();
        assert_eq!(read(&sub).unwrap().len(), 1);
    }

    #[test]
    fn a_torn_last_line_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join(FILE), "{\"env_steps\": 1}\n{\"env_steps\": 2, \"lo").unwrap();
        assert_eq!(read(dir.path()).unwrap(), vec![rec(json!({"env_steps": 1}))]);
        let mut log = MetricsLog::open_resume(dir.path(), dir.path(), 10).unwrap();
        log.append(&rec(json!({"env_steps": 2}))).unwrap();
        assert_eq!(read(dir.path()).unwrap().len(), 2);
    }

    #[test]
    fn bad_lines_are_errors_with_their_line_number() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE);
        fs::write(&path, "{\"env_steps\": 1}\nnot json\n{\"env_steps\": 2}\n").unwrap();
        let e = read(dir.path()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        assert!(e.to_string().contains("metrics.jsonl: line 2:"), "{e}");
        fs::write(&path, "{\"env_steps\": 1}\n[1, 2]\n").unwrap();
        assert!(read(dir.path()).unwrap_err().to_string().contains("line 2: not a JSON object"));
        fs::write(&path, "{\"env_steps\": 1}\n{\"env_steps\": -3}\n").unwrap();
        let e = MetricsLog::open_resume(dir.path(), dir.path(), 10).err().unwrap();
        assert!(e.to_string().contains("record 2 has no integer `env_steps`"), "{e}");
        // A failed resume leaves the log as it was.
        assert_eq!(read(dir.path()).unwrap().len(), 2);
        let e = read(&dir.path().join("nowhere")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("nowhere"), "{e}");
    }
}
