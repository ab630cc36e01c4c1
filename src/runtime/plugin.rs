//! Finding the PJRT plugin, and installing the CPU plugin on first use.
//!
//! Discovery looks, in order, at
//! 1. an explicit path (the CLI's `--plugin PATH`),
//! 2. the environment variable `PODC_PJRT_PLUGIN`,
//! 3. the cache (`PODC_CACHE`, else `~/.cache/podracer`), for the pinned CPU plugin
//!    `fastatomstruct-xla-cpu-2026.6.23/fastatomstruct_xla_cpu/libpjrt_cpu.so`.
//!
//! A path from 1 or 2 that does not exist is an error naming it (it never falls back to
//! the cache: a typo should not silently run on another backend). When the cache lacks
//! the plugin, it is installed with pip into a `.partial` directory which is then renamed
//! into place, so an interrupted install never leaves a half plugin where discovery
//! looks.

use std::env;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::runtime::{Result, RuntimeError};

/// Environment variable naming a plugin to use instead of the cached CPU plugin.
pub const PLUGIN_ENV: &str = "PODC_PJRT_PLUGIN";
/// Environment variable naming the cache directory (default `~/.cache/podracer`).
pub const CACHE_ENV: &str = "PODC_CACHE";
/// The PyPI package that ships the CPU plugin (an unmodified XLA PJRT CPU build).
pub const CPU_PLUGIN_PACKAGE: &str = "fastatomstruct-xla-cpu";
/// The pinned version of [`CPU_PLUGIN_PACKAGE`] (PJRT C API 0.106).
pub const CPU_PLUGIN_VERSION: &str = "2026.6.23";
/// The plugin library inside the installed package.
const CPU_PLUGIN_LIBRARY: &str = "fastatomstruct_xla_cpu/libpjrt_cpu.so";
/// Download size of the wheel, for the message shown while fetching it.
const CPU_PLUGIN_DOWNLOAD_SIZE: &str = "~63 MB";

/// Finds the plugin to load: `explicit`, else `PODC_PJRT_PLUGIN`, else the cached CPU
/// plugin, which is installed into the cache if missing.
pub fn find(explicit: Option<&Path>) -> Result<PathBuf> {
    if let Some(path) = explicit {
        return existing(path, "--plugin");
    }
    if let Some(value) = env::var_os(PLUGIN_ENV).filter(|v| !v.is_empty()) {
        return existing(Path::new(&value), PLUGIN_ENV);
    }
    let cache = cache_dir()?;
    let cached = cpu_plugin_path(&cache);
    if cached.is_file() {
        return Ok(cached);
    }
    install_cpu_plugin(&cache)
}

fn existing(path: &Path, origin: &'static str) -> Result<PathBuf> {
    if path.exists() {
        Ok(path.to_path_buf())
    } else {
        Err(RuntimeError::PluginMissing { path: path.to_path_buf(), origin })
    }
}

/// The cache directory: `PODC_CACHE`, else `$HOME/.cache/podracer`.
pub fn cache_dir() -> Result<PathBuf> {
    if let Some(dir) = env::var_os(CACHE_ENV).filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(dir));
    }
    let home = env::var_os("HOME").filter(|v| !v.is_empty()).ok_or(RuntimeError::NoCacheDir)?;
    Ok(PathBuf::from(home).join(".cache").join("podracer"))
}

/// Where the pinned CPU plugin lives in `cache` once installed.
pub fn cpu_plugin_path(cache: &Path) -> PathBuf {
    install_dir(cache).join(CPU_PLUGIN_LIBRARY)
}

fn install_dir(cache: &Path) -> PathBuf {
    cache.join(install_dir_name())
}

fn install_dir_name() -> String {
    format!("{CPU_PLUGIN_PACKAGE}-{CPU_PLUGIN_VERSION}")
}

/// Installs the pinned CPU plugin into `cache` with pip and returns the plugin's path.
/// Says so on stderr first, since it downloads about 63 MB. pip's own output goes to
/// stderr too, keeping stdout for the program's results.
pub fn install_cpu_plugin(cache: &Path) -> Result<PathBuf> {
    let requirement = format!("{CPU_PLUGIN_PACKAGE}=={CPU_PLUGIN_VERSION}");
    let target = install_dir(cache);
    let partial = cache.join(format!("{}.partial", install_dir_name()));
    let command = format!("python3 -m pip install --no-deps --target {} {requirement}", target.display());
    let fail = |reason: String| RuntimeError::Install { reason, command: command.clone() };

    fs::create_dir_all(cache).map_err(|e| fail(format!("cannot create the cache {}: {e}", cache.display())))?;
    // Only one process installs at a time; the others wait here and then find the plugin.
    let lock = File::create(cache.join(".install.lock"))
        .map_err(|e| fail(format!("cannot create a lock file in {}: {e}", cache.display())))?;
    lock.lock().map_err(|e| fail(format!("cannot lock {}: {e}", cache.display())))?;
    let plugin = cpu_plugin_path(cache);
    if plugin.is_file() {
        return Ok(plugin);
    }
    // Leftovers of an interrupted install, or a target without the plugin, are ours to
    // remove: both live in podracer's cache under names only podracer uses.
    for stale in [&partial, &target] {
        if stale.exists() {
            fs::remove_dir_all(stale).map_err(|e| fail(format!("cannot remove {}: {e}", stale.display())))?;
        }
    }

    eprintln!(
        "podc: fetching the PJRT CPU plugin ({requirement}, {CPU_PLUGIN_DOWNLOAD_SIZE}) into {}",
        target.display()
    );
    let status = Command::new("python3")
        .args(["-m", "pip", "install", "--no-deps", "--disable-pip-version-check", "--target"])
        .arg(&partial)
        .arg(&requirement)
        .stdin(Stdio::null())
        .stdout(Stdio::from(io::stderr()))
        .status();
    let installed = match status {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err("python3 was not found".to_string()),
        Err(e) => Err(format!("cannot run python3: {e}")),
        Ok(status) if !status.success() => Err(format!("pip failed ({status})")),
        Ok(_) if !partial.join(CPU_PLUGIN_LIBRARY).is_file() => {
            Err(format!("the installed package has no {CPU_PLUGIN_LIBRARY}"))
        }
        Ok(_) => Ok(()),
    };
    if let Err(reason) = installed {
        // Best effort: a leftover is removed by the next install anyway.
        let _ = fs::remove_dir_all(&partial);
        return Err(fail(reason));
    }
    fs::rename(&partial, &target)
        .map_err(|e| fail(format!("cannot move {} to {}: {e}", partial.display(), target.display())))?;
    Ok(plugin)
}
