//! Collectives across processes on the CPU plugin, which runs no program whose devices
//! span processes: the in-process part of `psum`/`pmean` stays XLA's `all_reduce`, and the
//! cross-process part is a custom call (`prims::collective::CROSS_PROCESS_SUM`) into an XLA
//! FFI handler here, which sums through gloo (what PyTorch and jaxlib use for CPU
//! collectives).
//!
//! gloo is reached through a small C++ shim (`gloo_shim.cc`), built by `build.rs` where
//! `libgloo-dev` is installed and embedded in podc; it is written to the cache and loaded
//! only here, so podc starts without libgloo. Each local replica has its own gloo group
//! (calls from two threads on one group corrupt each other's sums), joined through the
//! coordinator.
#![allow(unsafe_code)]

use super::coord::{Coordinator, GetError};
use std::ffi::{CString, c_char, c_void};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

type SinkFn = unsafe extern "C" fn(sink: *mut c_void, data: *const u8, len: usize);
type SetFn = unsafe extern "C" fn(ud: *mut c_void, key: *const u8, klen: usize, val: *const u8, vlen: usize) -> i32;
type GetFn = unsafe extern "C" fn(
    ud: *mut c_void,
    key: *const u8,
    klen: usize,
    timeout_ms: i64,
    sink: *mut c_void,
    sink_fn: SinkFn,
) -> i32;
type ConnectFn = unsafe extern "C" fn(
    rank: i32,
    size: i32,
    hostname: *const c_char,
    prefix: *const c_char,
    ud: *mut c_void,
    set: SetFn,
    get: GetFn,
    timeout_ms: i64,
    err: *mut c_char,
    errlen: usize,
) -> *mut c_void;
type AllReduceFn = unsafe extern "C" fn(
    g: *mut c_void,
    dtype: i32,
    data: *mut c_void,
    n: usize,
    err: *mut c_char,
    errlen: usize,
) -> i32;

/// The joined groups, one per local replica, for the rest of the process.
struct Groups {
    allreduce: AllReduceFn,
    groups: Vec<usize>,
    _library: libloading::Library,
}

static GROUPS: OnceLock<Groups> = OnceLock::new();

/// Time spent in cross-process sums (nanoseconds, over every replica's thread), and
/// their number: what `podc bench train` reports of a job.
static SPENT: AtomicU64 = AtomicU64::new(0);
static CALLS: AtomicU64 = AtomicU64::new(0);

/// The time this process's replicas have spent in cross-process sums, and how many.
pub fn time_spent() -> (Duration, u64) {
    (Duration::from_nanos(SPENT.load(Ordering::Relaxed)), CALLS.load(Ordering::Relaxed))
}

/// The shim, when this podc was built with gloo.
#[cfg(gloo)]
const SHIM: Option<&[u8]> = Some(include_bytes!(env!("PODC_GLOO_SHIM")));
#[cfg(not(gloo))]
const SHIM: Option<&[u8]> = None;

/// What to do where gloo is missing.
pub const INSTALL: &str = "apt-get install libgloo-dev";

/// Whether this podc can train across processes on the CPU: it was built with gloo's
/// headers and libgloo loads.
pub fn available() -> Result<(), String> {
    load().map(|_| ())
}

fn load() -> Result<libloading::Library, String> {
    let bytes = SHIM.ok_or_else(|| {
        format!("this podc was built without gloo, which training across processes on the CPU needs: {INSTALL}, then rebuild podc")
    })?;
    use sha2::Digest;
    let hash: String = sha2::Sha256::digest(bytes).iter().take(8).map(|b| format!("{b:02x}")).collect();
    let dir = crate::runtime::plugin::cache_dir().map_err(|e| e.to_string())?.join("gloo");
    let path = dir.join(format!("libpodc_gloo-{hash}.so"));
    if !path.exists() {
        std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create `{}`: {e}", dir.display()))?;
        // A name of this process's own, renamed into place: processes may race here.
        let tmp = dir.join(format!("libpodc_gloo-{hash}.so.{}", std::process::id()));
        std::fs::write(&tmp, bytes)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| format!("cannot write `{}`: {e}", path.display()))?;
    }
    // SAFETY: loading our own shim, whose initialisers are gloo's and the C++ runtime's.
    unsafe { libloading::Library::new(&path) }
        .map_err(|e| format!("cannot load gloo ({e}); training across processes on the CPU needs it: {INSTALL}"))
}

/// Joins `replicas` gloo groups (one per local replica) as process `rank` of `size`,
/// listening on `ip`, and registers the FFI handler with the CPU plugin of `client`.
/// Once per process.
pub fn connect(
    client: &crate::runtime::Client,
    coord: &'static Coordinator,
    (rank, size): (usize, usize),
    replicas: usize,
    timeout: Duration,
) -> Result<(), String> {
    if GROUPS.get().is_some() {
        return Err("gloo groups are joined once per process".into());
    }
    let library = load()?;
    // SAFETY: the shim exports these with these signatures (gloo_shim.cc).
    let (connect, allreduce) = unsafe {
        let c = *library.get::<ConnectFn>(b"podc_gloo_connect\0").map_err(|e| e.to_string())?;
        let a = *library.get::<AllReduceFn>(b"podc_gloo_allreduce_sum\0").map_err(|e| e.to_string())?;
        (c, a)
    };
    let host = CString::new(coord.local_ip.to_string()).expect("an IP has no NUL");
    let mut groups = vec![];
    for r in 0..replicas {
        let prefix = CString::new(format!("gloo/{r}")).expect("no NUL");
        let mut err = vec![0 as c_char; 512];
        // SAFETY: the strings and `err` outlive the call; `coord` lives for the process,
        // and the callbacks take it back as `&Coordinator`.
        let g = unsafe {
            connect(
                rank as i32,
                size as i32,
                host.as_ptr(),
                prefix.as_ptr(),
                std::ptr::from_ref(coord).cast_mut().cast(),
                store_set,
                store_get,
                timeout.as_millis() as i64,
                err.as_mut_ptr(),
                err.len(),
            )
        };
        if g.is_null() {
            return Err(format!("cannot join the gloo group of replica {r}: {}", c_message(&err)));
        }
        groups.push(g as usize);
    }
    GROUPS.set(Groups { allreduce, groups, _library: library }).map_err(|_| "gloo groups joined twice".to_string())?;
    let handler: unsafe extern "C" fn(*mut CallFrame) -> *mut c_void = cross_process_sum;
    client
        .register_ffi_handler(crate::prims::CROSS_PROCESS_SUM, handler as *mut c_void)
        .map_err(|e| format!("cannot register the cross-process all-reduce with the plugin: {e}"))
}

fn c_message(err: &[c_char]) -> String {
    let bytes: Vec<u8> = err.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

unsafe extern "C" fn store_set(ud: *mut c_void, key: *const u8, klen: usize, val: *const u8, vlen: usize) -> i32 {
    // SAFETY: `ud` is the `&'static Coordinator` given to `connect`; gloo passes valid
    // spans for the key and value.
    let (coord, key, val) = unsafe {
        (&*ud.cast::<Coordinator>(), std::slice::from_raw_parts(key, klen), std::slice::from_raw_parts(val, vlen))
    };
    i32::from(coord.put_bytes(key, val).is_err())
}

unsafe extern "C" fn store_get(
    ud: *mut c_void,
    key: *const u8,
    klen: usize,
    timeout_ms: i64,
    sink: *mut c_void,
    sink_fn: SinkFn,
) -> i32 {
    // SAFETY: as in `store_set`.
    let (coord, key) = unsafe { (&*ud.cast::<Coordinator>(), std::slice::from_raw_parts(key, klen)) };
    match coord.get_bytes(key, Duration::from_millis(timeout_ms.max(0) as u64)) {
        Ok(v) => {
            // SAFETY: the shim's sink appends the bytes to its vector.
            unsafe { sink_fn(sink, v.as_ptr(), v.len()) };
            0
        }
        Err(GetError::Timeout) => 1,
        Err(_) => 2,
    }
}

// The parts of XLA's FFI C API (`xla/ffi/api/c_api.h`) the handler reads.

#[repr(C)]
struct ExtensionBase {
    struct_size: usize,
    kind: i32,
    next: *mut ExtensionBase,
}

#[repr(C)]
struct ApiVersion {
    struct_size: usize,
    extension_start: *mut c_void,
    major: i32,
    minor: i32,
}

#[repr(C)]
struct Metadata {
    struct_size: usize,
    api_version: ApiVersion,
    traits: u32,
}

#[repr(C)]
struct MetadataExtension {
    base: ExtensionBase,
    metadata: *mut Metadata,
}

#[repr(C)]
struct Spans {
    struct_size: usize,
    extension_start: *mut c_void,
    size: i64,
    types: *mut i32,
    items: *mut *mut Buffer,
}

#[repr(C)]
struct CallFrame {
    struct_size: usize,
    extension_start: *mut ExtensionBase,
    api: *const FfiApi,
    ctx: *mut c_void,
    stage: i32,
    args: Spans,
    rets: Spans,
}

#[repr(C)]
struct Buffer {
    struct_size: usize,
    extension_start: *mut c_void,
    dtype: i32,
    data: *mut c_void,
    rank: i64,
    dims: *const i64,
}

#[repr(C)]
struct ErrorCreateArgs {
    struct_size: usize,
    extension_start: *mut c_void,
    message: *const c_char,
    errc: i32,
}

#[repr(C)]
struct FfiApi {
    struct_size: usize,
    extension_start: *mut c_void,
    api_version: ApiVersion,
    internal_api: *mut c_void,
    error_create: unsafe extern "C" fn(*mut ErrorCreateArgs) -> *mut c_void,
}

const METADATA_EXTENSION: i32 = 1;
const STAGE_EXECUTE: i32 = 3;
/// XLA's element types (`XLA_FFI_DataType`).
const F32: i32 = 11;
const S32: i32 = 4;
const U32: i32 = 8;

/// The XLA FFI handler of `CROSS_PROCESS_SUM`: `(token, x) -> (token, sum of x over the
/// processes)`, in the token's (the local replica's) gloo group.
unsafe extern "C" fn cross_process_sum(frame: *mut CallFrame) -> *mut c_void {
    // SAFETY: XLA passes a valid call frame, whose argument and result buffers are laid
    // out as `c_api.h` says and live for the call.
    unsafe {
        let f = &*frame;
        if let Some(ext) = f.extension_start.as_ref() {
            // Registration asks which FFI API the handler speaks.
            if ext.kind == METADATA_EXTENSION {
                let md = &mut *(*f.extension_start.cast::<MetadataExtension>()).metadata;
                md.api_version.major = 0;
                md.api_version.minor = 1;
            }
            return std::ptr::null_mut();
        }
        if f.stage != STAGE_EXECUTE {
            return std::ptr::null_mut();
        }
        let result = (|| {
            if f.args.size != 2 || f.rets.size != 2 {
                return Err("expects (token, x) -> (token, x)".to_string());
            }
            let (token_in, x) = (&**f.args.items, &**f.args.items.add(1));
            let (token_out, y) = (&**f.rets.items, &**f.rets.items.add(1));
            let replica = *token_in.data.cast::<u32>();
            *token_out.data.cast::<u32>() = replica;
            let n: i64 = std::slice::from_raw_parts(x.dims, x.rank as usize).iter().product();
            let (dtype, width) = match x.dtype {
                F32 => (0, 4),
                S32 => (1, 4),
                U32 => (2, 4),
                d => return Err(format!("cannot sum XLA element type {d}")),
            };
            std::ptr::copy(x.data.cast::<u8>(), y.data.cast::<u8>(), n as usize * width);
            let groups = GROUPS.get().ok_or("no gloo groups were joined")?;
            let group = *groups.groups.get(replica as usize).ok_or("no gloo group for this replica")?;
            let mut err = vec![0 as c_char; 512];
            let start = std::time::Instant::now();
            let status =
                (groups.allreduce)(group as *mut c_void, dtype, y.data, n as usize, err.as_mut_ptr(), err.len());
            SPENT.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
            CALLS.fetch_add(1, Ordering::Relaxed);
            if status != 0 {
                return Err(format!("the cross-process all-reduce failed: {}", c_message(&err)));
            }
            Ok(())
        })();
        match result {
            Ok(()) => std::ptr::null_mut(),
            Err(m) => {
                let m = CString::new(m.replace('\0', " ")).expect("no NUL");
                let mut args = ErrorCreateArgs {
                    struct_size: size_of::<ErrorCreateArgs>(),
                    extension_start: std::ptr::null_mut(),
                    message: m.as_ptr(),
                    errc: 13, // INTERNAL
                };
                ((*f.api).error_create)(&mut args)
            }
        }
    }
}
