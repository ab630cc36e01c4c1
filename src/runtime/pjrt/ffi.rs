//! The raw PJRT C API and the owned handles built on it. All `unsafe` code of the crate
//! lives in this module.
//!
//! The layouts follow XLA's `xla/pjrt/c/pjrt_c_api.h` at API 0.113 (the zml/xla copy);
//! the plugins in use are 0.106 (CPU) and 0.115 (CUDA). Every args struct is zero-filled
//! and passes its full Rust size as `struct_size`: plugins reject a size smaller than
//! their own and accept a larger one, and a newer field left zero means "not set".
//! Only the functions podracer calls get typed slots; the others are placeholders that
//! keep the offsets right.
//!
//! Ownership: a [`ClientHandle`] owns a `PJRT_Client`; [`BufferHandle`] and
//! [`ExecutableHandle`] own a buffer / loaded executable and keep their client alive
//! through an `Arc`, so the client is destroyed after the last of them. Events and
//! errors never escape a function: they are awaited or read, then destroyed.
//! Plugins are never unloaded (the CUDA plugin segfaults at exit if it is).

use std::ffi::{c_char, c_int, c_void};
use std::mem::{offset_of, size_of};
use std::path::{Path, PathBuf};
use std::ptr::{self, NonNull};
use std::sync::{Arc, Mutex, PoisonError};

use crate::runtime::{ErrorCode, Result, RuntimeError};

// ----------------------------------------------------------------------------------
// Opaque objects owned by the plugin.

macro_rules! opaque {
    ($($name:ident),*) => {
        $(
            #[repr(C)]
            struct $name {
                _private: [u8; 0],
            }
        )*
    };
}

opaque!(
    RawError,
    RawEvent,
    RawClient,
    RawDevice,
    RawDeviceDescription,
    RawExecutable,
    RawLoadedExecutable,
    RawBuffer,
    RawSerializedExecutable
);

/// A function of the API that reports failure as a `PJRT_Error*`.
type ErrFn<A> = Option<unsafe extern "C" fn(args: *mut A) -> *mut RawError>;
/// A function of the API that cannot fail.
type VoidFn<A> = Option<unsafe extern "C" fn(args: *mut A)>;
/// A slot podracer does not call (and callbacks it leaves unset); only its size matters.
type Slot = Option<unsafe extern "C" fn()>;

// ----------------------------------------------------------------------------------
// Args structs. Each starts with `struct_size` and `extension_start`.

macro_rules! args {
    ($(#[$meta:meta])* $name:ident { $($field:ident: $ty:ty,)* }) => {
        $(#[$meta])*
        #[repr(C)]
        struct $name {
            struct_size: usize,
            extension_start: *mut c_void,
            $($field: $ty,)*
        }

        impl $name {
            /// Zero-filled, with `struct_size` the full size of this layout.
            fn new() -> Self {
                // SAFETY: every field is an integer, a bool, a raw pointer, an `Option` of a
                // function pointer or a struct of those; all-zero bytes are valid for each.
                let mut args: Self = unsafe { std::mem::zeroed() };
                args.struct_size = size_of::<Self>();
                args
            }
        }
    };
}

args!(
    /// `PJRT_Error_Destroy_Args`
    ErrorDestroyArgs { error: *mut RawError, }
);
args!(
    /// `PJRT_Error_Message_Args`
    ErrorMessageArgs { error: *const RawError, message: *const c_char, message_size: usize, }
);
args!(
    /// `PJRT_Error_GetCode_Args`
    ErrorGetCodeArgs { error: *const RawError, code: c_int, }
);
args!(
    /// `PJRT_Plugin_Initialize_Args`
    PluginInitializeArgs {}
);
args!(
    /// `PJRT_Event_Destroy_Args`
    EventDestroyArgs { event: *mut RawEvent, }
);
args!(
    /// `PJRT_Event_Await_Args`
    EventAwaitArgs { event: *mut RawEvent, }
);
args!(
    /// `PJRT_NamedValue`; `value` is the 8-byte union of which podracer sets
    /// `int64_value`, `float_value` and `bool_value`.
    NamedValue {
        name: *const c_char,
        name_size: usize,
        value_type: c_int,
        value: i64,
        value_size: usize,
    }
);
args!(
    /// `PJRT_Client_Create_Args`
    ClientCreateArgs {
        create_options: *const NamedValue,
        num_options: usize,
        kv_get_callback: Slot,
        kv_get_user_arg: *mut c_void,
        kv_put_callback: Slot,
        kv_put_user_arg: *mut c_void,
        client: *mut RawClient,
        kv_try_get_callback: Slot,
        kv_try_get_user_arg: *mut c_void,
    }
);
args!(
    /// `PJRT_Client_Destroy_Args`
    ClientDestroyArgs { client: *mut RawClient, }
);
args!(
    /// `PJRT_Client_PlatformName_Args`
    ClientPlatformNameArgs {
        client: *mut RawClient,
        platform_name: *const c_char,
        platform_name_size: usize,
    }
);
args!(
    /// `PJRT_Client_AddressableDevices_Args`
    ClientAddressableDevicesArgs {
        client: *mut RawClient,
        addressable_devices: *const *mut RawDevice,
        num_addressable_devices: usize,
    }
);
args!(
    /// `PJRT_Program`
    Program {
        code: *const c_char,
        code_size: usize,
        format: *const c_char,
        format_size: usize,
    }
);
args!(
    /// `PJRT_Client_Compile_Args`
    ClientCompileArgs {
        client: *mut RawClient,
        program: *const Program,
        compile_options: *const c_char,
        compile_options_size: usize,
        executable: *mut RawLoadedExecutable,
    }
);
args!(
    /// `PJRT_Buffer_MemoryLayout_Tiled`
    MemoryLayoutTiled {
        minor_to_major: *const i64,
        minor_to_major_size: usize,
        tile_dims: *const i64,
        tile_dim_sizes: *const usize,
        num_tiles: usize,
    }
);
args!(
    /// `PJRT_Buffer_MemoryLayout`; the union's larger member is the tiled layout, the
    /// only one podracer uses.
    MemoryLayout { tiled: MemoryLayoutTiled, layout_type: c_int, }
);
args!(
    /// `PJRT_Client_BufferFromHostBuffer_Args`
    ClientBufferFromHostBufferArgs {
        client: *mut RawClient,
        data: *const c_void,
        buffer_type: c_int,
        dims: *const i64,
        num_dims: usize,
        byte_strides: *const i64,
        num_byte_strides: usize,
        host_buffer_semantics: c_int,
        device: *mut RawDevice,
        memory: *mut c_void,
        device_layout: *mut MemoryLayout,
        done_with_host_buffer: *mut RawEvent,
        buffer: *mut RawBuffer,
    }
);
args!(
    /// `PJRT_DeviceDescription_Id_Args`
    DeviceDescriptionIdArgs { device_description: *mut RawDeviceDescription, id: c_int, }
);
args!(
    /// `PJRT_DeviceDescription_Kind_Args`
    DeviceDescriptionKindArgs {
        device_description: *mut RawDeviceDescription,
        device_kind: *const c_char,
        device_kind_size: usize,
    }
);
args!(
    /// `PJRT_DeviceDescription_ToString_Args`
    DeviceDescriptionToStringArgs {
        device_description: *mut RawDeviceDescription,
        to_string: *const c_char,
        to_string_size: usize,
    }
);
args!(
    /// `PJRT_Device_GetDescription_Args`
    DeviceGetDescriptionArgs {
        device: *mut RawDevice,
        device_description: *mut RawDeviceDescription,
    }
);
args!(
    /// `PJRT_Device_MemoryStats_Args`: each statistic but the first with its `_is_set`.
    DeviceMemoryStatsArgs {
        device: *mut RawDevice,
        bytes_in_use: i64,
        peak_bytes_in_use: i64,
        peak_bytes_in_use_is_set: bool,
        num_allocs: i64,
        num_allocs_is_set: bool,
        largest_alloc_size: i64,
        largest_alloc_size_is_set: bool,
        bytes_limit: i64,
        bytes_limit_is_set: bool,
        bytes_reserved: i64,
        bytes_reserved_is_set: bool,
        peak_bytes_reserved: i64,
        peak_bytes_reserved_is_set: bool,
        bytes_reservable_limit: i64,
        bytes_reservable_limit_is_set: bool,
        largest_free_block_bytes: i64,
        largest_free_block_bytes_is_set: bool,
        pool_bytes: i64,
        pool_bytes_is_set: bool,
        peak_pool_bytes: i64,
        peak_pool_bytes_is_set: bool,
    }
);
args!(
    /// `PJRT_Executable_Destroy_Args`
    ExecutableDestroyArgs { executable: *mut RawExecutable, }
);
args!(
    /// `PJRT_Executable_NumOutputs_Args`
    ExecutableNumOutputsArgs { executable: *mut RawExecutable, num_outputs: usize, }
);
args!(
    /// `PJRT_Executable_Serialize_Args`; the bytes live until the deleter is called on
    /// `serialized_executable`.
    ExecutableSerializeArgs {
        executable: *const RawExecutable,
        serialized_bytes: *const c_char,
        serialized_bytes_size: usize,
        serialized_executable: *mut RawSerializedExecutable,
        serialized_executable_deleter: Option<unsafe extern "C" fn(exec: *mut RawSerializedExecutable)>,
    }
);
args!(
    /// `PJRT_Executable_DeserializeAndLoad_Args`. Null compile options mean the ones
    /// serialized with the executable (its device assignment included).
    ExecutableDeserializeAndLoadArgs {
        client: *mut RawClient,
        serialized_executable: *const c_char,
        serialized_executable_size: usize,
        loaded_executable: *mut RawLoadedExecutable,
        overridden_serialized_compile_options: *const c_char,
        overridden_serialized_compile_options_size: usize,
        load_options: *mut c_void,
    }
);
args!(
    /// `PJRT_LoadedExecutable_Destroy_Args`
    LoadedExecutableDestroyArgs { executable: *mut RawLoadedExecutable, }
);
args!(
    /// `PJRT_LoadedExecutable_GetExecutable_Args`
    LoadedExecutableGetExecutableArgs {
        loaded_executable: *mut RawLoadedExecutable,
        executable: *mut RawExecutable,
    }
);
args!(
    /// `PJRT_LoadedExecutable_AddressableDevices_Args`
    LoadedExecutableAddressableDevicesArgs {
        executable: *mut RawLoadedExecutable,
        addressable_devices: *const *mut RawDevice,
        num_addressable_devices: usize,
    }
);
args!(
    /// `PJRT_ExecuteOptions`
    ExecuteOptions {
        send_callbacks: *mut c_void,
        recv_callbacks: *mut c_void,
        num_send_ops: usize,
        num_recv_ops: usize,
        launch_id: c_int,
        non_donatable_input_indices: *const i64,
        num_non_donatable_input_indices: usize,
        context: *mut c_void,
        call_location: *const c_char,
        num_tasks: usize,
        task_ids: *mut c_int,
        incarnation_ids: *mut i64,
        multi_slice_config: *mut c_void,
        use_major_to_minor_data_layout_for_callbacks: bool,
        hlo_output_callbacks: *mut c_void,
        num_hlo_output_callbacks: usize,
    }
);
args!(
    /// `PJRT_LoadedExecutable_Execute_Args`
    LoadedExecutableExecuteArgs {
        executable: *mut RawLoadedExecutable,
        options: *mut ExecuteOptions,
        argument_lists: *const *const *mut RawBuffer,
        num_devices: usize,
        num_args: usize,
        output_lists: *const *mut *mut RawBuffer,
        device_complete_events: *mut *mut RawEvent,
        execute_device: *mut RawDevice,
    }
);
args!(
    /// `PJRT_Buffer_Destroy_Args`
    BufferDestroyArgs { buffer: *mut RawBuffer, }
);
args!(
    /// `PJRT_Buffer_ElementType_Args`
    BufferElementTypeArgs { buffer: *mut RawBuffer, buffer_type: c_int, }
);
args!(
    /// `PJRT_Buffer_Dimensions_Args`
    BufferDimensionsArgs { buffer: *mut RawBuffer, dims: *const i64, num_dims: usize, }
);
args!(
    /// `PJRT_Buffer_GetMemoryLayout_Args`
    BufferGetMemoryLayoutArgs { buffer: *mut RawBuffer, layout: MemoryLayout, }
);
args!(
    /// `PJRT_Buffer_OnDeviceSizeInBytes_Args`
    BufferOnDeviceSizeArgs { buffer: *mut RawBuffer, on_device_size_in_bytes: usize, }
);
args!(
    /// `PJRT_Buffer_IsOnCpu_Args`
    BufferIsOnCpuArgs { buffer: *mut RawBuffer, is_on_cpu: bool, }
);
args!(
    /// `PJRT_Buffer_ReadyEvent_Args`
    BufferReadyEventArgs { buffer: *mut RawBuffer, event: *mut RawEvent, }
);
args!(
    /// `PJRT_Buffer_UnsafePointer_Args`
    BufferUnsafePointerArgs { buffer: *mut RawBuffer, buffer_pointer: usize, }
);
args!(
    /// `PJRT_Buffer_IncreaseExternalReferenceCount_Args` and its `Decrease` twin
    BufferExternalReferenceArgs { buffer: *mut RawBuffer, }
);
args!(
    /// `PJRT_Buffer_ToHostBuffer_Args`
    BufferToHostBufferArgs {
        src: *mut RawBuffer,
        host_layout: *mut MemoryLayout,
        dst: *mut c_void,
        dst_size: usize,
        event: *mut RawEvent,
    }
);

/// `PJRT_Extension_Base`: the head of each entry of the table's extension list.
#[repr(C)]
struct ExtensionBase {
    struct_size: usize,
    kind: c_int,
    next: *mut ExtensionBase,
}

/// `PJRT_Extension_Type_FFI`.
const EXTENSION_FFI: c_int = 5;

/// `PJRT_FFI_Extension`.
#[repr(C)]
struct FfiExtension {
    base: ExtensionBase,
    _type_id_register: Slot,
    _user_data_add: Slot,
    register_handler: ErrFn<FfiRegisterHandlerArgs>,
}

/// `PJRT_FFI_Register_Handler_Args` as the CPU plugin (PJRT 0.106) lays it out: no
/// `extension_start`, no `api_version` (typed handlers only).
#[repr(C)]
struct FfiRegisterHandlerArgs {
    struct_size: usize,
    target_name: *const c_char,
    target_name_size: usize,
    handler: *mut c_void,
    platform_name: *const c_char,
    platform_name_size: usize,
    traits: u32,
}

/// `PJRT_Api_Version`, inside the API table.
#[repr(C)]
struct ApiVersionStruct {
    struct_size: usize,
    extension_start: *mut c_void,
    major_version: c_int,
    minor_version: c_int,
}

/// `PJRT_Api`: the function table. Slot numbers (1-based) are those of the 0.113 header;
/// the table only grows at its end, so a plugin's `struct_size` says which slots exist.
#[repr(C)]
struct ApiTable {
    struct_size: usize,
    extension_start: *mut c_void,
    version: ApiVersionStruct,
    error_destroy: VoidFn<ErrorDestroyArgs>,                               // 1
    error_message: VoidFn<ErrorMessageArgs>,                               // 2
    error_get_code: ErrFn<ErrorGetCodeArgs>,                               // 3
    plugin_initialize: ErrFn<PluginInitializeArgs>,                        // 4
    _plugin_attributes: Slot,                                              // 5
    event_destroy: ErrFn<EventDestroyArgs>,                                // 6
    _event_is_ready_error: [Slot; 2],                                      // 7-8
    event_await: ErrFn<EventAwaitArgs>,                                    // 9
    _event_on_ready: Slot,                                                 // 10
    client_create: ErrFn<ClientCreateArgs>,                                // 11
    client_destroy: ErrFn<ClientDestroyArgs>,                              // 12
    client_platform_name: ErrFn<ClientPlatformNameArgs>,                   // 13
    _client_process_index_platform_version_devices: [Slot; 3],             // 14-16
    client_addressable_devices: ErrFn<ClientAddressableDevicesArgs>,       // 17
    _client_lookup_devices_addressable_memories: [Slot; 3],                // 18-20
    client_compile: ErrFn<ClientCompileArgs>,                              // 21
    _client_default_device_assignment: Slot,                               // 22
    client_buffer_from_host_buffer: ErrFn<ClientBufferFromHostBufferArgs>, // 23
    device_description_id: ErrFn<DeviceDescriptionIdArgs>,                 // 24
    _device_description_process_index_attributes: [Slot; 2],               // 25-26
    device_description_kind: ErrFn<DeviceDescriptionKindArgs>,             // 27
    _device_description_debug_string: Slot,                                // 28
    device_description_to_string: ErrFn<DeviceDescriptionToStringArgs>,    // 29
    device_get_description: ErrFn<DeviceGetDescriptionArgs>,               // 30
    _device_is_addressable_to_default_memory: [Slot; 4],                   // 31-34
    device_memory_stats: ErrFn<DeviceMemoryStatsArgs>,                     // 35
    _memory: [Slot; 5],                                                    // 36-40
    executable_destroy: ErrFn<ExecutableDestroyArgs>,                      // 41
    _executable_name_replicas_partitions: [Slot; 3],                       // 42-44
    executable_num_outputs: ErrFn<ExecutableNumOutputsArgs>,               // 45
    _executable_code_size_to_optimized_program: [Slot; 4],                 // 46-49
    executable_serialize: ErrFn<ExecutableSerializeArgs>,                  // 50
    loaded_executable_destroy: ErrFn<LoadedExecutableDestroyArgs>,         // 51
    loaded_executable_get_executable: ErrFn<LoadedExecutableGetExecutableArgs>, // 52
    loaded_executable_addressable_devices: ErrFn<LoadedExecutableAddressableDevicesArgs>, // 53
    _loaded_executable_delete_is_deleted: [Slot; 2],                       // 54-55
    loaded_executable_execute: ErrFn<LoadedExecutableExecuteArgs>,         // 56
    executable_deserialize_and_load: ErrFn<ExecutableDeserializeAndLoadArgs>, // 57
    _loaded_executable_fingerprint: Slot,                                  // 58
    buffer_destroy: ErrFn<BufferDestroyArgs>,                              // 59
    buffer_element_type: ErrFn<BufferElementTypeArgs>,                     // 60
    buffer_dimensions: ErrFn<BufferDimensionsArgs>,                        // 61
    _buffer_unpadded_dimensions_dynamic_dimension_indices: [Slot; 2],      // 62-63
    buffer_get_memory_layout: ErrFn<BufferGetMemoryLayoutArgs>,            // 64
    buffer_on_device_size_in_bytes: ErrFn<BufferOnDeviceSizeArgs>,         // 65
    _buffer_device_to_copy_to_device: [Slot; 5],                           // 66-70
    buffer_to_host_buffer: ErrFn<BufferToHostBufferArgs>,                  // 71
    buffer_is_on_cpu: ErrFn<BufferIsOnCpuArgs>,                            // 72
    buffer_ready_event: ErrFn<BufferReadyEventArgs>,                       // 73
    buffer_unsafe_pointer: ErrFn<BufferUnsafePointerArgs>,                 // 74
    buffer_increase_external_reference_count: ErrFn<BufferExternalReferenceArgs>, // 75
    buffer_decrease_external_reference_count: ErrFn<BufferExternalReferenceArgs>, // 76
    _rest: [Slot; 62],                                                     // 77-138
}

// The layouts are checked against the sizes of the 0.113 header (and, where they agree,
// the sizes the 0.106 CPU plugin asks for).
const _: () = {
    assert!(size_of::<PluginInitializeArgs>() == 16);
    assert!(size_of::<ErrorDestroyArgs>() == 24);
    assert!(size_of::<EventAwaitArgs>() == 24);
    assert!(size_of::<ClientPlatformNameArgs>() == 40);
    assert!(size_of::<ClientAddressableDevicesArgs>() == 40);
    assert!(size_of::<BufferDimensionsArgs>() == 40);
    assert!(size_of::<Program>() == 48);
    assert!(size_of::<ClientCompileArgs>() == 56);
    assert!(size_of::<ExecutableSerializeArgs>() == 56);
    assert!(size_of::<ExecutableDeserializeAndLoadArgs>() == 72);
    assert!(size_of::<BufferToHostBufferArgs>() == 56);
    assert!(size_of::<NamedValue>() == 56);
    assert!(size_of::<DeviceMemoryStatsArgs>() == 192);
    assert!(offset_of!(ApiTable, device_memory_stats) == 40 + 34 * 8);
    assert!(size_of::<MemoryLayout>() == 80);
    assert!(size_of::<LoadedExecutableExecuteArgs>() == 80);
    assert!(size_of::<ClientCreateArgs>() == 88);
    assert!(size_of::<ClientBufferFromHostBufferArgs>() == 120);
    assert!(size_of::<ExecuteOptions>() == 144);
    assert!(offset_of!(ApiTable, error_destroy) == 40);
    assert!(offset_of!(ApiTable, client_create) == 40 + 10 * 8);
    assert!(offset_of!(ApiTable, client_compile) == 40 + 20 * 8);
    assert!(offset_of!(ApiTable, executable_destroy) == 40 + 40 * 8);
    assert!(offset_of!(ApiTable, executable_serialize) == 40 + 49 * 8);
    assert!(offset_of!(ApiTable, loaded_executable_execute) == 40 + 55 * 8);
    assert!(offset_of!(ApiTable, executable_deserialize_and_load) == 40 + 56 * 8);
    assert!(offset_of!(ApiTable, buffer_to_host_buffer) == 40 + 70 * 8);
    assert!(offset_of!(ApiTable, buffer_get_memory_layout) == 40 + 63 * 8);
    assert!(offset_of!(ApiTable, buffer_decrease_external_reference_count) == 40 + 75 * 8);
    assert!(size_of::<BufferGetMemoryLayoutArgs>() == 104);
    assert!(size_of::<BufferUnsafePointerArgs>() == 32);
    assert!(size_of::<ApiTable>() == 40 + 138 * 8);
};

/// `PJRT_NamedValue_kInt64`
const NAMED_VALUE_INT64: c_int = 1;
/// `PJRT_NamedValue_kFloat`
const NAMED_VALUE_FLOAT: c_int = 3;
/// `PJRT_NamedValue_kBool`
const NAMED_VALUE_BOOL: c_int = 4;

/// A value of a `PJRT_Client_Create` option.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum CreateValue {
    Int(i64),
    Float(f32),
    Bool(bool),
}

/// Whether the dynamic loader finds the shared library `name` (a soname such as
/// `libcuda.so.1`, looked up as `dlopen` does). A library found stays loaded.
pub(crate) fn library_loads(name: &str) -> bool {
    preload(Path::new(name)).is_ok()
}

/// Loads the shared library at `path` for the rest of the process, so that a plugin
/// loaded later finds it by its soname (as JAX preloads NVIDIA's libraries from their
/// wheels before it loads the CUDA plugin).
pub(crate) fn preload(path: &Path) -> std::result::Result<(), String> {
    // SAFETY: loading a library runs its initialisers; the libraries loaded here are the
    // NVIDIA runtime libraries that the plugin the user chose would load itself.
    let library = unsafe { libloading::Library::new(path) }.map_err(|e| e.to_string())?;
    std::mem::forget(library);
    Ok(())
}
/// `PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes`: the plugin may read the
/// host data until `done_with_host_buffer` fires, which `buffer_from_host` awaits.
const HOST_BUFFER_IMMUTABLE_UNTIL_TRANSFER_COMPLETES: c_int = 1;
/// `PJRT_Buffer_MemoryLayout_Type_Tiled`
const LAYOUT_TILED: c_int = 0;

/// The element types podracer transfers (`PJRT_Buffer_Type` values).
pub(crate) mod element_type {
    /// `PJRT_Buffer_Type_PRED`: one byte per bool.
    pub(crate) const PRED: i32 = 1;
    /// `PJRT_Buffer_Type_S32`
    pub(crate) const S32: i32 = 4;
    /// `PJRT_Buffer_Type_U8`
    pub(crate) const U8: i32 = 6;
    /// `PJRT_Buffer_Type_U32`
    pub(crate) const U32: i32 = 8;
    /// `PJRT_Buffer_Type_F32`
    pub(crate) const F32: i32 = 11;

    /// Names of all `PJRT_Buffer_Type` values, for messages.
    pub(crate) fn name(code: i32) -> String {
        const NAMES: [&str; 33] = [
            "INVALID",
            "PRED",
            "S8",
            "S16",
            "S32",
            "S64",
            "U8",
            "U16",
            "U32",
            "U64",
            "F16",
            "F32",
            "F64",
            "BF16",
            "C64",
            "C128",
            "F8E5M2",
            "F8E4M3FN",
            "F8E4M3B11FNUZ",
            "F8E5M2FNUZ",
            "F8E4M3FNUZ",
            "S4",
            "U4",
            "TOKEN",
            "S2",
            "U2",
            "F8E4M3",
            "F8E3M4",
            "F8E8M0FNU",
            "F4E2M1FN",
            "S1",
            "U1",
            "",
        ];
        match usize::try_from(code).ok().and_then(|i| NAMES.get(i)) {
            Some(name) if !name.is_empty() => (*name).to_string(),
            _ => format!("type code {code}"),
        }
    }
}

// ----------------------------------------------------------------------------------
// Loading.

/// A loaded plugin: its function table and version. Leaked on load, so it (and the
/// library, which it owns) lives for the rest of the process.
pub(crate) struct Api {
    table: ApiTable,
    version: (i32, i32),
    _library: libloading::Library,
}

// SAFETY: the table is a copy made at load time and never written again; it holds
// function pointers and one unused extension pointer. PJRT's functions may be called
// from any thread.
unsafe impl Send for Api {}
// SAFETY: as above; `&Api` only gives read access to immutable data.
unsafe impl Sync for Api {}

/// The plugins loaded so far, by canonical path, so that each is loaded and initialised
/// once per process.
static LOADED: Mutex<Vec<(PathBuf, &'static Api)>> = Mutex::new(Vec::new());

/// The lowest table size podracer accepts: every slot it calls must be present.
const MIN_TABLE_SIZE: usize = offset_of!(ApiTable, buffer_to_host_buffer) + size_of::<Slot>();

/// Loads the plugin at `path` (once per process), checks its table and initialises it.
pub(crate) fn load(path: &Path) -> Result<&'static Api> {
    let load_error = |reason: String| RuntimeError::PluginLoad { path: path.to_path_buf(), reason };
    let not_a_plugin = |reason: String| RuntimeError::NotAPlugin { path: path.to_path_buf(), reason };
    let key = path.canonicalize().map_err(|e| load_error(e.to_string()))?;
    let mut loaded = LOADED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, api)) = loaded.iter().find(|(p, _)| *p == key) {
        return Ok(api);
    }

    // SAFETY: loading a library runs its initialisers. Which library to trust is the
    // user's choice (a plugin path); PJRT plugins are built to be dlopened this way.
    let library = unsafe { libloading::Library::new(&key) }.map_err(|e| load_error(e.to_string()))?;
    // SAFETY: `GetPjrtApi` has this signature in every PJRT plugin
    // (`const PJRT_Api* GetPjrtApi(void)`).
    let get_api = unsafe { library.get::<unsafe extern "C" fn() -> *const ApiTable>(b"GetPjrtApi\0") }
        .map_err(|e| not_a_plugin(format!("no GetPjrtApi function ({e})")))?;
    // SAFETY: calling the plugin's entry point, which takes no arguments.
    let raw = unsafe { get_api() };
    if raw.is_null() {
        return Err(not_a_plugin("GetPjrtApi returned null".into()));
    }
    // SAFETY: every PJRT_Api starts with its size; `raw` is non-null and points into the
    // loaded library, which is never unloaded.
    let plugin_size = unsafe { ptr::read(raw.cast::<usize>()) };
    if plugin_size < offset_of!(ApiTable, error_destroy) {
        return Err(not_a_plugin(format!("its PJRT_Api is only {plugin_size} bytes")));
    }
    // Copy the part of the table the plugin has; slots past its end stay null and read
    // as "not implemented".
    // SAFETY: all-zero is valid for the table (integers, raw pointers, `Option`s of
    // function pointers); the copy reads `plugin_size` bytes that the plugin says exist
    // and writes at most the size of our table.
    let table = unsafe {
        let mut table: ApiTable = std::mem::zeroed();
        let len = plugin_size.min(size_of::<ApiTable>());
        ptr::copy_nonoverlapping(raw.cast::<u8>(), ptr::from_mut(&mut table).cast::<u8>(), len);
        table
    };
    let version = (table.version.major_version, table.version.minor_version);
    if version.0 != 0 {
        return Err(not_a_plugin(format!("it speaks PJRT C API {}.{}; podracer speaks 0.x", version.0, version.1)));
    }
    if plugin_size < MIN_TABLE_SIZE {
        return Err(not_a_plugin(format!(
            "its PJRT C API {}.{} is too old: the function table has {plugin_size} bytes, podracer needs {MIN_TABLE_SIZE}",
            version.0, version.1
        )));
    }
    let api: &'static Api = Box::leak(Box::new(Api { table, version, _library: library }));
    let mut args = PluginInitializeArgs::new();
    api.call(api.table.plugin_initialize, "PJRT_Plugin_Initialize", &mut args)?;
    loaded.push((key, api));
    Ok(api)
}

impl Api {
    /// Calls `f` with `args` and turns a returned error into a [`RuntimeError`].
    /// `args` must be the args struct of `f`, filled in as its documentation requires.
    fn call<A>(&self, f: ErrFn<A>, name: &'static str, args: &mut A) -> Result<()> {
        let f = f.ok_or(RuntimeError::MissingFunction(name))?;
        // SAFETY: `f` is the plugin's function whose args struct is `A` (the table's
        // types pair them), and `args` is a live, initialised `A`.
        let error = unsafe { f(args) };
        self.take_error(error)
    }

    /// Reads and destroys a `PJRT_Error`; null means success.
    fn take_error(&self, error: *mut RawError) -> Result<()> {
        if error.is_null() {
            return Ok(());
        }
        let mut message = String::from("(the plugin gave no message)");
        if let Some(error_message) = self.table.error_message {
            let mut args = ErrorMessageArgs::new();
            args.error = error;
            // SAFETY: `error` is a live error returned by the plugin.
            unsafe { error_message(&mut args) };
            // SAFETY: the message lives as long as `error`, which is destroyed below.
            if let Some(text) = unsafe { str_from(args.message, args.message_size) } {
                message = text;
            }
        }
        let mut code = ErrorCode(2); // UNKNOWN, unless the plugin says otherwise
        if let Some(get_code) = self.table.error_get_code {
            let mut args = ErrorGetCodeArgs::new();
            args.error = error;
            // SAFETY: `error` is a live error returned by the plugin.
            let inner = unsafe { get_code(&mut args) };
            if inner.is_null() {
                code = ErrorCode(args.code);
            } else {
                self.destroy_error(inner);
            }
        }
        self.destroy_error(error);
        Err(RuntimeError::Pjrt { code, message })
    }

    fn destroy_error(&self, error: *mut RawError) {
        if let Some(destroy) = self.table.error_destroy {
            let mut args = ErrorDestroyArgs::new();
            args.error = error;
            // SAFETY: `error` is a live error that nothing uses after this.
            unsafe { destroy(&mut args) };
        }
    }

    /// Waits for `event`, destroys it, and returns its status.
    fn await_event(&self, event: *mut RawEvent) -> Result<()> {
        if event.is_null() {
            return Ok(());
        }
        let mut args = EventAwaitArgs::new();
        args.event = event;
        let status = self.call(self.table.event_await, "PJRT_Event_Await", &mut args);
        self.destroy_event(event);
        status
    }

    fn destroy_event(&self, event: *mut RawEvent) {
        let mut args = EventDestroyArgs::new();
        args.event = event;
        // A failure to free an event leaves nothing to do but report it in debug builds.
        let freed = self.call(self.table.event_destroy, "PJRT_Event_Destroy", &mut args);
        debug_assert!(freed.is_ok(), "PJRT_Event_Destroy failed: {freed:?}");
    }
}

/// An error for a plugin that broke the API's contract (reported as INTERNAL).
fn plugin_fault(message: impl Into<String>) -> RuntimeError {
    RuntimeError::Pjrt { code: ErrorCode(13), message: message.into() }
}

/// Copies a (pointer, length) string of the plugin's into an owned `String`.
///
/// # Safety
/// `ptr` must be null or point to `len` readable bytes.
unsafe fn str_from(ptr: *const c_char, len: usize) -> Option<String> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: the caller promises `len` readable bytes at `ptr`.
    let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
    Some(String::from_utf8_lossy(bytes).into_owned())
}

/// Copies a (pointer, length) array of the plugin's into a `Vec`.
///
/// # Safety
/// `ptr` must be null or point to `len` readable values.
unsafe fn vec_from<T: Copy>(ptr: *const T, len: usize) -> Vec<T> {
    if len == 0 || ptr.is_null() {
        return Vec::new();
    }
    // SAFETY: the caller promises `len` readable values at `ptr`.
    unsafe { std::slice::from_raw_parts(ptr, len) }.to_vec()
}

// ----------------------------------------------------------------------------------
// Clients.

/// What the plugin says about one addressable device.
pub(crate) struct DeviceInfo {
    /// `PJRT_DeviceDescription_Id`
    pub(crate) id: i32,
    /// `PJRT_DeviceDescription_Kind`, e.g. "cpu"
    pub(crate) kind: String,
    /// `PJRT_DeviceDescription_ToString`, e.g. "CpuDevice(id=0)"
    pub(crate) description: String,
}

/// An owned `PJRT_Client`, destroyed on drop (after every buffer and executable, which
/// hold an `Arc` to it).
pub(crate) struct ClientHandle {
    api: &'static Api,
    raw: NonNull<RawClient>,
    /// The addressable devices, owned by the client; indices into this list are the
    /// device indices of the safe API.
    devices: Vec<NonNull<RawDevice>>,
    device_infos: Vec<DeviceInfo>,
    platform_name: String,
}

// SAFETY: a PJRT client is thread-safe: the C API wraps xla::PjRtClient, whose methods
// (compile, transfers, execute) are meant to be called from several threads at once, as
// JAX does; the wrapper's own fields (device lists, platform name) are filled in at
// creation and only read afterwards. The Rust side holds only immutable data. Dropping
// (destroy) happens once, when the last `Arc` goes, so no call can race with it.
unsafe impl Send for ClientHandle {}
// SAFETY: as above.
unsafe impl Sync for ClientHandle {}

impl ClientHandle {
    /// `PJRT_Client_Create` with these create options, then reads the platform name and
    /// the addressable devices.
    pub(crate) fn create(api: &'static Api, create_options: &[(&str, CreateValue)]) -> Result<ClientHandle> {
        let options: Vec<NamedValue> = create_options
            .iter()
            .map(|(name, value)| {
                let mut v = NamedValue::new();
                v.name = name.as_ptr().cast();
                v.name_size = name.len();
                // The union's first bytes hold the value (x86-64 and aarch64 are little-endian).
                (v.value_type, v.value) = match *value {
                    CreateValue::Int(x) => (NAMED_VALUE_INT64, x),
                    CreateValue::Float(x) => (NAMED_VALUE_FLOAT, i64::from(x.to_bits())),
                    CreateValue::Bool(x) => (NAMED_VALUE_BOOL, i64::from(x)),
                };
                v.value_size = 1;
                v
            })
            .collect();
        let mut args = ClientCreateArgs::new();
        args.create_options = options.as_ptr();
        args.num_options = options.len();
        api.call(api.table.client_create, "PJRT_Client_Create", &mut args)?;
        let raw = NonNull::new(args.client).ok_or_else(|| plugin_fault("PJRT_Client_Create returned no client"))?;
        // From here on, dropping `client` destroys the raw client.
        let mut client =
            ClientHandle { api, raw, devices: Vec::new(), device_infos: Vec::new(), platform_name: String::new() };

        let mut args = ClientPlatformNameArgs::new();
        args.client = raw.as_ptr();
        api.call(api.table.client_platform_name, "PJRT_Client_PlatformName", &mut args)?;
        // SAFETY: the name is owned by the client, which is alive.
        client.platform_name = unsafe { str_from(args.platform_name, args.platform_name_size) }.unwrap_or_default();

        let mut args = ClientAddressableDevicesArgs::new();
        args.client = raw.as_ptr();
        api.call(api.table.client_addressable_devices, "PJRT_Client_AddressableDevices", &mut args)?;
        // SAFETY: the list is owned by the client and has the given length.
        let devices = unsafe { vec_from(args.addressable_devices, args.num_addressable_devices) };
        for device in devices {
            let device = NonNull::new(device)
                .ok_or_else(|| plugin_fault("PJRT_Client_AddressableDevices listed a null device"))?;
            client.device_infos.push(client.describe(device)?);
            client.devices.push(device);
        }
        Ok(client)
    }

    fn describe(&self, device: NonNull<RawDevice>) -> Result<DeviceInfo> {
        let api = self.api;
        let mut args = DeviceGetDescriptionArgs::new();
        args.device = device.as_ptr();
        api.call(api.table.device_get_description, "PJRT_Device_GetDescription", &mut args)?;
        let description = args.device_description;

        let mut args = DeviceDescriptionIdArgs::new();
        args.device_description = description;
        api.call(api.table.device_description_id, "PJRT_DeviceDescription_Id", &mut args)?;
        let id = args.id;

        let mut args = DeviceDescriptionKindArgs::new();
        args.device_description = description;
        api.call(api.table.device_description_kind, "PJRT_DeviceDescription_Kind", &mut args)?;
        // SAFETY: the string is owned by the device, which the client owns.
        let kind = unsafe { str_from(args.device_kind, args.device_kind_size) }.unwrap_or_default();

        let mut args = DeviceDescriptionToStringArgs::new();
        args.device_description = description;
        api.call(api.table.device_description_to_string, "PJRT_DeviceDescription_ToString", &mut args)?;
        // SAFETY: as above.
        let text = unsafe { str_from(args.to_string, args.to_string_size) }.unwrap_or_default();
        Ok(DeviceInfo { id, kind, description: text })
    }

    /// The plugin's PJRT C API version (major, minor).
    pub(crate) fn api_version(&self) -> (i32, i32) {
        self.api.version
    }

    /// Registers `handler`, a typed XLA FFI handler (`XLA_FFI_Handler`), as the target of
    /// `stablehlo.custom_call @name` on `platform`, through the plugin's FFI extension. The
    /// registry is the plugin's, process-wide: register before compiling a program that
    /// calls it.
    pub(crate) fn register_ffi_handler(&self, name: &str, platform: &str, handler: *mut c_void) -> Result<()> {
        let api = self.api;
        let mut ext = api.table.extension_start.cast::<ExtensionBase>();
        // SAFETY: the extensions form a list of plugin-owned structs, each starting with
        // an `ExtensionBase`, that lives as long as the (never unloaded) plugin.
        while let Some(base) = unsafe { ext.as_ref() } {
            if base.kind == EXTENSION_FFI {
                let ffi = ext.cast::<FfiExtension>();
                let mut args = FfiRegisterHandlerArgs {
                    struct_size: size_of::<FfiRegisterHandlerArgs>(),
                    target_name: name.as_ptr().cast(),
                    target_name_size: name.len(),
                    handler,
                    platform_name: platform.as_ptr().cast(),
                    platform_name_size: platform.len(),
                    traits: 0,
                };
                // SAFETY: `ffi` is the plugin's FFI extension (its type says so); the
                // strings outlive the call, which copies them.
                let register = unsafe { (*ffi).register_handler };
                return api.call(register, "PJRT_FFI_Register_Handler", &mut args);
            }
            ext = base.next;
        }
        Err(RuntimeError::MissingFunction("the PJRT FFI extension"))
    }

    /// `PJRT_Client_PlatformName`, e.g. "cpu".
    pub(crate) fn platform_name(&self) -> &str {
        &self.platform_name
    }

    /// `PJRT_Device_MemoryStats`' `bytes_limit`: the memory a device's programs may use,
    /// when the plugin reports it.
    pub(crate) fn memory_limit(&self, index: usize) -> Result<Option<i64>> {
        let api = self.api;
        let mut args = DeviceMemoryStatsArgs::new();
        args.device = self.device(index)?.as_ptr();
        api.call(api.table.device_memory_stats, "PJRT_Device_MemoryStats", &mut args)?;
        Ok(args.bytes_limit_is_set.then_some(args.bytes_limit))
    }

    /// The addressable devices, in the plugin's order.
    pub(crate) fn device_infos(&self) -> &[DeviceInfo] {
        &self.device_infos
    }

    fn device(&self, index: usize) -> Result<NonNull<RawDevice>> {
        self.devices.get(index).copied().ok_or(RuntimeError::NoSuchDevice { index, count: self.devices.len() })
    }

    /// `PJRT_Client_Compile` with program format "mlir".
    pub(crate) fn compile(self: &Arc<Self>, mlir: &str, compile_options: &[u8]) -> Result<ExecutableHandle> {
        let api = self.api;
        const FORMAT: &str = "mlir";
        let mut program = Program::new();
        program.code = mlir.as_ptr().cast();
        program.code_size = mlir.len();
        program.format = FORMAT.as_ptr().cast();
        program.format_size = FORMAT.len();
        let mut args = ClientCompileArgs::new();
        args.client = self.raw.as_ptr();
        args.program = &program;
        args.compile_options = compile_options.as_ptr().cast();
        args.compile_options_size = compile_options.len();
        api.call(api.table.client_compile, "PJRT_Client_Compile", &mut args)?;
        let raw =
            NonNull::new(args.executable).ok_or_else(|| plugin_fault("PJRT_Client_Compile returned no executable"))?;
        self.loaded(raw)
    }

    /// `PJRT_Executable_DeserializeAndLoad` of bytes from [`ExecutableHandle::serialize`],
    /// with the compile options (and so the devices) it was compiled with.
    pub(crate) fn deserialize(self: &Arc<Self>, bytes: &[u8]) -> Result<ExecutableHandle> {
        let api = self.api;
        let mut args = ExecutableDeserializeAndLoadArgs::new();
        args.client = self.raw.as_ptr();
        args.serialized_executable = bytes.as_ptr().cast();
        args.serialized_executable_size = bytes.len();
        api.call(api.table.executable_deserialize_and_load, "PJRT_Executable_DeserializeAndLoad", &mut args)?;
        let raw = NonNull::new(args.loaded_executable)
            .ok_or_else(|| plugin_fault("PJRT_Executable_DeserializeAndLoad returned no executable"))?;
        self.loaded(raw)
    }

    /// Takes ownership of a loaded executable and reads what the safe API needs of it.
    fn loaded(self: &Arc<Self>, raw: NonNull<RawLoadedExecutable>) -> Result<ExecutableHandle> {
        let api = self.api;
        // From here on, dropping `exe` destroys the raw executable.
        let mut exe = ExecutableHandle { client: Arc::clone(self), raw, num_outputs: 0, devices: Vec::new() };

        // The number of outputs lives on the unloaded executable view.
        let view = exe.view()?;
        let mut args = ExecutableNumOutputsArgs::new();
        args.executable = view;
        let counted = api.call(api.table.executable_num_outputs, "PJRT_Executable_NumOutputs", &mut args);
        exe.destroy_view(view)?;
        counted?;
        exe.num_outputs = args.num_outputs;

        let mut args = LoadedExecutableAddressableDevicesArgs::new();
        args.executable = raw.as_ptr();
        api.call(
            api.table.loaded_executable_addressable_devices,
            "PJRT_LoadedExecutable_AddressableDevices",
            &mut args,
        )?;
        // SAFETY: the list is owned by the executable and has the given length.
        let devices = unsafe { vec_from(args.addressable_devices, args.num_addressable_devices) };
        for device in devices {
            let index = self.devices.iter().position(|d| d.as_ptr() == device).ok_or_else(|| {
                RuntimeError::Usage("the executable runs on a device the client does not list".into())
            })?;
            exe.devices.push(index);
        }
        Ok(exe)
    }

    /// `PJRT_Client_BufferFromHostBuffer`: copies dense row-major `data` of the given
    /// element type and dimensions to device `device`, and waits until the plugin is done
    /// reading `data`.
    pub(crate) fn buffer_from_host(
        self: &Arc<Self>,
        data: &[u8],
        element_type: i32,
        dims: &[i64],
        device: usize,
    ) -> Result<BufferHandle> {
        let api = self.api;
        let mut args = ClientBufferFromHostBufferArgs::new();
        args.client = self.raw.as_ptr();
        args.data = data.as_ptr().cast();
        args.buffer_type = element_type;
        args.dims = dims.as_ptr();
        args.num_dims = dims.len();
        args.host_buffer_semantics = HOST_BUFFER_IMMUTABLE_UNTIL_TRANSFER_COMPLETES;
        // A device must always be given: with neither device nor memory the CPU plugin
        // segfaults.
        args.device = self.device(device)?.as_ptr();
        api.call(api.table.client_buffer_from_host_buffer, "PJRT_Client_BufferFromHostBuffer", &mut args)?;
        let buffer = NonNull::new(args.buffer).map(|raw| BufferHandle { client: Arc::clone(self), raw });
        // `data` is borrowed for this whole function, so it outlives the transfer.
        api.await_event(args.done_with_host_buffer)?;
        buffer.ok_or_else(|| plugin_fault("PJRT_Client_BufferFromHostBuffer returned no buffer"))
    }
}

impl Drop for ClientHandle {
    fn drop(&mut self) {
        let mut args = ClientDestroyArgs::new();
        args.client = self.raw.as_ptr();
        let freed = self.api.call(self.api.table.client_destroy, "PJRT_Client_Destroy", &mut args);
        debug_assert!(freed.is_ok(), "PJRT_Client_Destroy failed: {freed:?}");
    }
}

// ----------------------------------------------------------------------------------
// Executables.

/// An owned `PJRT_LoadedExecutable`, destroyed on drop.
pub(crate) struct ExecutableHandle {
    client: Arc<ClientHandle>,
    raw: NonNull<RawLoadedExecutable>,
    num_outputs: usize,
    /// Client device index of each addressable device the executable runs on, in the
    /// order of `argument_lists` (one per replica).
    devices: Vec<usize>,
}

// SAFETY: executing a loaded executable from several threads at once is supported
// (xla::PjRtLoadedExecutable::Execute is thread-safe; JAX calls one jitted function
// from many threads). The Rust side holds only immutable data.
unsafe impl Send for ExecutableHandle {}
// SAFETY: as above.
unsafe impl Sync for ExecutableHandle {}

impl ExecutableHandle {
    /// `PJRT_LoadedExecutable_GetExecutable`: the unloaded view, which the caller must
    /// give back to [`Self::destroy_view`].
    fn view(&self) -> Result<*mut RawExecutable> {
        let api = self.client.api;
        let mut args = LoadedExecutableGetExecutableArgs::new();
        args.loaded_executable = self.raw.as_ptr();
        api.call(api.table.loaded_executable_get_executable, "PJRT_LoadedExecutable_GetExecutable", &mut args)?;
        Ok(args.executable)
    }

    fn destroy_view(&self, view: *mut RawExecutable) -> Result<()> {
        let api = self.client.api;
        let mut args = ExecutableDestroyArgs::new();
        args.executable = view;
        api.call(api.table.executable_destroy, "PJRT_Executable_Destroy", &mut args)
    }

    /// `PJRT_Executable_Serialize`: the plugin's own format, which only the same plugin
    /// build reads back ([`ClientHandle::deserialize`]).
    pub(crate) fn serialize(&self) -> Result<Vec<u8>> {
        let api = self.client.api;
        let view = self.view()?;
        let mut args = ExecutableSerializeArgs::new();
        args.executable = view;
        let serialized = api.call(api.table.executable_serialize, "PJRT_Executable_Serialize", &mut args);
        // SAFETY: on success the plugin gives `serialized_bytes_size` bytes that live until
        // the deleter runs, which happens right after the copy.
        let bytes =
            serialized.map(|()| unsafe { vec_from(args.serialized_bytes.cast::<u8>(), args.serialized_bytes_size) });
        if let (Some(delete), false) = (args.serialized_executable_deleter, args.serialized_executable.is_null()) {
            // SAFETY: the deleter the plugin returned, called once on its own object.
            unsafe { delete(args.serialized_executable) };
        }
        let destroyed = self.destroy_view(view);
        let bytes = bytes?;
        destroyed?;
        Ok(bytes)
    }

    /// Outputs per device.
    pub(crate) fn num_outputs(&self) -> usize {
        self.num_outputs
    }

    /// Client device indices this executable runs on, one per replica.
    pub(crate) fn devices(&self) -> &[usize] {
        &self.devices
    }

    /// `PJRT_LoadedExecutable_Execute` on all of the executable's devices, one argument
    /// list per device; waits until every device has finished.
    pub(crate) fn execute(&self, args: &[Vec<&BufferHandle>]) -> Result<Vec<Vec<BufferHandle>>> {
        let api = self.client.api;
        if args.len() != self.devices.len() {
            return Err(RuntimeError::Usage(format!(
                "the executable runs on {} device(s) but {} argument list(s) were given",
                self.devices.len(),
                args.len()
            )));
        }
        let num_args = args.first().map_or(0, Vec::len);
        if args.iter().any(|list| list.len() != num_args) {
            return Err(RuntimeError::Usage("every device must get the same number of arguments".into()));
        }
        // A buffer of another client would be a dangling pointer to this one.
        if args.iter().flatten().any(|b| !Arc::ptr_eq(&b.client, &self.client)) {
            return Err(RuntimeError::Usage("an argument buffer belongs to a different client".into()));
        }
        let arg_lists: Vec<Vec<*mut RawBuffer>> =
            args.iter().map(|list| list.iter().map(|b| b.raw.as_ptr()).collect()).collect();
        let arg_ptrs: Vec<*const *mut RawBuffer> = arg_lists.iter().map(|l| l.as_ptr()).collect();
        let mut out_lists: Vec<Vec<*mut RawBuffer>> = vec![vec![ptr::null_mut(); self.num_outputs]; args.len()];
        let out_ptrs: Vec<*mut *mut RawBuffer> = out_lists.iter_mut().map(|l| l.as_mut_ptr()).collect();
        let mut events: Vec<*mut RawEvent> = vec![ptr::null_mut(); args.len()];
        let mut options = ExecuteOptions::new();

        let mut call = LoadedExecutableExecuteArgs::new();
        call.executable = self.raw.as_ptr();
        call.options = &mut options;
        call.argument_lists = arg_ptrs.as_ptr();
        call.num_devices = args.len();
        call.num_args = num_args;
        call.output_lists = out_ptrs.as_ptr();
        call.device_complete_events = events.as_mut_ptr();
        api.call(api.table.loaded_executable_execute, "PJRT_LoadedExecutable_Execute", &mut call)?;

        // Take ownership of every output first, so that an error below frees them all.
        let mut missing = false;
        let outputs: Vec<Vec<BufferHandle>> = out_lists
            .iter()
            .map(|list| {
                list.iter()
                    .filter_map(|&raw| {
                        let handle =
                            NonNull::new(raw).map(|raw| BufferHandle { client: Arc::clone(&self.client), raw });
                        missing |= handle.is_none();
                        handle
                    })
                    .collect()
            })
            .collect();
        let mut status = Ok(());
        for event in events {
            let done = api.await_event(event);
            if status.is_ok() {
                status = done;
            }
        }
        status?;
        if missing {
            return Err(plugin_fault("PJRT_LoadedExecutable_Execute left an output unset"));
        }
        Ok(outputs)
    }
}

impl Drop for ExecutableHandle {
    fn drop(&mut self) {
        let api = self.client.api;
        let mut args = LoadedExecutableDestroyArgs::new();
        args.executable = self.raw.as_ptr();
        let freed = api.call(api.table.loaded_executable_destroy, "PJRT_LoadedExecutable_Destroy", &mut args);
        debug_assert!(freed.is_ok(), "PJRT_LoadedExecutable_Destroy failed: {freed:?}");
    }
}

// ----------------------------------------------------------------------------------
// Buffers.

/// An owned `PJRT_Buffer`, destroyed on drop.
pub(crate) struct BufferHandle {
    client: Arc<ClientHandle>,
    raw: NonNull<RawBuffer>,
}

// SAFETY: xla::PjRtBuffer is thread-safe (reads, transfers and use as an execute
// argument may happen from several threads; JAX shares arrays between threads), and the
// C wrapper guards its lazily cached fields with a mutex. The Rust side holds only
// immutable data.
unsafe impl Send for BufferHandle {}
// SAFETY: as above.
unsafe impl Sync for BufferHandle {}

impl BufferHandle {
    /// `PJRT_Buffer_ElementType`, as a `PJRT_Buffer_Type` code.
    pub(crate) fn element_type(&self) -> Result<i32> {
        let api = self.client.api;
        let mut args = BufferElementTypeArgs::new();
        args.buffer = self.raw.as_ptr();
        api.call(api.table.buffer_element_type, "PJRT_Buffer_ElementType", &mut args)?;
        Ok(args.buffer_type)
    }

    /// `PJRT_Buffer_Dimensions`
    pub(crate) fn dims(&self) -> Result<Vec<i64>> {
        let api = self.client.api;
        let mut args = BufferDimensionsArgs::new();
        args.buffer = self.raw.as_ptr();
        api.call(api.table.buffer_dimensions, "PJRT_Buffer_Dimensions", &mut args)?;
        // SAFETY: the list is owned by the buffer, which is alive, and has this length.
        Ok(unsafe { vec_from(args.dims, args.num_dims) })
    }

    /// The buffer's bytes into `dst` in dense row-major layout. `dst` must have exactly
    /// the buffer's size in bytes.
    ///
    /// A CPU buffer already laid out so is read in place: the CPU plugin runs every
    /// `ToHostBuffer` on its thread pool, and handing the copy to another thread and
    /// waiting for it costs more than the copy of a small array (an actor's actions).
    pub(crate) fn to_host(&self, dst: &mut [u8], rank: usize) -> Result<()> {
        match self.read_in_place(dst, rank) {
            Some(read) => read,
            None => self.copy_to_host(dst, rank),
        }
    }

    /// `PJRT_Buffer_ToHostBuffer` into `dst` in dense row-major layout, waiting for the
    /// copy to finish. `dst` must have exactly the buffer's size in bytes.
    fn copy_to_host(&self, dst: &mut [u8], rank: usize) -> Result<()> {
        let api = self.client.api;
        // Ask for row-major explicitly: without a host layout the plugin copies in the
        // device's layout, which need not be row-major on every backend.
        let minor_to_major: Vec<i64> = (0..rank as i64).rev().collect();
        let mut layout = MemoryLayout::new();
        layout.layout_type = LAYOUT_TILED;
        layout.tiled = MemoryLayoutTiled::new();
        layout.tiled.minor_to_major = minor_to_major.as_ptr();
        layout.tiled.minor_to_major_size = minor_to_major.len();

        // Check the size first: the plugin writes as many bytes as the buffer holds.
        let mut query = BufferToHostBufferArgs::new();
        query.src = self.raw.as_ptr();
        query.host_layout = &mut layout;
        api.call(api.table.buffer_to_host_buffer, "PJRT_Buffer_ToHostBuffer", &mut query)?;
        api.await_event(query.event)?;
        if query.dst_size != dst.len() {
            return Err(plugin_fault(format!("the buffer holds {} bytes, expected {}", query.dst_size, dst.len())));
        }

        let mut args = BufferToHostBufferArgs::new();
        args.src = self.raw.as_ptr();
        args.host_layout = &mut layout;
        args.dst = dst.as_mut_ptr().cast();
        args.dst_size = dst.len();
        api.call(api.table.buffer_to_host_buffer, "PJRT_Buffer_ToHostBuffer", &mut args)?;
        // `dst` and `layout` are borrowed until this returns, so they outlive the copy.
        api.await_event(args.event)
    }

    /// Copies a ready CPU buffer whose memory is `dst.len()` bytes in dense row-major
    /// order straight into `dst`, as NumPy reads a JAX CPU array through the buffer
    /// protocol; the external reference held meanwhile keeps the plugin from donating or
    /// freeing the memory. `None` where that does not apply (another device or layout, or
    /// a plugin without these functions): then the caller copies through the plugin.
    fn read_in_place(&self, dst: &mut [u8], rank: usize) -> Option<Result<()>> {
        let api = self.client.api;
        let buffer = self.raw.as_ptr();
        let mut cpu = BufferIsOnCpuArgs::new();
        cpu.buffer = buffer;
        api.call(api.table.buffer_is_on_cpu, "PJRT_Buffer_IsOnCpu", &mut cpu).ok()?;
        if !cpu.is_on_cpu {
            return None;
        }
        let mut size = BufferOnDeviceSizeArgs::new();
        size.buffer = buffer;
        api.call(api.table.buffer_on_device_size_in_bytes, "PJRT_Buffer_OnDeviceSizeInBytes", &mut size).ok()?;
        let mut layout = BufferGetMemoryLayoutArgs::new();
        layout.buffer = buffer;
        api.call(api.table.buffer_get_memory_layout, "PJRT_Buffer_GetMemoryLayout", &mut layout).ok()?;
        let tiled = &layout.layout.tiled;
        // SAFETY: the plugin's list, owned by the buffer (alive), of this length.
        let minor_to_major = unsafe { vec_from(tiled.minor_to_major, tiled.minor_to_major_size) };
        let row_major = minor_to_major.iter().rev().copied().eq(0..rank as i64);
        if size.on_device_size_in_bytes != dst.len()
            || layout.layout.layout_type != LAYOUT_TILED
            || tiled.num_tiles != 0
            || !row_major
            || api.table.buffer_unsafe_pointer.is_none()
            || api.table.buffer_decrease_external_reference_count.is_none()
        {
            return None;
        }
        let mut ready = BufferReadyEventArgs::new();
        ready.buffer = buffer;
        if let Err(e) = api.call(api.table.buffer_ready_event, "PJRT_Buffer_ReadyEvent", &mut ready) {
            return Some(Err(e));
        }
        if let Err(e) = api.await_event(ready.event) {
            return Some(Err(e));
        }
        let mut hold = BufferExternalReferenceArgs::new();
        hold.buffer = buffer;
        let increase = api.table.buffer_increase_external_reference_count;
        api.call(increase, "PJRT_Buffer_IncreaseExternalReferenceCount", &mut hold).ok()?;
        let mut at = BufferUnsafePointerArgs::new();
        at.buffer = buffer;
        let read = api.call(api.table.buffer_unsafe_pointer, "PJRT_Buffer_UnsafePointer", &mut at).map(|()| {
            if at.buffer_pointer != 0 {
                // SAFETY: the buffer is ready and holds `dst.len()` bytes at this address,
                // which the external reference keeps in place until the copy is done.
                unsafe { ptr::copy_nonoverlapping(at.buffer_pointer as *const u8, dst.as_mut_ptr(), dst.len()) };
            }
            at.buffer_pointer != 0
        });
        let decrease = api.table.buffer_decrease_external_reference_count;
        let released = api.call(decrease, "PJRT_Buffer_DecreaseExternalReferenceCount", &mut hold);
        match (read, released) {
            (Ok(true), Ok(())) => Some(Ok(())),
            (Ok(false), Ok(())) => None,
            (Err(e), _) | (_, Err(e)) => Some(Err(e)),
        }
    }
}

impl Drop for BufferHandle {
    fn drop(&mut self) {
        let api = self.client.api;
        let mut args = BufferDestroyArgs::new();
        args.buffer = self.raw.as_ptr();
        let freed = api.call(api.table.buffer_destroy, "PJRT_Buffer_Destroy", &mut args);
        debug_assert!(freed.is_ok(), "PJRT_Buffer_Destroy failed: {freed:?}");
    }
}

#[cfg(test)]
mod tests {
    use crate::array::{Array, Data};
    use crate::runtime::Runtime;

    /// The CPU plugin's buffers, uploaded or computed, of every dtype and rank, are read
    /// in place, and read as the copy through the plugin reads them.
    #[test]
    fn cpu_buffers_are_read_in_place() {
        let client = Runtime::open(None, Some(1)).expect("the PJRT CPU plugin");
        let doubled = "module @doubled {\n  func.func public @main(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {\n    \
            %0 = stablehlo.add %a, %a : tensor<2x3xf32>\n    return %0 : tensor<2x3xf32>\n  }\n}\n";
        let exe = client.compile(doubled, 1).expect("compiles");
        let x = Array::f32(vec![2, 3], vec![1.5, -2.0, 0.0, f32::MAX, f32::MIN_POSITIVE, -0.0]);
        let input = client.upload(&x, 0).expect("upload");
        let mut buffers = exe.execute(&[&input]).expect("runs");
        for array in [
            Array::f32(vec![], vec![std::f32::consts::PI]),
            Array::i32(vec![4, 1], vec![i32::MIN, -1, 0, i32::MAX]),
            Array::new(vec![3], Data::U32(vec![0, 1, u32::MAX])),
            Array::new(vec![2, 1, 2], Data::Bool(vec![true, false, false, true])),
            Array::new(vec![5], Data::U8(vec![0, 1, 2, 254, 255])),
        ] {
            buffers.push(client.upload(&array, 0).expect("upload"));
        }
        for b in &buffers {
            let bytes = b.ty().numel() * b.ty().dtype.size();
            let (mut direct, mut copied) = (vec![0u8; bytes], vec![0u8; bytes]);
            let read = b.handle().read_in_place(&mut direct, b.ty().rank());
            assert!(matches!(read, Some(Ok(()))), "{}: {read:?}", b.ty());
            // The plugin's own copy: what `to_host` did before reading in place.
            b.handle().copy_to_host(&mut copied, b.ty().rank()).expect("copies");
            assert_eq!(direct, copied, "{}", b.ty());
        }
        let twice = vec![3.0, -4.0, 0.0, f32::INFINITY, 2.0 * f32::MIN_POSITIVE, -0.0];
        assert_eq!(buffers[0].download().expect("download"), Array::f32(vec![2, 3], twice));
    }
}
