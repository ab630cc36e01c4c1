//! Integration tests of the PJRT runtime against the real CPU plugin.
//!
//! The plugin is found the way users find it: `PODC_PJRT_PLUGIN`, else the cache
//! (`PODC_CACHE` or `~/.cache/podracer`), installing it with pip if missing. If that
//! fails the tests fail, naming the cause; they never skip.
//!
//! One client (with 2 CPU devices, for the replicated tests) is shared by the tests of
//! this process, because creating clients is costly. Probes of failure modes that could
//! abort the process (XLA check failures) run in a child process: the test binary
//! re-executes itself, filtered to that one test, with `CHILD_ENV` set.

use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use podracer::array::{Array, ArrayTy, DType, Data};
use podracer::runtime::plugin::{self, CACHE_ENV, PLUGIN_ENV};
use podracer::runtime::{Backend, Client, ClientOptions, Runtime, RuntimeError};

/// Set (to the test's name) in a child process running one probe.
const CHILD_ENV: &str = "PODRACER_RUNTIME_TEST_CHILD";

static CLIENT: OnceLock<Client> = OnceLock::new();

/// The shared client: 2 CPU devices, found through the users' discovery.
fn client() -> &'static Client {
    CLIENT.get_or_init(|| {
        Runtime::open(None, Some(2)).unwrap_or_else(|e| {
            panic!(
                "cannot open the PJRT CPU plugin for the runtime tests: {e}\n\
                 (set {PLUGIN_ENV} to a libpjrt_cpu.so, or let the tests install it into \
                 {CACHE_ENV} / ~/.cache/podracer)"
            )
        })
    })
}

/// The name libtest knows a test of this module by: its path below the test binary's
/// crate (`runtime::NAME`), which `--exact` must be given.
fn test_path(test: &str) -> String {
    format!("{}::{test}", module_path!().split_once("::").expect("a module").1)
}

/// Runs `probe` in a child process (this test binary, filtered to `test`) and returns
/// what it returned, asserting that the child exited cleanly. In the child, runs `probe`
/// and prints its result between markers.
fn in_child(test: &str, envs: &[(&str, Option<&Path>)], probe: impl FnOnce() -> String) -> Option<String> {
    if env::var(CHILD_ENV).as_deref() == Ok(test) {
        let result = probe();
        println!("PROBE-BEGIN\n{result}\nPROBE-END");
        return None;
    }
    let exe = env::current_exe().expect("the test binary's path");
    let mut command = Command::new(exe);
    command.args([&test_path(test), "--exact", "--nocapture", "--test-threads=1"]).env(CHILD_ENV, test);
    for (key, value) in envs {
        match value {
            Some(value) => command.env(key, value),
            None => command.env_remove(key),
        };
    }
    let output = command.output().expect("cannot run the test binary");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "the child running {test} did not exit cleanly ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status
    );
    let result = stdout
        .split_once("PROBE-BEGIN\n")
        .and_then(|(_, rest)| rest.split_once("\nPROBE-END"))
        .map(|(result, _)| result.to_string());
    Some(result.unwrap_or_else(|| panic!("the child running {test} printed no result:\n{stdout}")))
}

/// Compiles, uploads `args` to device 0, executes and downloads every output.
fn run(mlir: &str, args: &[Array]) -> Vec<Array> {
    let client = client();
    let exe = client.compile(mlir, 1).expect("compile");
    let buffers: Vec<_> = args.iter().map(|a| client.upload(a, 0).expect("upload")).collect();
    let refs: Vec<_> = buffers.iter().collect();
    let outputs = exe.execute(&refs).expect("execute");
    assert_eq!(outputs.len(), exe.num_outputs());
    outputs.iter().map(|b| b.download().expect("download")).collect()
}

fn error_text(result: Result<impl std::fmt::Debug, RuntimeError>) -> String {
    match result {
        Ok(value) => panic!("expected an error, got {value:?}"),
        Err(e) => e.to_string(),
    }
}

const DOT: &str = r#"
module @dot {
  func.func public @main(%a: tensor<2x3xf32>, %b: tensor<3x2xf32>) -> tensor<2x2xf32> {
    %0 = stablehlo.dot_general %a, %b, contracting_dims = [1] x [0] : (tensor<2x3xf32>, tensor<3x2xf32>) -> tensor<2x2xf32>
    return %0 : tensor<2x2xf32>
  }
}"#;

const ADD_I32: &str = r#"
func.func public @main(%a: tensor<4xi32>, %b: tensor<4xi32>) -> tensor<4xi32> {
  %0 = stablehlo.add %a, %b : tensor<4xi32>
  return %0 : tensor<4xi32>
}"#;

#[test]
fn client_reports_platform_version_and_devices() {
    let client = client();
    assert_eq!(client.platform_name(), "cpu");
    let version = client.api_version();
    assert_eq!(version.major, 0);
    assert!(version.minor >= 100, "unexpectedly old plugin: {version}");
    assert_eq!(version.to_string(), format!("0.{}", version.minor));
    let devices = client.devices();
    assert_eq!(devices.len(), 2, "{devices:?}");
    for (i, device) in devices.iter().enumerate() {
        assert_eq!(device.index, i);
        assert!(!device.kind.is_empty() && !device.description.is_empty(), "{device:?}");
    }
    assert_ne!(devices[0].id, devices[1].id);
}

#[test]
fn every_dtype_roundtrips_on_every_device() {
    let client = client();
    let arrays = [
        Array::f32(vec![2, 3], vec![1.5, -2.0, 0.0, f32::MAX, f32::MIN_POSITIVE, -0.0]),
        Array::f32(vec![], vec![std::f32::consts::PI]),
        Array::i32(vec![4], vec![i32::MIN, -1, 0, i32::MAX]),
        Array::new(vec![3], Data::U32(vec![0, 1, u32::MAX])),
        Array::new(vec![2, 2], Data::Bool(vec![true, false, false, true])),
        Array::new(vec![], Data::Bool(vec![true])),
        Array::f32(vec![0, 3], vec![]),
    ];
    for device in 0..client.devices().len() {
        for array in &arrays {
            let buffer = client.upload(array, device).expect("upload");
            assert_eq!(buffer.ty(), &array.ty());
            assert_eq!(buffer.device(), device);
            assert_eq!(&buffer.download().expect("download"), array);
        }
    }
}

#[test]
fn upload_to_a_missing_device_is_an_error() {
    let text = error_text(client().upload(&Array::i32(vec![1], vec![1]), 7));
    assert!(text.contains("device index 7"), "{text}");
}

#[test]
fn dot_general_f32() {
    let a = Array::f32(vec![2, 3], vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    let b = Array::f32(vec![3, 2], vec![7.0, 8.0, 9.0, 10.0, 11.0, 12.0]);
    let out = run(DOT, &[a, b]);
    assert_eq!(out, [Array::f32(vec![2, 2], vec![58.0, 64.0, 139.0, 154.0])]);
}

#[test]
fn add_i32() {
    let a = Array::i32(vec![4], vec![1, -2, 3, i32::MAX]);
    let b = Array::i32(vec![4], vec![10, 20, -30, 1]);
    let out = run(ADD_I32, &[a, b]);
    assert_eq!(out, [Array::i32(vec![4], vec![11, 18, -27, i32::MIN])]);
}

#[test]
fn bool_and_u32_inputs_and_outputs() {
    let mlir = r#"
func.func public @main(%a: tensor<3xf32>, %b: tensor<3xf32>, %p: tensor<3xi1>, %u: tensor<3xui32>)
    -> (tensor<3xi1>, tensor<3xf32>, tensor<3xi1>, tensor<3xui32>) {
  %gt = stablehlo.compare GT, %a, %b : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xi1>
  %max = stablehlo.select %gt, %a, %b : tensor<3xi1>, tensor<3xf32>
  %np = stablehlo.not %p : tensor<3xi1>
  %uu = stablehlo.add %u, %u : tensor<3xui32>
  return %gt, %max, %np, %uu : tensor<3xi1>, tensor<3xf32>, tensor<3xi1>, tensor<3xui32>
}"#;
    let out = run(
        mlir,
        &[
            Array::f32(vec![3], vec![1.0, 5.0, -1.0]),
            Array::f32(vec![3], vec![2.0, 4.0, -1.0]),
            Array::new(vec![3], Data::Bool(vec![true, false, true])),
            Array::new(vec![3], Data::U32(vec![1, 0x8000_0000, 7])),
        ],
    );
    assert_eq!(
        out,
        [
            Array::new(vec![3], Data::Bool(vec![false, true, false])),
            Array::f32(vec![3], vec![2.0, 5.0, -1.0]),
            Array::new(vec![3], Data::Bool(vec![false, true, false])),
            Array::new(vec![3], Data::U32(vec![2, 0, 14])),
        ]
    );
}

#[test]
fn outputs_feed_back_as_inputs_without_download() {
    let client = client();
    let exe = client.compile(ADD_I32, 1).expect("compile");
    let one = client.upload(&Array::i32(vec![4], vec![1, 1, 1, 1]), 0).expect("upload");
    let mut acc = client.upload(&Array::i32(vec![4], vec![0, 1, 2, 3]), 0).expect("upload");
    for _ in 0..10 {
        let mut out = exe.execute(&[&acc, &one]).expect("execute");
        acc = out.pop().expect("one output");
    }
    assert_eq!(acc.ty(), &ArrayTy::new(DType::I32, vec![4]));
    assert_eq!(acc.download().expect("download"), Array::i32(vec![4], vec![10, 11, 12, 13]));
}

#[test]
fn compile_on_second_device() {
    let client = client();
    let exe = client.compile_on(ADD_I32, &[1]).expect("compile");
    assert_eq!(exe.devices(), [1]);
    let a = client.upload(&Array::i32(vec![4], vec![1, 2, 3, 4]), 1).expect("upload");
    let out = exe.execute(&[&a, &a]).expect("execute");
    assert_eq!(out[0].device(), 1);
    assert_eq!(out[0].download().expect("download"), Array::i32(vec![4], vec![2, 4, 6, 8]));
}

const ALL_REDUCE: &str = r#"
module @all_reduce attributes {mhlo.num_replicas = 2 : i32, mhlo.num_partitions = 1 : i32} {
  func.func public @main(%x: tensor<3xf32>) -> (tensor<3xf32>, tensor<ui32>) {
    %sum = "stablehlo.all_reduce"(%x) ({
      ^bb0(%a: tensor<f32>, %b: tensor<f32>):
        %s = stablehlo.add %a, %b : tensor<f32>
        stablehlo.return %s : tensor<f32>
    }) {replica_groups = dense<[[0, 1]]> : tensor<1x2xi64>} : (tensor<3xf32>) -> tensor<3xf32>
    %id = stablehlo.replica_id : tensor<ui32>
    return %sum, %id : tensor<3xf32>, tensor<ui32>
  }
}"#;

#[test]
fn all_reduce_over_two_replicas() {
    let client = client();
    let exe = client.compile(ALL_REDUCE, 2).expect("compile");
    assert_eq!(exe.num_replicas(), 2);
    assert_eq!(exe.devices(), [0, 1]);
    let x0 = client.upload(&Array::f32(vec![3], vec![1.0, 2.0, 3.0]), 0).expect("upload");
    let x1 = client.upload(&Array::f32(vec![3], vec![10.0, 20.0, 30.0]), 1).expect("upload");
    let out = exe.execute_replicated(&[vec![&x0], vec![&x1]]).expect("execute");
    assert_eq!(out.len(), 2);
    for (replica, outputs) in out.iter().enumerate() {
        assert_eq!(outputs[0].device(), replica);
        assert_eq!(outputs[0].download().expect("download"), Array::f32(vec![3], vec![11.0, 22.0, 33.0]));
        assert_eq!(outputs[1].download().expect("download"), Array::new(vec![], Data::U32(vec![replica as u32])));
    }
    // Misuse is an error, not a crash.
    let text = error_text(exe.execute(&[&x0]));
    assert!(text.contains("execute_replicated"), "{text}");
    let text = error_text(exe.execute_replicated(&[vec![&x0]]));
    assert!(text.contains("2 device(s) but 1 argument list(s)"), "{text}");
}

#[test]
fn too_many_replicas_is_an_error() {
    let text = error_text(client().compile(ALL_REDUCE, 3));
    assert!(text.contains("device index 2"), "{text}");
    let text = error_text(client().compile_on(ADD_I32, &[1, 1]));
    assert!(text.contains("two replicas"), "{text}");
}

#[test]
fn handles_are_send_and_sync() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Client>();
    assert_send_sync::<podracer::runtime::Executable>();
    assert_send_sync::<podracer::runtime::Buffer>();
}

#[test]
fn executes_from_two_threads_at_once() {
    let client = client();
    let exe = client.compile(ADD_I32, 1).expect("compile");
    let shared = client.upload(&Array::i32(vec![4], vec![1, 2, 3, 4]), 0).expect("upload");
    std::thread::scope(|s| {
        for t in 0..2 {
            let (exe, shared) = (&exe, &shared);
            s.spawn(move || {
                for i in 0..200 {
                    let x = client.upload(&Array::i32(vec![4], vec![t, i, -i, 0]), 0).expect("upload");
                    let out = exe.execute(&[&x, shared]).expect("execute");
                    let got = out[0].download().expect("download");
                    assert_eq!(got, Array::i32(vec![4], vec![t + 1, i + 2, 3 - i, 4]));
                }
            });
        }
    });
}

#[test]
fn invalid_mlir_is_an_error() {
    let result = in_child("invalid_mlir_is_an_error", &[], || error_text(client().compile("this is not MLIR", 1)));
    if let Some(text) = result {
        assert!(text.contains("PJRT error"), "{text}");
    }
}

#[test]
fn ill_typed_program_is_an_error() {
    let result = in_child("ill_typed_program_is_an_error", &[], || {
        let mlir = r#"
func.func public @main(%a: tensor<4xi32>, %b: tensor<3xi32>) -> tensor<4xi32> {
  %0 = stablehlo.add %a, %b : tensor<4xi32>
  return %0 : tensor<4xi32>
}"#;
        error_text(client().compile(mlir, 1))
    });
    if let Some(text) = result {
        assert!(text.contains("PJRT error"), "{text}");
    }
}

#[test]
fn wrong_argument_count_is_an_error() {
    let result = in_child("wrong_argument_count_is_an_error", &[], || {
        let client = client();
        let exe = client.compile(ADD_I32, 1).expect("compile");
        let a = client.upload(&Array::i32(vec![4], vec![1, 2, 3, 4]), 0).expect("upload");
        error_text(exe.execute(&[&a]))
    });
    if let Some(text) = result {
        assert!(text.contains("PJRT error"), "{text}");
    }
}

#[test]
fn wrong_argument_shape_is_an_error() {
    let result = in_child("wrong_argument_shape_is_an_error", &[], || {
        let client = client();
        let exe = client.compile(ADD_I32, 1).expect("compile");
        let a = client.upload(&Array::i32(vec![4], vec![1, 2, 3, 4]), 0).expect("upload");
        let b = client.upload(&Array::i32(vec![2], vec![1, 2]), 0).expect("upload");
        error_text(exe.execute(&[&a, &b]))
    });
    if let Some(text) = result {
        assert!(text.contains("PJRT error"), "{text}");
    }
}

#[test]
fn argument_on_the_wrong_device_is_an_error() {
    let result = in_child("argument_on_the_wrong_device_is_an_error", &[], || {
        let client = client();
        let exe = client.compile(ADD_I32, 1).expect("compile");
        let a = client.upload(&Array::i32(vec![4], vec![1, 2, 3, 4]), 1).expect("upload");
        error_text(exe.execute(&[&a, &a]))
    });
    if let Some(text) = result {
        assert!(text.contains("PJRT error"), "{text}");
    }
}

#[test]
fn donated_buffer_is_consumed() {
    let result = in_child("donated_buffer_is_consumed", &[], || {
        let mlir = r#"
func.func public @main(%x: tensor<2xf32> {tf.aliasing_output = 0 : i32}) -> tensor<2xf32> {
  %0 = stablehlo.add %x, %x : tensor<2xf32>
  return %0 : tensor<2xf32>
}"#;
        let client = client();
        let exe = client.compile(mlir, 1).expect("compile");
        let x = client.upload(&Array::f32(vec![2], vec![1.0, 2.0]), 0).expect("upload");
        let y = exe.execute(&[&x]).expect("execute");
        assert_eq!(y[0].download().expect("download"), Array::f32(vec![2], vec![2.0, 4.0]));
        let again = error_text(exe.execute(&[&x]));
        format!("{}\n{again}", error_text(x.download()))
    });
    if let Some(text) = result {
        assert!(text.contains("PJRT error"), "{text}");
    }
}

#[test]
fn missing_plugin_path_is_named() {
    let path = Path::new("/nonexistent/podracer/libpjrt_missing.so");
    let text = error_text(Client::new(path, &ClientOptions::default()));
    assert!(text.contains(&*path.to_string_lossy()), "{text}");
    let text = error_text(plugin::find(Backend::Cpu, Some(path)));
    assert!(text.contains(&*path.to_string_lossy()) && text.contains("--plugin"), "{text}");
}

#[test]
fn text_file_is_not_a_plugin() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("libpjrt_fake.so");
    fs::write(&path, "not a shared library\n").expect("write");
    let text = error_text(Client::new(&path, &ClientOptions::default()));
    assert!(text.contains(&*path.to_string_lossy()), "{text}");
    assert!(text.contains("cannot load"), "{text}");
}

#[test]
fn shared_library_without_pjrt_is_not_a_plugin() {
    // The C library this test binary runs on: a real shared library without GetPjrtApi.
    let maps = fs::read_to_string("/proc/self/maps").expect("read /proc/self/maps");
    let libc = maps
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| path.contains("/libc.so") || path.contains("/libc-"))
        .map(PathBuf::from)
        .expect("libc in /proc/self/maps");
    let text = error_text(Client::new(&libc, &ClientOptions::default()));
    assert!(text.contains(&*libc.to_string_lossy()), "{text}");
    assert!(text.contains("GetPjrtApi"), "{text}");
}

#[test]
fn env_var_path_that_does_not_exist_is_named() {
    let missing = Path::new("/nonexistent/podracer/from-env.so");
    let result = in_child("env_var_path_that_does_not_exist_is_named", &[(PLUGIN_ENV, Some(missing))], || {
        error_text(Runtime::open(None, None))
    });
    if let Some(text) = result {
        assert!(text.contains(&*missing.to_string_lossy()), "{text}");
        assert!(text.contains(PLUGIN_ENV), "{text}");
    }
}

#[test]
fn discovery_prefers_explicit_then_env_then_cache() {
    const TEST: &str = "discovery_prefers_explicit_then_env_then_cache";
    const EXPLICIT_ENV: &str = "PODRACER_TEST_EXPLICIT_PLUGIN";
    let lookup = || {
        let explicit = env::var_os(EXPLICIT_ENV).map(PathBuf::from);
        let found = plugin::find(Backend::Cpu, explicit.as_deref()).expect("find");
        found.path.to_string_lossy().into_owned()
    };
    if env::var(CHILD_ENV).as_deref() == Ok(TEST) {
        in_child(TEST, &[], lookup);
        return;
    }
    // Stand-ins: discovery only checks that the files exist.
    let dir = tempfile::tempdir().expect("tempdir");
    let cached = plugin::cpu_plugin_path(dir.path());
    fs::create_dir_all(cached.parent().expect("parent")).expect("mkdir");
    let from_env = dir.path().join("from-env.so");
    let explicit = dir.path().join("explicit.so");
    for file in [&cached, &from_env, &explicit] {
        fs::write(file, "stand-in").expect("write");
    }
    let cases: [(Option<&Path>, Option<&Path>, &Path); 3] =
        [(None, None, &cached), (Some(&from_env), None, &from_env), (Some(&from_env), Some(&explicit), &explicit)];
    for (env_plugin, explicit, expected) in cases {
        let envs = [(PLUGIN_ENV, env_plugin), (EXPLICIT_ENV, explicit), (CACHE_ENV, Some(dir.path()))];
        let found = in_child(TEST, &envs, String::new).expect("the child's result");
        assert_eq!(Path::new(&found), expected);
    }
}

#[test]
fn failed_install_names_the_command_and_the_env_var() {
    let cache = tempfile::tempdir().expect("tempdir");
    let empty_path = tempfile::tempdir().expect("tempdir");
    let result = in_child(
        "failed_install_names_the_command_and_the_env_var",
        &[
            (PLUGIN_ENV, None),
            (CACHE_ENV, Some(cache.path())),
            // No python3 on PATH: the install cannot start.
            ("PATH", Some(empty_path.path())),
        ],
        || error_text(plugin::find(Backend::Cpu, None)),
    );
    if let Some(text) = result {
        assert!(text.contains("python3 was not found"), "{text}");
        assert!(
            text.contains("python3 -m pip install --no-deps --target")
                && text.contains("fastatomstruct-xla-cpu==2026.6.23"),
            "{text}"
        );
        assert!(text.contains(PLUGIN_ENV), "{text}");
        // Nothing half-installed is left where discovery looks.
        assert!(!plugin::cpu_plugin_path(cache.path()).exists());
    }
}
