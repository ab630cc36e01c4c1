//! The persistent compilation cache: executables serialized by the plugin
//! (`PJRT_Executable_Serialize`) and loaded back (`PJRT_Executable_DeserializeAndLoad`),
//! so that a second run of the same program skips XLA's compile.
//!
//! **Where.** `PODC_XLA_CACHE`, else `xla/` in podc's cache (`PODC_CACHE`, else
//! `~/.cache/podracer`). It has its own variable so that tests can point it at a
//! temporary directory without moving the plugin, which lives in podc's cache too.
//!
//! **Keys.** A SHA-256 of everything that changes the compiled program (see
//! [`Client::compile_on`](super::Client::compile_on)): the StableHLO text, the compile
//! options (replicas and their devices), the plugin's identity (its path, size and
//! modification time), its platform, API version and devices, the host CPU's model and
//! features, `XLA_FLAGS`, and podc's version.
//!
//! **Entries.** One file per key, `<key>.xla`: a header (magic, the key, the payload's
//! length and CRC-32) and the plugin's bytes. A read checks all four, so a truncated,
//! corrupt or misplaced file is a miss: the program is compiled again and the entry
//! replaced. Bytes that pass the checks but that the plugin rejects are a miss too. A
//! write goes to a temporary file with a name of its own and is renamed into place, so
//! concurrent runs never see half an entry (there is no fsync: a file torn by a power cut
//! fails its checksum and is recompiled).
//!
//! **Size.** At most `PODC_CACHE_MAX_MB` megabytes (default 1024): after each write the
//! least recently used entries are removed (a hit touches its file's modification time).

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

/// Environment variable naming the cache's directory.
pub const DIR_ENV: &str = "PODC_XLA_CACHE";
/// Environment variable that turns the cache off (any value but empty or `0`).
pub const OFF_ENV: &str = "PODC_NO_CACHE";
/// Environment variable with the cache's size cap in megabytes.
pub const MAX_MB_ENV: &str = "PODC_CACHE_MAX_MB";
/// The size cap when `PODC_CACHE_MAX_MB` is not set.
pub const DEFAULT_MAX_MB: u64 = 1024;

const MAGIC: &[u8; 8] = b"PODCXLA\x01";
const HEADER: usize = MAGIC.len() + 32 + 8 + 4;
const SUFFIX: &str = "xla";
/// Temporary files older than this are leftovers of a killed writer.
const STALE_TMP: Duration = Duration::from_secs(3600);

/// A cache key: the SHA-256 of the key material.
pub type Key = [u8; 32];

/// A directory of compiled executables with a size cap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompileCache {
    dir: PathBuf,
    max_bytes: u64,
}

/// Where a compiled executable came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CacheStatus {
    /// The client has no cache.
    Off,
    /// Loaded from the cache: XLA did not compile.
    Hit,
    /// Compiled (and stored, if the plugin could serialize it).
    Miss,
}

impl CacheStatus {
    /// `off`, `hit` or `miss`, as `podc bench` prints it.
    pub fn as_str(self) -> &'static str {
        match self {
            CacheStatus::Off => "off",
            CacheStatus::Hit => "hit",
            CacheStatus::Miss => "miss",
        }
    }
}

impl CompileCache {
    /// A cache in `dir` (created on first write) holding at most `max_bytes`.
    pub fn new(dir: impl Into<PathBuf>, max_bytes: u64) -> CompileCache {
        CompileCache { dir: dir.into(), max_bytes }
    }

    /// The cache the environment asks for: none if `PODC_NO_CACHE` is set, the cap is 0
    /// or there is no cache directory; else in `PODC_XLA_CACHE`, or `xla/` in podc's
    /// cache directory.
    pub fn from_env() -> Result<Option<CompileCache>, String> {
        if std::env::var_os(OFF_ENV).is_some_and(|v| !v.is_empty() && v != "0") {
            return Ok(None);
        }
        let max_mb = match std::env::var(MAX_MB_ENV) {
            Ok(v) if !v.trim().is_empty() => v
                .trim()
                .parse::<u64>()
                .map_err(|_| format!("{MAX_MB_ENV}={v} is not a size in megabytes (a whole number)"))?,
            _ => DEFAULT_MAX_MB,
        };
        if max_mb == 0 {
            return Ok(None);
        }
        let dir = match std::env::var_os(DIR_ENV).filter(|v| !v.is_empty()) {
            Some(dir) => PathBuf::from(dir),
            None => match super::plugin::cache_dir() {
                Ok(cache) => cache.join("xla"),
                // Without a cache directory there is nothing to keep executables in.
                Err(_) => return Ok(None),
            },
        };
        Ok(Some(CompileCache::new(dir, max_mb.saturating_mul(1 << 20))))
    }

    /// The cache's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The key of some key material; each part is length-prefixed, so that parts cannot
    /// run into each other.
    pub fn key(parts: &[&[u8]]) -> Key {
        let mut h = Sha256::new();
        for p in parts {
            h.update((p.len() as u64).to_le_bytes());
            h.update(p);
        }
        h.finalize().into()
    }

    /// The file of an entry.
    pub fn entry_path(&self, key: &Key) -> PathBuf {
        self.dir.join(format!("{}.{SUFFIX}", hex(key)))
    }

    /// The payload stored under `key`, if there is a sound one; a hit marks the entry as
    /// just used.
    pub fn get(&self, key: &Key) -> Option<Vec<u8>> {
        let path = self.entry_path(key);
        let bytes = fs::read(&path).ok()?;
        let payload = decode(&bytes, key)?;
        // Best effort: an entry that cannot be touched is only evicted sooner.
        let _ = File::options().append(true).open(&path).and_then(|f| f.set_modified(SystemTime::now()));
        Some(payload.to_vec())
    }

    /// Stores `payload` under `key` (replacing what was there), then evicts least
    /// recently used entries until the cache fits its cap.
    pub fn put(&self, key: &Key, payload: &[u8]) -> io::Result<()> {
        fs::create_dir_all(&self.dir)?;
        let path = self.entry_path(key);
        // A name no other writer uses: the process id and a counter within the process.
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let tmp = self.dir.join(format!(".{}.{}.{n}.tmp", hex(key), std::process::id()));
        let written = File::create(&tmp).and_then(|mut f| f.write_all(&encode(key, payload)));
        if let Err(e) = written.and_then(|()| fs::rename(&tmp, &path)) {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        self.evict(&path)
    }

    /// Removes the least recently used entries (never `keep`) until the entries fit the
    /// cap, and temporary files that a killed writer left.
    fn evict(&self, keep: &Path) -> io::Result<()> {
        let now = SystemTime::now();
        let mut entries = vec![];
        for e in fs::read_dir(&self.dir)? {
            let e = e?;
            let Ok(meta) = e.metadata() else { continue };
            let path = e.path();
            let modified = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.starts_with('.') && name.ends_with(".tmp") {
                if now.duration_since(modified).is_ok_and(|age| age > STALE_TMP) {
                    let _ = fs::remove_file(&path);
                }
            } else if meta.is_file() && path.extension().is_some_and(|x| x == SUFFIX) {
                entries.push((modified, meta.len(), path));
            }
        }
        let mut total: u64 = entries.iter().map(|e| e.1).sum();
        entries.sort();
        for (_, len, path) in entries {
            if total <= self.max_bytes {
                break;
            }
            // Another run may have removed it already; either way it is gone.
            if path != keep && (fs::remove_file(&path).is_ok() || !path.exists()) {
                total -= len;
            }
        }
        Ok(())
    }
}

/// The host CPU's model and feature flags: the CPU plugin compiles for the host's
/// instruction set, so a cache shared between machines (a home directory on NFS) must not
/// give one machine's code to another (SIGILL). Empty where `/proc/cpuinfo` is missing.
pub(crate) fn host_cpu() -> &'static str {
    static CPU: OnceLock<String> = OnceLock::new();
    CPU.get_or_init(|| {
        let info = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let field = |name: &str| {
            info.lines().find(|l| l.split(':').next().is_some_and(|k| k.trim() == name)).unwrap_or("").to_string()
        };
        format!("{} {}\n{}\n{}", std::env::consts::ARCH, field("vendor_id"), field("model name"), field("flags"))
    })
}

fn encode(key: &Key, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(key);
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// The payload of an entry, if its header is podc's, names `key`, and its length and
/// checksum match.
fn decode<'a>(bytes: &'a [u8], key: &Key) -> Option<&'a [u8]> {
    let (header, payload) = bytes.split_at_checked(HEADER)?;
    let (magic, rest) = header.split_at(MAGIC.len());
    let (stored_key, rest) = rest.split_at(32);
    let (len, crc) = rest.split_at(8);
    let len = u64::from_le_bytes(len.try_into().ok()?);
    let crc = u32::from_le_bytes(crc.try_into().ok()?);
    let sound = magic == MAGIC && stored_key == key && len == payload.len() as u64 && crc == crc32fast::hash(payload);
    sound.then_some(payload)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_damage_is_a_miss() {
        let dir = tempfile::tempdir().unwrap();
        let cache = CompileCache::new(dir.path(), 1 << 20);
        let key = CompileCache::key(&[b"program"]);
        assert_eq!(cache.get(&key), None);
        cache.put(&key, b"executable").unwrap();
        assert_eq!(cache.get(&key).as_deref(), Some(&b"executable"[..]));

        let path = cache.entry_path(&key);
        let good = fs::read(&path).unwrap();
        let other = CompileCache::key(&[b"another program"]);
        // Truncated anywhere, one byte flipped anywhere, or filed under another key.
        for n in 0..good.len() {
            fs::write(&path, &good[..n]).unwrap();
            assert_eq!(cache.get(&key), None, "truncated to {n}");
            let mut bad = good.clone();
            bad[n] ^= 0x40;
            fs::write(&path, &bad).unwrap();
            assert_eq!(cache.get(&key), None, "byte {n} flipped");
        }
        fs::copy(&path, cache.entry_path(&other)).unwrap();
        fs::write(&path, &good).unwrap();
        assert_eq!(cache.get(&other), None);
        assert_eq!(cache.get(&key).as_deref(), Some(&b"executable"[..]));
    }

    #[test]
    fn key_parts_do_not_run_into_each_other() {
        assert_ne!(CompileCache::key(&[b"ab", b"c"]), CompileCache::key(&[b"a", b"bc"]));
    }

    #[test]
    fn the_least_recently_used_entries_go_first() {
        let dir = tempfile::tempdir().unwrap();
        // Room for two entries of 100 bytes and their headers, not three.
        let cache = CompileCache::new(dir.path(), 2 * (HEADER as u64 + 100) + 10);
        let keys: Vec<Key> = (0..4u8).map(|i| CompileCache::key(&[&[i]])).collect();
        let age = |k: &Key, secs: u64| {
            let f = File::options().append(true).open(cache.entry_path(k)).unwrap();
            f.set_modified(SystemTime::now() - Duration::from_secs(secs)).unwrap();
        };
        cache.put(&keys[0], &[0; 100]).unwrap();
        age(&keys[0], 30);
        cache.put(&keys[1], &[1; 100]).unwrap();
        age(&keys[1], 20);
        // A hit makes entry 0 the most recently used, so entry 1 goes when 2 arrives.
        assert!(cache.get(&keys[0]).is_some());
        cache.put(&keys[2], &[2; 100]).unwrap();
        let present = |k: &Key| cache.entry_path(k).exists();
        assert_eq!(keys[..3].iter().map(present).collect::<Vec<_>>(), [true, false, true]);
        // An entry larger than the cap is kept (until the next write), not thrown away.
        cache.put(&keys[3], &[3; 1000]).unwrap();
        assert_eq!(keys.iter().map(present).collect::<Vec<_>>(), [false, false, false, true]);
    }
}
