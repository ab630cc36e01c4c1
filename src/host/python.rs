//! Finding the Python that runs env workers, and making podracer's own venv on first use.
//!
//! Discovery looks, in order, at
//! 1. an explicit path (the CLI's `--python`),
//! 2. the environment variable `PODC_PYTHON`,
//! 3. `$VIRTUAL_ENV/bin/python` (an activated virtual environment),
//! 4. the cache (`PODC_CACHE`, else `~/.cache/podracer`, as for the PJRT plugin): a venv
//!    with pinned versions of the backend's packages, made with `python3 -m venv` and pip on
//!    first use, and announced on stderr. EnvPool is added to it only when an `envpool:`
//!    env is first used (it is large: ~850 MB with its assets), ale-py when an `ale:` env is,
//!    pygame when a `gymnasium:` env is first drawn (`podc play`).
//!
//! A Python from 1-3 is used as it is: when it lacks a package, the worker says so at
//! start-up and the error gives the exact pip command ([`missing_package`]).

use super::HostError;
use super::uri::Backend;
use std::env;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Environment variable naming the Python for env workers.
pub const PYTHON_ENV: &str = "PODC_PYTHON";
/// The pinned packages of the cache venv. numpy 2.2 still supports Python 3.10;
/// EnvPool 1.2.5 is the last release that installs on Python 3.11.
pub const NUMPY: &str = "numpy==2.2.6";
pub const GYMNASIUM: &str = "gymnasium==1.2.2";
pub const ENVPOOL: &str = "envpool==1.2.5";
/// ale-py 0.12.1: the C++ vector env with same-step auto-reset, wheels for CPython
/// 3.10-3.14 on manylinux x86_64 and aarch64 and macOS, the ROMs inside (~10 MB).
pub const ALE_PY: &str = "ale-py==0.12.1";
/// pygame 2.6.1: what Gymnasium's classic-control and Box2D envs draw their
/// `rgb_array` frames with (`podc play`); wheels for CPython 3.8-3.13.
pub const PYGAME: &str = "pygame==2.6.1";
/// Box2D 2.3.10: a binary wheel of what Gymnasium's Box2D envs (LunarLander,
/// BipedalWalker, CarRacing) import, where `gymnasium[box2d]` builds it from source with
/// swig.
pub const BOX2D: &str = "box2d==2.3.10";
/// About how much each pinned package takes, said before it is installed.
const SIZES: [(&str, &str); 6] = [
    (NUMPY, "~16 MB"),
    (GYMNASIUM, "~1 MB"),
    (ENVPOOL, "~850 MB with its assets"),
    (ALE_PY, "~10 MB"),
    (PYGAME, "~14 MB"),
    (BOX2D, "~2.5 MB"),
];

/// Requirements as an install announces them: `envpool==1.2.5 (~850 MB with its assets)`.
fn announced(reqs: &[&str]) -> String {
    let size = |r: &str| SIZES.iter().find(|(p, _)| *p == r).map_or(String::new(), |(_, s)| format!(" ({s})"));
    reqs.iter().map(|r| format!("{r}{}", size(r))).collect::<Vec<_>>().join(", ")
}

/// The venv's directory in the cache; a new set of pins gets a new name.
const VENV_DIR: &str = "python-envs-gymnasium1.2.2-numpy2.2.6";
/// The requirements installed so far, one a line, written after each successful pip run.
const INSTALLED: &str = "podracer-installed.txt";

/// What a backend needs installed.
pub fn requirements(backend: Backend) -> Vec<&'static str> {
    match backend {
        Backend::EnvPool => vec![NUMPY, GYMNASIUM, ENVPOOL],
        Backend::Ale => vec![NUMPY, GYMNASIUM, ALE_PY],
        Backend::Gymnasium | Backend::Pod => vec![NUMPY, GYMNASIUM],
    }
}

/// What drawing a backend's envs needs besides ([`find_rendering`]).
pub fn render_requirements(backend: Backend) -> Vec<&'static str> {
    match backend {
        Backend::Gymnasium => vec![PYGAME],
        Backend::EnvPool | Backend::Ale | Backend::Pod => vec![],
    }
}

/// The Python to run `backend`'s workers with.
pub fn find(explicit: Option<&Path>, backend: Backend) -> Result<PathBuf, HostError> {
    find_with(explicit, requirements(backend))
}

/// The Python to run `backend`'s workers with when they draw frames: the cache venv also
/// gets what rendering needs.
pub fn find_rendering(explicit: Option<&Path>, backend: Backend) -> Result<PathBuf, HostError> {
    find_with(explicit, [requirements(backend), render_requirements(backend)].concat())
}

fn find_with(explicit: Option<&Path>, wanted: Vec<&'static str>) -> Result<PathBuf, HostError> {
    if let Some(p) = explicit {
        return existing(p, "--python");
    }
    if let Some(v) = env::var_os(PYTHON_ENV).filter(|v| !v.is_empty()) {
        return existing(Path::new(&v), PYTHON_ENV);
    }
    if let Some(v) = env::var_os("VIRTUAL_ENV").filter(|v| !v.is_empty()) {
        return existing(&Path::new(&v).join("bin").join("python"), "VIRTUAL_ENV");
    }
    let cache = crate::runtime::plugin::cache_dir().map_err(|e| HostError::Python {
        reason: e.to_string(),
        fix: format!("set {PYTHON_ENV} to a Python that has {}", wanted.join(" ")),
    })?;
    cache_venv_with(&cache, &wanted)
}

/// A bare name (`python3`) is looked up on PATH when the worker starts; a path must exist.
fn existing(p: &Path, origin: &str) -> Result<PathBuf, HostError> {
    if p.components().count() > 1 && !p.exists() {
        let pins = requirements(Backend::Gymnasium).join(" ");
        let fix = match origin {
            "--python" => format!("pass --python a Python that has {pins}"),
            "VIRTUAL_ENV" => "activate an existing virtual environment, or deactivate it to use podc's own".into(),
            _ => format!("set {origin} to a Python that has {pins}, or unset it to use podc's own"),
        };
        return Err(HostError::Python {
            reason: format!("the Python given by {origin} ({}) does not exist", p.display()),
            fix,
        });
    }
    Ok(p.to_path_buf())
}

/// The error for a Python that cannot import `module`: the command that installs it, into
/// podc's own venv with `podc env install`, else with the Python's pip.
pub fn missing_package(python: &Path, module: &str, backend: Backend) -> HostError {
    let pins = [requirements(backend), render_requirements(backend), vec![BOX2D]].concat();
    // Modules are named with `_` where their distributions have `-` (`ale_py`, `ale-py`).
    let dist = module.replace('_', "-").to_lowercase();
    let wanted = pins.iter().find(|r| r.split("==").next() == Some(&dist)).copied().unwrap_or(module);
    let ours = python.components().any(|c| c.as_os_str() == VENV_DIR);
    HostError::MissingPackage {
        python: python.display().to_string(),
        module: module.to_string(),
        backend: backend.scheme().to_string(),
        command: match ours {
            true => format!("podc env install {wanted}"),
            false => format!("{} -m pip install {wanted}", python.display()),
        },
    }
}

/// `podc env install`: `packages` (pip requirements) added to podc's own venv, as binary
/// wheels where there are any; the venv's Python.
pub fn install(packages: &[String]) -> Result<PathBuf, HostError> {
    let cache = crate::runtime::plugin::cache_dir()
        .map_err(|e| HostError::Python { reason: e.to_string(), fix: format!("set {PYTHON_ENV} instead") })?;
    let wanted: Vec<&str> =
        requirements(Backend::Gymnasium).into_iter().chain(packages.iter().map(String::as_str)).collect();
    cache_venv_with(&cache, &wanted)
}

/// The cache venv's Python, with `backend`'s packages installed (made or extended now if
/// needed; one process at a time, under a lock).
pub fn cache_venv(cache: &Path, backend: Backend) -> Result<PathBuf, HostError> {
    cache_venv_with(cache, &requirements(backend))
}

/// The cache venv's Python with the requirements `wanted` installed.
pub fn cache_venv_with(cache: &Path, wanted: &[&str]) -> Result<PathBuf, HostError> {
    let dir = cache.join(VENV_DIR);
    let python = dir.join("bin").join("python");
    if missing(&dir, wanted).is_empty() && python.exists() {
        return Ok(python);
    }
    let manual = format!(
        "to make it yourself, run: python3 -m venv {0} && {0}/bin/python -m pip install {1}\n  or set {PYTHON_ENV} to a Python that has them",
        dir.display(),
        wanted.join(" ")
    );
    let fail = |reason: String| HostError::Python { reason, fix: manual.clone() };
    fs::create_dir_all(cache).map_err(|e| fail(format!("cannot create the cache {}: {e}", cache.display())))?;
    let lock = File::create(cache.join(".python-envs.lock"))
        .map_err(|e| fail(format!("cannot create a lock file in {}: {e}", cache.display())))?;
    lock.lock().map_err(|e| fail(format!("cannot lock {}: {e}", cache.display())))?;

    if !python.exists() {
        // Made under another name and renamed when complete, so that an interrupted
        // creation never looks finished. A venv survives the move: its interpreter links
        // to the base Python and pip is always run as `python -m pip`.
        let partial = cache.join(format!("{VENV_DIR}.partial"));
        for stale in [&partial, &dir] {
            if stale.exists() {
                fs::remove_dir_all(stale).map_err(|e| fail(format!("cannot remove {}: {e}", stale.display())))?;
            }
        }
        let base = requirements(Backend::Gymnasium);
        eprintln!(
            "podc: creating a Python environment for host envs ({}) in {} (first use only)",
            announced(&base),
            dir.display()
        );
        let made = run(Command::new("python3").args(["-m", "venv"]).arg(&partial), "python3 -m venv")
            .and_then(|()| pip_install(&partial.join("bin").join("python"), &base))
            .and_then(|()| record(&partial, &base));
        if let Err(reason) = made {
            // Best effort: a leftover is removed by the next attempt anyway.
            let _ = fs::remove_dir_all(&partial);
            return Err(fail(reason));
        }
        fs::rename(&partial, &dir)
            .map_err(|e| fail(format!("cannot move {} to {}: {e}", partial.display(), dir.display())))?;
    }
    let more = missing(&dir, wanted);
    if !more.is_empty() {
        eprintln!("podc: installing {} into {} (first use only)", announced(&more), dir.display());
        pip_install(&python, &more).and_then(|()| record(&dir, &more)).map_err(fail)?;
    }
    Ok(python)
}

/// The requirements of `wanted` that the venv does not record as installed.
fn missing<'a>(dir: &Path, wanted: &[&'a str]) -> Vec<&'a str> {
    let have = fs::read_to_string(dir.join(INSTALLED)).unwrap_or_default();
    wanted.iter().copied().filter(|r| !have.lines().any(|l| l.trim() == *r)).collect()
}

fn record(dir: &Path, reqs: &[&str]) -> Result<(), String> {
    let path = dir.join(INSTALLED);
    let mut text = fs::read_to_string(&path).unwrap_or_default();
    for r in reqs {
        text.push_str(r);
        text.push('\n');
    }
    fs::write(&path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn pip_install(python: &Path, reqs: &[&str]) -> Result<(), String> {
    let mut cmd = Command::new(python);
    cmd.args(["-m", "pip", "install", "--disable-pip-version-check", "--prefer-binary"]).args(reqs);
    run(&mut cmd, "pip install")
}

/// Runs a command with its output on stderr (stdout stays for the program's results).
fn run(cmd: &mut Command, what: &str) -> Result<(), String> {
    match cmd.stdin(Stdio::null()).stdout(Stdio::from(io::stderr())).status() {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(format!("{what}: the program was not found")),
        Err(e) => Err(format!("{what}: {e}")),
        Ok(s) if !s.success() => Err(format!("{what} failed ({s})")),
        Ok(_) => Ok(()),
    }
}

/// The worker script as a file: written once per content into the cache (else the temp
/// directory), under a name with its checksum so that versions of podc never clash.
pub fn worker_script() -> Result<PathBuf, HostError> {
    let text = super::worker::SCRIPT;
    let name = format!("worker-{:08x}.py", crc32fast::hash(text.as_bytes()));
    let dir = crate::runtime::plugin::cache_dir()
        .map(|c| c.join("host"))
        .ok()
        .filter(|d| fs::create_dir_all(d).is_ok())
        .unwrap_or_else(env::temp_dir);
    let path = dir.join(&name);
    if fs::read_to_string(&path).is_ok_and(|t| t == text) {
        return Ok(path);
    }
    // Written aside and renamed, so a concurrent podc never runs half a script.
    let tmp = dir.join(format!("{name}.{}.tmp", std::process::id()));
    fs::write(&tmp, text)
        .and_then(|()| fs::rename(&tmp, &path))
        .map_err(|e| HostError::Io(format!("cannot write the env worker script to {}: {e}", path.display())))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_modules_name_their_pinned_distributions() {
        let python = Path::new("/venv/bin/python");
        for (module, backend, pin) in
            [("ale_py", Backend::Ale, ALE_PY), ("envpool", Backend::EnvPool, ENVPOOL), ("numpy", Backend::Ale, NUMPY)]
        {
            let e = missing_package(python, module, backend).to_string();
            assert!(e.ends_with(&format!("run: /venv/bin/python -m pip install {pin}")), "{e}");
        }
        // Gymnasium's Box2D envs import `Box2D`; in podc's own venv, `podc env install`.
        let ours = Path::new("/cache").join(VENV_DIR).join("bin/python");
        let e = missing_package(&ours, "Box2D", Backend::Gymnasium).to_string();
        assert!(e.ends_with(&format!("run: podc env install {BOX2D}")), "{e}");
        assert_eq!(announced(&[ENVPOOL, "other==1"]), "envpool==1.2.5 (~850 MB with its assets), other==1");
    }
}
