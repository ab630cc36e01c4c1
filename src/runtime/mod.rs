//! The runtime: finds a PJRT plugin, loads it, and compiles, transfers and executes
//! StableHLO programs through it.
//!
//! PJRT is the C API that XLA's backends (CPU, CUDA, TPU) export from a shared library.
//! podracer owns a small binding of the part it needs ([`pjrt`]); [`plugin`] finds the
//! library (a `--plugin` path, `PODC_PJRT_PLUGIN`, or the cache, installing the CPU plugin
//! with pip on first use); [`Runtime::open`] puts the two together. A client may keep
//! compiled executables between runs ([`cache`], [`Client::with_compile_cache`]).
//!
//! ```no_run
//! use podracer::array::Array;
//! use podracer::runtime::Runtime;
//!
//! let client = Runtime::open(None, None)?;
//! let exe = client.compile(
//!     "func.func public @main(%x: tensor<2xf32>) -> tensor<2xf32> {
//!        %y = stablehlo.add %x, %x : tensor<2xf32>
//!        return %y : tensor<2xf32>
//!      }",
//!     1,
//! )?;
//! let x = client.upload(&Array::f32(vec![2], vec![1.0, 2.0]), 0)?;
//! let y = exe.execute(&[&x])?;
//! assert_eq!(y[0].download()?, Array::f32(vec![2], vec![2.0, 4.0]));
//! # Ok::<(), podracer::runtime::RuntimeError>(())
//! ```

// All `unsafe` of the runtime is confined to `pjrt::ffi`, which opts back in.
#![deny(unsafe_code)]

pub mod cache;
pub mod pjrt;
pub mod plugin;

use std::fmt;
use std::path::{Path, PathBuf};

pub use cache::{CacheStatus, CompileCache};
pub use pjrt::{ApiVersion, Buffer, Client, ClientOptions, Device, Executable, XlaOption};
pub use plugin::Backend;

/// Everything that can go wrong in the runtime. None of these is a panic: a bad plugin,
/// a failed install, a program XLA rejects and a misuse of the API all end up here.
#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    /// A plugin path given explicitly does not exist.
    #[error("PJRT plugin {} (given by {origin}) does not exist", path.display())]
    PluginMissing {
        /// The path as given.
        path: PathBuf,
        /// Where the path came from: `--plugin` or `PODC_PJRT_PLUGIN`.
        origin: &'static str,
    },
    /// The dynamic loader could not load the file (not a shared library, wrong
    /// architecture, missing dependencies, …).
    #[error("cannot load PJRT plugin {}: {reason}", path.display())]
    PluginLoad {
        /// The plugin's path.
        path: PathBuf,
        /// The loader's explanation.
        reason: String,
    },
    /// The library loaded but is not a usable PJRT plugin.
    #[error("{} is not a usable PJRT plugin: {reason}", path.display())]
    NotAPlugin {
        /// The plugin's path.
        path: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// The plugin lacks a function of the C API that podracer calls.
    #[error("the PJRT plugin does not implement {0}")]
    MissingFunction(&'static str),
    /// The plugin reported an error.
    #[error("PJRT error ({code}): {message}")]
    Pjrt {
        /// The status code (absl codes: 3 is INVALID_ARGUMENT, …).
        code: ErrorCode,
        /// The plugin's message.
        message: String,
    },
    /// Neither `PODC_CACHE` nor `HOME` is set, so there is no cache to look in.
    #[error(
        "no cache directory for the PJRT plugin: set {} (or HOME), or set {} to a plugin",
        plugin::CACHE_ENV,
        plugin::PLUGIN_ENV
    )]
    NoCacheDir,
    /// Installing the CPU plugin into the cache failed.
    #[error(
        "could not install the PJRT plugin: {reason}\n  to install it yourself, run: {command}\n  or set {}=/path/to/the/plugin.so (or pass --plugin PATH)",
        plugin::PLUGIN_ENV
    )]
    Install {
        /// What failed.
        reason: String,
        /// The exact command that installs the plugin where discovery looks for it.
        command: String,
    },
    /// `--backend cuda` on a machine without the NVIDIA driver.
    #[error(
        "--backend cuda: this machine has no NVIDIA driver ({} was not found); run on a machine with an NVIDIA GPU, or use --backend cpu",
        plugin::CUDA_DRIVER
    )]
    NoCudaDriver,
    /// The CUDA plugin found the driver but no GPU it may use.
    #[error(
        "--backend cuda: no NVIDIA GPU is visible ({0}); check `nvidia-smi` and CUDA_VISIBLE_DEVICES, or use --backend cpu"
    )]
    NoGpu(String),
    /// A device index past the client's devices.
    #[error("device index {index} is out of range: the client has {count} device(s)")]
    NoSuchDevice {
        /// The index asked for.
        index: usize,
        /// How many devices the client has.
        count: usize,
    },
    /// The API was used in a way that cannot work (e.g. argument lists for the wrong
    /// number of devices, a buffer from another client).
    #[error("{0}")]
    Usage(String),
    /// An element type podracer has no host representation for.
    #[error("unsupported element type {0} (podracer arrays are f32, i32, u32 or bool)")]
    UnsupportedType(String),
}

/// Shorthand for results of the runtime.
pub type Result<T> = std::result::Result<T, RuntimeError>;

/// A PJRT error code (the absl status codes), printed by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ErrorCode(pub i32);

impl ErrorCode {
    /// The absl name of the code, e.g. `INVALID_ARGUMENT`.
    pub fn name(self) -> &'static str {
        const NAMES: [&str; 17] = [
            "OK",
            "CANCELLED",
            "UNKNOWN",
            "INVALID_ARGUMENT",
            "DEADLINE_EXCEEDED",
            "NOT_FOUND",
            "ALREADY_EXISTS",
            "PERMISSION_DENIED",
            "RESOURCE_EXHAUSTED",
            "FAILED_PRECONDITION",
            "ABORTED",
            "OUT_OF_RANGE",
            "UNIMPLEMENTED",
            "INTERNAL",
            "UNAVAILABLE",
            "DATA_LOSS",
            "UNAUTHENTICATED",
        ];
        usize::try_from(self.0).ok().and_then(|i| NAMES.get(i)).copied().unwrap_or("UNKNOWN_CODE")
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Entry point that puts discovery and loading together.
pub struct Runtime;

impl Runtime {
    /// The CPU plugin (see [`plugin::find`]: `explicit`, then `PODC_PJRT_PLUGIN`, then the
    /// cache, installing it there if needed), loaded, with a client of
    /// `cpu_device_count` devices (`None`: the plugin's default).
    pub fn open(explicit: Option<&Path>, cpu_device_count: Option<usize>) -> Result<Client> {
        Runtime::open_with(explicit, &ClientOptions { cpu_device_count, ..ClientOptions::default() })
    }

    /// The plugin of `options.backend`, found, loaded (after the libraries it needs) and
    /// given a client with the options that backend takes.
    pub fn open_with(explicit: Option<&Path>, options: &ClientOptions) -> Result<Client> {
        let found = plugin::find(options.backend, explicit)?;
        for library in &found.preload {
            // As JAX: a library that does not load is left for the plugin to report.
            let _ = pjrt::preload(library);
        }
        let client = Client::new(&found.path, options).map_err(|e| match e {
            RuntimeError::Pjrt { message, .. } if message.contains("No visible GPU devices") => {
                RuntimeError::NoGpu(message)
            }
            e => e,
        })?;
        Ok(match found.cuda_data_dir {
            Some(dir) => {
                client.with_xla_options(&[("xla_gpu_cuda_data_dir", XlaOption::Str(dir.display().to_string()))])
            }
            None => client,
        })
    }
}
