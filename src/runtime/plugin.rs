//! Finding the PJRT plugin of a backend, and installing it on first use.
//!
//! Discovery looks, in order, at
//! 1. an explicit path (the CLI's `--plugin PATH`),
//! 2. the environment variable `PODC_PJRT_PLUGIN`,
//! 3. for `cuda`, the `jax-cuda13-pjrt` package of the user's Python (`python3`), where JAX
//!    would find it;
//! 4. the cache (`PODC_CACHE`, else `~/.cache/podracer`), for the pinned plugin of the
//!    backend: `fastatomstruct-xla-cpu` for `cpu`, `jax-cuda13-pjrt` with the NVIDIA
//!    runtime wheels it needs for `cuda`.
//!
//! A path from 1 or 2 that does not exist is an error naming it (it never falls back to
//! the cache: a typo should not silently run on another backend). When the cache lacks
//! the plugin, it is installed with pip into a `.partial` directory which is then renamed
//! into place, so an interrupted install never leaves a half plugin where discovery
//! looks. For `cuda`, the NVIDIA driver is looked for first: without one, nothing is
//! fetched.
//!
//! The CUDA plugin opens NVIDIA's libraries (cuBLAS, cuDNN, NCCL, ..) by soname at run
//! time. Installed as wheels, they live under `nvidia/` beside `jax_plugins/`; as JAX does,
//! [`Found::preload`] loads them first so that the plugin's lookups find them.

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
/// The kind of PJRT plugin: where it is found, and which create options it takes
/// ([`crate::runtime::ClientOptions`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Backend {
    /// XLA's CPU plugin.
    #[default]
    Cpu,
    /// XLA's CUDA plugin for NVIDIA GPUs.
    Cuda,
}

impl std::str::FromStr for Backend {
    type Err = String;

    fn from_str(s: &str) -> std::result::Result<Backend, String> {
        match s {
            "cpu" => Ok(Backend::Cpu),
            "cuda" => Ok(Backend::Cuda),
            _ => Err(format!("unknown backend `{s}`: use `cpu` or `cuda`")),
        }
    }
}

/// A pinned plugin package that podc installs into its cache.
struct Package {
    /// pip requirements, the plugin's package first; installed with `--no-deps`.
    requirements: &'static [&'static str],
    /// The plugin library inside the installed tree.
    library: &'static str,
    /// About how much pip downloads, for the message shown before it does.
    download: &'static str,
}

const CPU_PACKAGE: Package = Package {
    requirements: &["fastatomstruct-xla-cpu==2026.6.23"],
    library: "fastatomstruct_xla_cpu/libpjrt_cpu.so",
    download: "~63 MB",
};

/// `jax-cuda13-pjrt` 0.11.2 (PJRT C API 0.115) and the NVIDIA wheels that
/// `jax-cuda13-plugin[with-cuda]` brings, at the versions pip resolved for them on
/// 2026-12-05 (wheel sizes from PyPI: 2.4 GB in all).
const CUDA_PACKAGE: Package = Package {
    requirements: &[
        "jax-cuda13-pjrt==0.11.2",
        "nvidia-cuda-runtime==13.5.37",
        "nvidia-cuda-nvrtc==13.5.37",
        "nvidia-cuda-nvcc==13.5.37",
        "nvidia-nvvm==13.5.37",
        "nvidia-cuda-crt==13.5.37",
        "nvidia-nvjitlink==13.5.37",
        "nvidia-cuda-cupti==13.5.25",
        "nvidia-cublas==13.10.0.20",
        "nvidia-cufft==12.5.0.14",
        "nvidia-cusolver==12.4.1.2",
        "nvidia-cusparse==12.9.4.2",
        "nvidia-cudnn-cu13==9.28.1.4",
        "nvidia-nccl-cu13==2.32.6",
        "nvidia-nvshmem-cu13==3.8.0",
    ],
    library: CUDA_PLUGIN_LIBRARY,
    download: "~2.4 GB",
};

/// The CUDA plugin inside its package's tree (site-packages or a pip `--target`).
const CUDA_PLUGIN_LIBRARY: &str = "jax_plugins/xla_cuda13/xla_cuda_plugin.so";

/// The NVIDIA driver's library: without it no CUDA program runs.
pub const CUDA_DRIVER: &str = "libcuda.so.1";

/// NVIDIA's libraries as JAX's CUDA plugin package loads them before the plugin (its
/// `_load_nvidia_libraries`, CUDA 13): directory under `nvidia/`, then library.
const NVIDIA_LIBRARIES: [(&str, &str); 11] = [
    ("cu13", "libcudart.so.13"),
    ("cu13", "libnvrtc.so.13"),
    ("cu13", "libcublas.so.13"),
    ("cu13", "libcublasLt.so.13"),
    ("nccl", "libnccl.so.2"),
    ("cu13", "libcupti.so.13"),
    ("cu13", "libcusparse.so.12"),
    ("cu13", "libcusolver.so.12"),
    ("cu13", "libcufft.so.12"),
    ("nvshmem", "libnvshmem_host.so.3"),
    ("cudnn", "libcudnn.so.9"),
];

/// A plugin to load, with what must come before it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Found {
    pub path: PathBuf,
    /// Libraries to load first, in order (NVIDIA's, for the CUDA plugin).
    pub preload: Vec<PathBuf>,
    /// For the CUDA plugin, the CUDA tree with `bin/ptxas` and `nvvm/libdevice` when its
    /// wheel is installed beside the plugin (XLA's `xla_gpu_cuda_data_dir`).
    pub cuda_data_dir: Option<PathBuf>,
}

impl Found {
    /// `path` as the plugin of `backend`: for CUDA, with the NVIDIA libraries and CUDA tree
    /// of the wheels installed beside it.
    pub fn at(path: PathBuf, backend: Backend) -> Found {
        // `<site>/jax_plugins/xla_cuda13/xla_cuda_plugin.so` has NVIDIA's wheels in `<site>/nvidia`.
        let nvidia = match backend {
            Backend::Cpu => None,
            Backend::Cuda => {
                path.parent().and_then(Path::parent).and_then(Path::parent).map(|site| site.join("nvidia"))
            }
        };
        let Some(nvidia) = nvidia else { return Found { path, preload: vec![], cuda_data_dir: None } };
        let preload = NVIDIA_LIBRARIES
            .iter()
            .map(|(dir, lib)| nvidia.join(dir).join("lib").join(lib))
            .filter(|p| p.is_file())
            .collect();
        let cu13 = nvidia.join("cu13");
        let cuda_data_dir = (cu13.join("bin").is_dir() || cu13.join("nvvm").is_dir()).then_some(cu13);
        Found { path, preload, cuda_data_dir }
    }
}

/// Finds the plugin of `backend`: `explicit`, else `PODC_PJRT_PLUGIN`, else (CUDA) the
/// user's Python's `jax-cuda13-pjrt`, else the cached one, installed into the cache if
/// missing. For CUDA, a machine without the NVIDIA driver is an error before any of that.
pub fn find(backend: Backend, explicit: Option<&Path>) -> Result<Found> {
    if backend == Backend::Cuda && !super::pjrt::library_loads(CUDA_DRIVER) {
        return Err(RuntimeError::NoCudaDriver);
    }
    if let Some(path) = explicit {
        return existing(path, "--plugin").map(|p| Found::at(p, backend));
    }
    if let Some(value) = env::var_os(PLUGIN_ENV).filter(|v| !v.is_empty()) {
        return existing(Path::new(&value), PLUGIN_ENV).map(|p| Found::at(p, backend));
    }
    if backend == Backend::Cuda
        && let Some(path) = python_cuda_plugin(Command::new("python3"))
    {
        return Ok(Found::at(path, backend));
    }
    let cache = cache_dir()?;
    let package = package(backend);
    let cached = install_dir(&cache, package).join(package.library);
    let path = if cached.is_file() { cached } else { install(&cache, package)? };
    Ok(Found::at(path, backend))
}

/// The plugin [`find`] gives, as a run's fingerprint names it: the pinned package when it
/// is podc's own install in the cache (`fastatomstruct-xla-cpu==2026.6.23`), else the
/// library's file name and SHA-256 (any other build may round otherwise).
pub fn identity(backend: Backend, explicit: Option<&Path>) -> Result<String> {
    let found = find(backend, explicit)?;
    let package = package(backend);
    let pinned = cache_dir().map(|c| install_dir(&c, package).join(package.library));
    let same = |a: &Path, b: &Path| fs::canonicalize(a).ok().is_some_and(|a| fs::canonicalize(b).ok() == Some(a));
    if pinned.as_deref().is_ok_and(|p| same(p, &found.path)) {
        return Ok(package.requirements[0].to_string());
    }
    let bytes = fs::read(&found.path)
        .map_err(|e| RuntimeError::Usage(format!("cannot read the plugin {}: {e}", found.path.display())))?;
    let name = found.path.file_name().map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    Ok(format!("{name} sha256:{:x}", <sha2::Sha256 as sha2::Digest>::digest(&bytes)))
}

/// The CUDA plugin of `jax-cuda13-pjrt` in the packages of `python`, found without
/// importing it (which would import JAX).
fn python_cuda_plugin(mut python: Command) -> Option<PathBuf> {
    let script = "import importlib.util as u; s = u.find_spec('jax_plugins.xla_cuda13'); \
                  print(s.submodule_search_locations[0] if s else '')";
    let out = python.args(["-c", script]).stdin(Stdio::null()).stderr(Stdio::null()).output().ok()?;
    let dir = String::from_utf8(out.stdout).ok()?;
    let plugin = Path::new(dir.trim()).join("xla_cuda_plugin.so");
    (out.status.success() && !dir.trim().is_empty() && plugin.is_file()).then_some(plugin)
}

fn package(backend: Backend) -> &'static Package {
    match backend {
        Backend::Cpu => &CPU_PACKAGE,
        Backend::Cuda => &CUDA_PACKAGE,
    }
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
    install_dir(cache, &CPU_PACKAGE).join(CPU_PACKAGE.library)
}

/// A package's directory in the cache, named after its first requirement
/// (`fastatomstruct-xla-cpu-2026.6.23`).
fn install_dir(cache: &Path, package: &Package) -> PathBuf {
    cache.join(install_dir_name(package))
}

fn install_dir_name(package: &Package) -> String {
    package.requirements[0].replace("==", "-")
}

/// Installs `package` into `cache` with pip and returns the plugin's path. Says so on
/// stderr first, with the download's size. pip's own output goes to stderr too, keeping
/// stdout for the program's results.
fn install(cache: &Path, package: &Package) -> Result<PathBuf> {
    let requirements = package.requirements.join(" ");
    let target = install_dir(cache, package);
    let partial = cache.join(format!("{}.partial", install_dir_name(package)));
    let command = format!("python3 -m pip install --no-deps --target {} {requirements}", target.display());
    let fail = |reason: String| RuntimeError::Install { reason, command: command.clone() };

    fs::create_dir_all(cache).map_err(|e| fail(format!("cannot create the cache {}: {e}", cache.display())))?;
    // Only one process installs at a time; the others wait here and then find the plugin.
    let lock = File::create(cache.join(".install.lock"))
        .map_err(|e| fail(format!("cannot create a lock file in {}: {e}", cache.display())))?;
    lock.lock().map_err(|e| fail(format!("cannot lock {}: {e}", cache.display())))?;
    let plugin = target.join(package.library);
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

    eprintln!("podc: fetching the PJRT plugin ({requirements}; {}) into {}", package.download, target.display());
    let status = Command::new("python3")
        .args(["-m", "pip", "install", "--no-deps", "--disable-pip-version-check", "--target"])
        .arg(&partial)
        .args(package.requirements)
        .stdin(Stdio::null())
        .stdout(Stdio::from(io::stderr()))
        .status();
    let installed = match status {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err("python3 was not found".to_string()),
        Err(e) => Err(format!("cannot run python3: {e}")),
        Ok(status) if !status.success() => Err(format!("pip failed ({status})")),
        Ok(_) if !partial.join(package.library).is_file() => {
            Err(format!("the installed package has no {}", package.library))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A pip tree with the CUDA plugin and some of NVIDIA's libraries (empty files).
    fn cuda_tree(site: &Path, libraries: &[&str]) -> PathBuf {
        let plugin = site.join(CUDA_PLUGIN_LIBRARY);
        fs::create_dir_all(plugin.parent().unwrap()).unwrap();
        fs::write(&plugin, b"").unwrap();
        fs::write(plugin.with_file_name("__init__.py"), b"").unwrap();
        for lib in libraries {
            let path = site.join("nvidia").join(lib);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, b"").unwrap();
        }
        plugin
    }

    #[test]
    fn backends_by_name() {
        assert_eq!("cuda".parse::<Backend>(), Ok(Backend::Cuda));
        assert_eq!("cpu".parse::<Backend>(), Ok(Backend::Cpu));
        assert_eq!("tpu".parse::<Backend>(), Err("unknown backend `tpu`: use `cpu` or `cuda`".into()));
    }

    #[test]
    fn the_cuda_plugin_comes_with_nvidias_libraries_in_jaxs_order() {
        let dir = tempfile::tempdir().unwrap();
        let libs =
            ["cudnn/lib/libcudnn.so.9", "cu13/lib/libcublas.so.13", "cu13/lib/libcudart.so.13", "cu13/bin/ptxas"];
        let plugin = cuda_tree(dir.path(), &libs);
        let found = Found::at(plugin.clone(), Backend::Cuda);
        let nvidia = dir.path().join("nvidia");
        let want =
            ["cu13/lib/libcudart.so.13", "cu13/lib/libcublas.so.13", "cudnn/lib/libcudnn.so.9"].map(|l| nvidia.join(l));
        assert_eq!(found.preload, want);
        assert_eq!(found.cuda_data_dir, Some(nvidia.join("cu13")));
        // The CPU plugin loads alone, wherever it is.
        assert_eq!(
            Found::at(plugin.clone(), Backend::Cpu),
            Found { path: plugin, preload: vec![], cuda_data_dir: None }
        );
    }

    #[test]
    fn the_cuda_plugin_is_found_in_a_pythons_packages() {
        let dir = tempfile::tempdir().unwrap();
        let plugin = cuda_tree(dir.path(), &[]);
        let mut python = Command::new("python3");
        python.env("PYTHONPATH", dir.path());
        assert_eq!(python_cuda_plugin(python).map(|p| p.canonicalize().unwrap()), Some(plugin.canonicalize().unwrap()));
        let mut elsewhere = Command::new("python3");
        elsewhere.env("PYTHONPATH", dir.path().join("nothing"));
        // The machine's own python3 may have JAX's plugin, but not at this path.
        assert_ne!(python_cuda_plugin(elsewhere), Some(plugin));
        assert_eq!(python_cuda_plugin(Command::new("/nonexistent/python3")), None);
    }

    /// Without the NVIDIA driver, `cuda` is refused before anything is looked up or fetched.
    #[test]
    fn no_driver_no_cuda() {
        if super::super::pjrt::library_loads(CUDA_DRIVER) {
            eprintln!("skipped: this machine has the NVIDIA driver");
            return;
        }
        let err = find(Backend::Cuda, Some(Path::new("/nonexistent/plugin.so"))).unwrap_err();
        assert!(matches!(err, RuntimeError::NoCudaDriver), "{err}");
        assert_eq!(
            err.to_string(),
            "--backend cuda: this machine has no NVIDIA driver (libcuda.so.1 was not found); run on a machine with an NVIDIA GPU, or use --backend cpu"
        );
    }
}
