//! Clients, devices and executables: the safe face of the binding.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::buffer::Buffer;
use super::ffi::{self, ClientHandle, CreateValue, ExecutableHandle};
use crate::array::Array;
use crate::runtime::cache::{CacheStatus, CompileCache, Key};
use crate::runtime::plugin::Backend;
use crate::runtime::{Result, RuntimeError};

/// Options for [`Client::new`]. Each reaches only the plugin of its backend: plugins
/// reject create options they do not know (the CUDA plugin fails on `cpu_device_count`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ClientOptions {
    /// The kind of plugin, which decides the create options sent.
    pub backend: Backend,
    /// How many devices the CPU plugin should make (its `cpu_device_count`). `None`
    /// leaves its default (4). A GPU plugin has its physical devices: not sent.
    pub cpu_device_count: Option<usize>,
    /// The fraction of each GPU's memory the CUDA plugin may use (its `memory_fraction`;
    /// JAX's `XLA_PYTHON_CLIENT_MEM_FRACTION`), in (0, 1].
    pub gpu_memory_fraction: Option<f32>,
    /// Whether the CUDA plugin takes that memory when it starts (its `preallocate`; JAX's
    /// `XLA_PYTHON_CLIENT_PREALLOCATE`).
    pub gpu_preallocate: Option<bool>,
}

impl ClientOptions {
    /// The `PJRT_Client_Create` options of these for the backend's plugin. A GPU option
    /// for the CPU backend is an error rather than dropped: it says the user meant a GPU.
    pub(crate) fn create_options(&self) -> Result<Vec<(&'static str, CreateValue)>> {
        let mut out = vec![];
        match self.backend {
            Backend::Cpu => {
                if self.gpu_memory_fraction.is_some() || self.gpu_preallocate.is_some() {
                    return Err(RuntimeError::Usage(
                        "the GPU memory options apply to `--backend cuda`, not the CPU plugin".into(),
                    ));
                }
                if let Some(count) = self.cpu_device_count {
                    let count = i64::try_from(count)
                        .map_err(|_| RuntimeError::Usage(format!("cpu_device_count {count} is too large")))?;
                    out.push(("cpu_device_count", CreateValue::Int(count)));
                }
            }
            Backend::Cuda => {
                if let Some(f) = self.gpu_memory_fraction {
                    if !(f > 0.0 && f <= 1.0) {
                        return Err(RuntimeError::Usage(format!("a GPU memory fraction must lie in (0, 1], not {f}")));
                    }
                    out.push(("memory_fraction", CreateValue::Float(f)));
                }
                if let Some(p) = self.gpu_preallocate {
                    out.push(("preallocate", CreateValue::Bool(p)));
                }
            }
        }
        Ok(out)
    }
}

/// A value of an XLA debug option (what `XLA_FLAGS` sets), given to each compile in
/// its options' `env_option_overrides`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum XlaOption {
    Bool(bool),
    Int(i64),
    Str(String),
}

/// A PJRT C API version, printed as `major.minor` (e.g. `0.106`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ApiVersion {
    /// Incremented on ABI breaks (0 so far).
    pub major: i32,
    /// Incremented when the API grows.
    pub minor: i32,
}

impl fmt::Display for ApiVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// An addressable device of a client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Device {
    /// Position in [`Client::devices`]; the index that [`Client::upload`] and
    /// [`Client::compile_on`] take.
    pub index: usize,
    /// The plugin's device id (unique among the client's devices).
    pub id: i32,
    /// The kind of device, e.g. "cpu" or a GPU model name.
    pub kind: String,
    /// A short description, e.g. "CpuDevice(id=0)".
    pub description: String,
}

/// A PJRT client: one plugin's view of the devices of this process.
///
/// Cheap to clone (the plugin's client is shared) and usable from several threads at
/// once: PJRT clients are thread-safe, as JAX relies on. Buffers and executables keep the
/// underlying client alive, so they may outlive this handle.
#[derive(Clone)]
pub struct Client {
    handle: Arc<ClientHandle>,
    plugin: PathBuf,
    devices: Vec<Device>,
    /// Where compiled executables are kept between runs; none by default.
    cache: Option<Arc<CompileCache>>,
    /// XLA debug options for every compile, by name (`xla_backend_optimization_level`).
    xla_options: Vec<(String, XlaOption)>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("plugin", &self.plugin)
            .field("platform", &self.platform_name())
            .field("api_version", &self.api_version().to_string())
            .field("devices", &self.devices.len())
            .finish()
    }
}

impl Client {
    /// Loads the plugin at `plugin` (once per process; it is never unloaded) and creates
    /// a client on it.
    pub fn new(plugin: &Path, options: &ClientOptions) -> Result<Client> {
        let create_options = options.create_options()?;
        let api = ffi::load(plugin)?;
        let handle = Arc::new(ClientHandle::create(api, &create_options)?);
        let devices = handle
            .device_infos()
            .iter()
            .enumerate()
            .map(|(index, info)| Device {
                index,
                id: info.id,
                kind: info.kind.clone(),
                description: info.description.clone(),
            })
            .collect();
        Ok(Client { handle, plugin: plugin.to_path_buf(), devices, cache: None, xla_options: vec![] })
    }

    /// This client with a persistent compilation cache (or, with `None`, without one).
    /// Clones share the plugin's client but each has its own cache setting.
    pub fn with_compile_cache(mut self, cache: Option<CompileCache>) -> Client {
        self.cache = cache.map(Arc::new);
        self
    }

    /// This client with XLA debug options for every compile, as `XLA_FLAGS` would set them
    /// but for this client only. The plugin rejects a name it does not know when it
    /// compiles. Clones share the plugin's client but each has its own options.
    pub fn with_xla_options(mut self, options: &[(&str, XlaOption)]) -> Client {
        self.xla_options = options.iter().map(|(name, value)| (name.to_string(), value.clone())).collect();
        self
    }

    /// How many bytes of memory the programs of device `index` may use, when the plugin
    /// says (the CUDA plugin does; the CPU plugin does not implement it).
    pub fn memory_limit(&self, index: usize) -> Option<u64> {
        self.handle.memory_limit(index).ok().flatten().and_then(|b| u64::try_from(b).ok())
    }

    /// Registers a typed XLA FFI handler (an `XLA_FFI_Handler*`) as the target of
    /// `stablehlo.custom_call @name` in this plugin's programs (process-wide).
    pub fn register_ffi_handler(&self, name: &str, handler: *mut std::ffi::c_void) -> Result<()> {
        self.handle.register_ffi_handler(name, self.platform_name(), handler)
    }

    /// The plugin's platform, e.g. "cpu" or "cuda".
    pub fn platform_name(&self) -> &str {
        self.handle.platform_name()
    }

    /// The PJRT C API version the plugin was built with.
    pub fn api_version(&self) -> ApiVersion {
        let (major, minor) = self.handle.api_version();
        ApiVersion { major, minor }
    }

    /// The path the plugin was loaded from.
    pub fn plugin_path(&self) -> &Path {
        &self.plugin
    }

    /// The devices this process can use, in the plugin's order.
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// Compiles StableHLO MLIR text for `num_replicas` replicas, placed on devices
    /// `0..num_replicas`. The module's `mhlo.num_replicas` attribute, if any, must agree.
    pub fn compile(&self, mlir: &str, num_replicas: usize) -> Result<Executable> {
        let devices: Vec<usize> = (0..num_replicas).collect();
        self.compile_on(mlir, &devices)
    }

    /// Compiles StableHLO MLIR text with one replica on each of `devices` (device
    /// indices, distinct): replica `r` runs on `devices[r]`.
    ///
    /// With a compilation cache, an executable stored under the same key is loaded
    /// instead; one that cannot be read or loaded is compiled again and replaced. A
    /// cache that cannot be written to costs only the saving (said once on stderr).
    pub fn compile_on(&self, mlir: &str, devices: &[usize]) -> Result<Executable> {
        if devices.is_empty() {
            return Err(RuntimeError::Usage("a program needs at least one replica".into()));
        }
        let mut ids = Vec::with_capacity(devices.len());
        for (i, &index) in devices.iter().enumerate() {
            let device =
                self.devices.get(index).ok_or(RuntimeError::NoSuchDevice { index, count: self.devices.len() })?;
            if devices[..i].contains(&index) {
                return Err(RuntimeError::Usage(format!("device {index} is given to two replicas")));
            }
            ids.push(i64::from(device.id));
        }
        let options = compile_options(&ids, &self.xla_options);
        let Some(cache) = &self.cache else {
            return Ok(Executable { handle: self.handle.compile(mlir, &options)?, cache: CacheStatus::Off });
        };
        let key = self.cache_key(mlir, &options);
        if let Some(bytes) = cache.get(&key) {
            // A stored executable for other devices would run in the wrong place: compile.
            if let Ok(handle) = self.handle.deserialize(&bytes)
                && handle.devices() == devices
            {
                return Ok(Executable { handle, cache: CacheStatus::Hit });
            }
        }
        let handle = self.handle.compile(mlir, &options)?;
        // A plugin that cannot serialize leaves nothing to store.
        if let Ok(bytes) = handle.serialize()
            && let Err(e) = cache.put(&key, &bytes)
        {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                eprintln!("podc: warning: cannot write to the compilation cache {}: {e}", cache.dir().display())
            });
        }
        Ok(Executable { handle, cache: CacheStatus::Miss })
    }

    /// Everything that decides what compiling `mlir` with `options` on this client gives.
    fn cache_key(&self, mlir: &str, options: &[u8]) -> Key {
        // The plugin by identity, not content: hashing a 200 MB library would cost more
        // than many compiles. Replacing it changes its size or modification time.
        let plugin = std::fs::canonicalize(&self.plugin).unwrap_or_else(|_| self.plugin.clone());
        let identity = match std::fs::metadata(&plugin) {
            Ok(m) => {
                let mtime = m.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok());
                format!("{} {} {:?}", plugin.display(), m.len(), mtime)
            }
            Err(_) => plugin.display().to_string(),
        };
        let devices: Vec<String> =
            self.devices.iter().map(|d| format!("{} {} {}", d.id, d.kind, d.description)).collect();
        let platform = format!("{} {}", self.platform_name(), self.api_version());
        let xla_flags = std::env::var("XLA_FLAGS").unwrap_or_default();
        CompileCache::key(&[
            b"podc",
            env!("CARGO_PKG_VERSION").as_bytes(),
            identity.as_bytes(),
            platform.as_bytes(),
            devices.join("\n").as_bytes(),
            crate::runtime::cache::host_cpu().as_bytes(),
            xla_flags.as_bytes(),
            options,
            mlir.as_bytes(),
        ])
    }

    /// Copies `array` to device `device` (an index into [`Client::devices`]).
    pub fn upload(&self, array: &Array, device: usize) -> Result<Buffer> {
        Buffer::upload(&self.handle, array, device)
    }
}

/// A compiled program, ready to run on the devices it was compiled for.
///
/// May be executed from several threads at once.
pub struct Executable {
    handle: ExecutableHandle,
    cache: CacheStatus,
}

impl fmt::Debug for Executable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Executable")
            .field("devices", &self.devices())
            .field("num_outputs", &self.num_outputs())
            .field("cache", &self.cache)
            .finish()
    }
}

impl Executable {
    /// Whether it was loaded from the compilation cache, compiled, or the client has no
    /// cache.
    pub fn cache_status(&self) -> CacheStatus {
        self.cache
    }

    /// How many replicas (devices) each execution runs on.
    pub fn num_replicas(&self) -> usize {
        self.handle.devices().len()
    }

    /// How many outputs each replica produces (the results of `main`).
    pub fn num_outputs(&self) -> usize {
        self.handle.num_outputs()
    }

    /// The device index of each replica.
    pub fn devices(&self) -> &[usize] {
        self.handle.devices()
    }

    /// Runs a single-replica executable and waits for it. The arguments must live on
    /// the executable's device. An argument the program donates (`tf.aliasing_output`)
    /// is consumed: its buffer is deleted and later use of it is an error.
    pub fn execute(&self, args: &[&Buffer]) -> Result<Vec<Buffer>> {
        if self.num_replicas() != 1 {
            return Err(RuntimeError::Usage(format!(
                "execute runs one replica, but this executable has {}; use execute_replicated",
                self.num_replicas()
            )));
        }
        let mut outputs = self.execute_replicated(&[args.to_vec()])?;
        Ok(outputs.pop().unwrap_or_default())
    }

    /// Runs every replica, `args[r]` being the arguments of replica `r` (on device
    /// `devices()[r]`), and waits for all of them. Returns the outputs per replica.
    pub fn execute_replicated(&self, args: &[Vec<&Buffer>]) -> Result<Vec<Vec<Buffer>>> {
        let lists: Vec<Vec<&ffi::BufferHandle>> =
            args.iter().map(|list| list.iter().map(|b| b.handle()).collect()).collect();
        let outputs = self.handle.execute(&lists)?;
        outputs
            .into_iter()
            .zip(self.handle.devices())
            .map(|(list, &device)| list.into_iter().map(|handle| Buffer::from_handle(handle, device)).collect())
            .collect()
    }
}

/// A serialized `xla.CompileOptionsProto` with `executable_build_options` holding
/// `num_replicas` = number of ids, `num_partitions` = 1 and a `device_assignment` placing
/// replica `r` on device id `device_ids[r]`, and `env_option_overrides` holding
/// `xla_options`. The plugin aborts the process on empty options, so both counts are
/// always set.
fn compile_options(device_ids: &[i64], xla_options: &[(String, XlaOption)]) -> Vec<u8> {
    let replicas = device_ids.len() as u64;
    // DeviceAssignmentProto.ComputationDevice: replica_device_ids = 1 (repeated int64)
    let mut computation = Vec::new();
    for &id in device_ids {
        put_varint_field(&mut computation, 1, id as u64);
    }
    // DeviceAssignmentProto: replica_count = 1, computation_count = 2,
    // computation_devices = 3 (one per partition)
    let mut assignment = Vec::new();
    put_varint_field(&mut assignment, 1, replicas);
    put_varint_field(&mut assignment, 2, 1);
    put_bytes_field(&mut assignment, 3, &computation);
    // ExecutableBuildOptionsProto: num_replicas = 4, num_partitions = 5,
    // device_assignment = 9
    let mut build = Vec::new();
    put_varint_field(&mut build, 4, replicas);
    put_varint_field(&mut build, 5, 1);
    put_bytes_field(&mut build, 9, &assignment);
    // CompileOptionsProto: executable_build_options = 3
    let mut options = Vec::new();
    put_bytes_field(&mut options, 3, &build);
    // env_option_overrides = 7, a map: entries of key = 1 and an OptionOverrideProto
    // value = 2 (string_field = 1, bool_field = 2, int_field = 3).
    for (name, value) in xla_options {
        let mut value_proto = Vec::new();
        match value {
            XlaOption::Str(s) => put_bytes_field(&mut value_proto, 1, s.as_bytes()),
            XlaOption::Bool(b) => put_varint_field(&mut value_proto, 2, u64::from(*b)),
            XlaOption::Int(i) => put_varint_field(&mut value_proto, 3, *i as u64),
        }
        let mut entry = Vec::new();
        put_bytes_field(&mut entry, 1, name.as_bytes());
        put_bytes_field(&mut entry, 2, &value_proto);
        put_bytes_field(&mut options, 7, &entry);
    }
    options
}

fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// A field of wire type 0 (varint).
fn put_varint_field(out: &mut Vec<u8>, field: u64, value: u64) {
    put_varint(out, field << 3);
    put_varint(out, value);
}

/// A field of wire type 2 (length-delimited: bytes or a nested message).
fn put_bytes_field(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    put_varint(out, (field << 3) | 2);
    put_varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(o: &ClientOptions) -> Vec<&'static str> {
        o.create_options().unwrap().into_iter().map(|(n, _)| n).collect()
    }

    #[test]
    fn each_option_reaches_only_its_backends_plugin() {
        let cpu = ClientOptions { cpu_device_count: Some(2), ..ClientOptions::default() };
        assert_eq!(cpu.create_options().unwrap(), [("cpu_device_count", CreateValue::Int(2))]);
        assert!(names(&ClientOptions::default()).is_empty());
        // The CUDA plugin rejects names it does not know: `cpu_device_count` never reaches it.
        let cuda = ClientOptions { backend: Backend::Cuda, cpu_device_count: Some(2), ..ClientOptions::default() };
        assert!(names(&cuda).is_empty());
        let cuda = ClientOptions { gpu_memory_fraction: Some(0.5), gpu_preallocate: Some(false), ..cuda };
        assert_eq!(
            cuda.create_options().unwrap(),
            [("memory_fraction", CreateValue::Float(0.5)), ("preallocate", CreateValue::Bool(false))]
        );
    }

    #[test]
    fn gpu_options_are_checked() {
        let on_cpu = ClientOptions { gpu_preallocate: Some(true), ..ClientOptions::default() };
        let err = on_cpu.create_options().unwrap_err().to_string();
        assert_eq!(err, "the GPU memory options apply to `--backend cuda`, not the CPU plugin");
        for f in [0.0, 1.5, f32::NAN] {
            let o = ClientOptions { backend: Backend::Cuda, gpu_memory_fraction: Some(f), ..ClientOptions::default() };
            assert!(o.create_options().unwrap_err().to_string().contains("must lie in (0, 1]"), "{f}");
        }
    }

    #[test]
    fn varints() {
        let mut out = Vec::new();
        put_varint(&mut out, 0);
        put_varint(&mut out, 1);
        put_varint(&mut out, 127);
        put_varint(&mut out, 128);
        put_varint(&mut out, 300);
        assert_eq!(out, [0x00, 0x01, 0x7f, 0x80, 0x01, 0xac, 0x02]);
    }

    #[test]
    fn compile_options_bytes() {
        // The measured minimum (`1a 04 20 01 28 01`) followed, inside the build options,
        // by the device assignment: replica_count 1, computation_count 1, devices [0].
        assert_eq!(
            compile_options(&[0], &[]),
            [0x1a, 0x0e, 0x20, 0x01, 0x28, 0x01, 0x4a, 0x08, 0x08, 0x01, 0x10, 0x01, 0x1a, 0x02, 0x08, 0x00]
        );
        assert_eq!(
            compile_options(&[0, 1], &[]),
            [
                0x1a, 0x10, 0x20, 0x02, 0x28, 0x01, 0x4a, 0x0a, 0x08, 0x02, 0x10, 0x01, 0x1a, 0x04, 0x08, 0x00, 0x08,
                0x01
            ]
        );
        // Then one map entry per option: key "o", OptionOverrideProto { int_field: 2 }.
        let with = compile_options(&[0], &[("o".into(), XlaOption::Int(2))]);
        assert_eq!(with[..16], compile_options(&[0], &[])[..]);
        assert_eq!(with[16..], [0x3a, 0x07, 0x0a, 0x01, b'o', 0x12, 0x02, 0x18, 0x02]);
    }
}
