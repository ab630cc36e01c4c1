//! Where a run's files go. Without `--out` each run gets a directory of its own,
//! `runs/<agent>__<env>__<seed>__<unix time>` (CleanRL's naming), and the link
//! `runs/latest` points at the newest; a resumed run continues in its own directory. A
//! directory that holds a run is never written over unless asked (`--force`).

use super::{checkpoint, metrics};
use std::io;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Where new runs go, relative to the working directory.
pub const ROOT: &str = "runs";
/// The link to the newest run in [`ROOT`].
pub const LATEST: &str = "latest";

/// Whether `dir` holds a run: a metrics log or a checkpoint.
pub fn holds_run(dir: &Path) -> bool {
    [metrics::FILE, checkpoint::META_FILE].iter().any(|f| dir.join(f).exists())
}

/// Refuses an `--out` that holds a run other than the one resumed, unless `force`.
pub fn check_out(out: &Path, resume: Option<&Path>, force: bool) -> Result<(), String> {
    let same = |r: &Path| r == out || matches!((r.canonicalize(), out.canonicalize()), (Ok(a), Ok(b)) if a == b);
    if force || !holds_run(out) || resume.is_some_and(same) {
        return Ok(());
    }
    let d = out.display();
    Err(format!(
        "`--out {d}` holds a run already: continue it with `--resume {d}`, write over it with `--force`, or leave out `--out` to give this run a directory of its own"
    ))
}

/// A new run's own directory under [`ROOT`], created, with [`LATEST`] pointing at it.
pub fn new_dir(agent: &str, env: &str, seed: i64) -> Result<PathBuf, String> {
    let root = Path::new(ROOT);
    std::fs::create_dir_all(root).map_err(|e| format!("cannot create `{ROOT}`: {e}"))?;
    let time = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let base = format!("{}__{}__{seed}__{time}", component(agent), component(env));
    // Runs started in the same second get a suffix.
    for n in 0.. {
        let name = if n == 0 { base.clone() } else { format!("{base}-{n}") };
        match std::fs::create_dir(root.join(&name)) {
            Ok(()) => {
                point_latest(root, &name).map_err(|e| format!("cannot link `{ROOT}/{LATEST}`: {e}"))?;
                return Ok(root.join(name));
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("cannot create `{ROOT}/{name}`: {e}")),
        }
    }
    unreachable!("some suffix is free")
}

/// Points `root/latest` at `name`, replacing the link atomically (a new link renamed over
/// the old). A `latest` that is not a link (a run written there by an older podc) is left.
fn point_latest(root: &Path, name: &str) -> io::Result<()> {
    let latest = root.join(LATEST);
    if latest.symlink_metadata().is_ok_and(|m| !m.file_type().is_symlink()) {
        return Ok(());
    }
    let tmp = root.join(format!(".{LATEST}.{}", std::process::id()));
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(name, &tmp)?;
    std::fs::rename(&tmp, &latest)
}

/// A name made safe for a path component: an env URI's `gymnasium:CartPole-v1` becomes
/// `gymnasium-CartPole-v1`.
fn component(s: &str) -> String {
    s.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '-' }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_out_with_a_run_is_refused_unless_resumed_or_forced() {
        let tmp = tempfile::tempdir().unwrap();
        let d = tmp.path();
        check_out(d, None, false).expect("an empty directory takes a run");
        std::fs::write(d.join(metrics::FILE), "").unwrap();
        let err = check_out(d, None, false).unwrap_err();
        assert!(err.contains("--resume") && err.contains("--force"), "{err}");
        check_out(d, Some(d), false).expect("continuing the run it holds");
        check_out(d, None, true).expect("forced");
        assert_eq!(component("pod:envs/catch.pod?env=Catch"), "pod-envs-catch.pod-env-Catch");
    }
}
