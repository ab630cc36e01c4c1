//! Crash-safe file replacement: write `NAME.tmp`, fsync it, rename it over `NAME`, fsync the
//! directory. A reader sees the old file or the new one, never a mix, even after SIGKILL or
//! a power cut.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

/// The temporary name that [`replace`] writes before renaming.
pub(crate) fn tmp_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.tmp"))
}

/// Writes `bytes` to `dir/NAME.tmp` and fsyncs it, without renaming: the first half of
/// [`replace`], for protocols that need the new content durable before they commit it.
pub(crate) fn write_tmp(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let mut f = File::create(tmp_path(dir, name))?;
    f.write_all(bytes)?;
    f.sync_all()
}

/// Renames `dir/NAME.tmp` over `dir/NAME` and fsyncs the directory so the rename is durable.
pub(crate) fn commit(dir: &Path, name: &str) -> io::Result<()> {
    fs::rename(tmp_path(dir, name), dir.join(name))?;
    File::open(dir)?.sync_all()
}

/// Atomically replaces `dir/NAME` with `bytes`.
pub(crate) fn replace(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    write_tmp(dir, name, bytes)?;
    commit(dir, name)
}
