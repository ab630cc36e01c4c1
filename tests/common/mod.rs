//! Shared by the integration tests: one PJRT client per test process (creating one is
//! costly on a 2-core machine), compile-run-compare helpers, deterministic random
//! inputs ([`rng`]), and the environment parity tests' helpers ([`env`]).

#![allow(dead_code)]

pub mod env;
pub mod generate;
pub mod oracle;
pub mod prims;
pub mod rng;

use podracer::array::{Array, Data};
use podracer::driver::{self, Entry};
use podracer::runtime::{Client, Runtime, XlaOption};
use std::path::Path;
use std::sync::OnceLock;

/// The process's client. The plugin is found (or fetched) as `podc` does; a missing
/// plugin fails the test with the runtime's message, which names the fix.
pub fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| match Runtime::open(None, Some(2)) {
        Ok(c) => c,
        Err(e) => panic!("the runtime tests need the PJRT CPU plugin: {e}"),
    })
}

/// The process's client compiling for speed of compiling (XLA's older fusion emitters,
/// where the plugin's XLA still has them, and LLVM at -O0), which more than halves the
/// compile time of small programs. For the large corpora (generated programs, every conv
/// geometry), which check podc's lowering: these options leave the operations the code
/// runs as they are.
pub fn quick_client() -> &'static Client {
    static QUICK: OnceLock<Client> = OnceLock::new();
    QUICK.get_or_init(|| {
        let o0 = ("xla_backend_optimization_level", XlaOption::Int(0));
        let older =
            client().clone().with_xla_options(&[("xla_cpu_use_fusion_emitters", XlaOption::Bool(false)), o0.clone()]);
        // XLA rejects an option it does not have, and 0.11 removed this one.
        const IDENTITY: &str = "func.func public @main(%x: tensor<f32>) -> tensor<f32> { return %x : tensor<f32> }";
        match older.compile(IDENTITY, 1) {
            Ok(_) => older,
            Err(e) if e.to_string().contains("No such compile option") => client().clone().with_xla_options(&[o0]),
            Err(e) => panic!("the quick client cannot compile the identity: {e}"),
        }
    })
}

/// Checks and builds `main` of a file, failing with the rendered diagnostics.
pub fn entry(path: &Path) -> Entry {
    let (prog, diags) = driver::check_file(path).expect("readable");
    if !diags.is_empty() {
        panic!("{}", podracer::diag::render_plain(&prog.map, &diags));
    }
    driver::build(&prog, &[], "main").unwrap_or_else(|d| panic!("{}", podracer::diag::render_plain(&prog.map, &[*d])))
}

/// Runs an entry through the interpreter and through PJRT; asserts they agree and
/// returns the interpreter's result (deterministic on every machine, so fit to snapshot).
pub fn run_both(e: &Entry, args: &[Array]) -> Vec<Array> {
    let host = driver::eval(e, args);
    let dev = podracer::cli::run_on_device(client(), e, args).expect("runs on the device");
    assert_close(&host, &dev, 1e-5);
    host
}

/// Equal dtypes and shapes; ints and bools exact, floats within `rtol` (and 1e-6 absolute).
pub fn assert_close(a: &[Array], b: &[Array], rtol: f32) {
    assert_eq!(a.len(), b.len(), "different numbers of outputs");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert_eq!(x.shape, y.shape, "output {i}: shapes differ");
        match (&x.data, &y.data) {
            (Data::F32(u), Data::F32(v)) => {
                for (k, (p, q)) in u.iter().zip(v).enumerate() {
                    let ok = (p.is_nan() && q.is_nan()) || p == q || (p - q).abs() <= 1e-6 + rtol * q.abs();
                    assert!(ok, "output {i}[{k}]: {p} vs {q} (left {u:?}, right {v:?})");
                }
            }
            _ => assert_eq!(x.data, y.data, "output {i} differs"),
        }
    }
}
