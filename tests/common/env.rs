//! Shared by the environment parity tests (`tests/env_*.rs`): an example env's derived
//! functions, each compiled for PJRT at most once per test process (an XLA compile costs
//! a good fraction of a second on a 2-core machine) and runnable through the reference
//! interpreter too, plus readers for the reference fixtures in `tests/fixtures/envs/`.

use super::client;
use podracer::array::{Array, ArrayTy, Data};
use podracer::elab::env::build_env;
use podracer::ir::Func;
use podracer::ir::eval::eval_func;
use podracer::lower::stablehlo::lower_module;
use podracer::runtime::Executable;
use podracer::types::{Dim, Ty};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::OnceLock;

/// One derived function: its IR, and its executable once something ran it on the device.
pub struct EnvFn {
    pub func: Func,
    exe: OnceLock<Executable>,
}

impl EnvFn {
    fn new(func: Func) -> EnvFn {
        EnvFn { func, exe: OnceLock::new() }
    }

    /// Runs the function through the reference interpreter.
    pub fn host(&self, args: &[Array]) -> Vec<Array> {
        eval_func(&self.func, args)
    }

    /// Runs the function through PJRT, compiling it on first use.
    pub fn device(&self, args: &[Array]) -> Vec<Array> {
        let exe = self.exe.get_or_init(|| {
            client()
                .compile(&lower_module(&self.func, 1), 1)
                .unwrap_or_else(|e| panic!("{} compiles: {e}", self.func.name))
        });
        let bufs: Vec<_> = args.iter().map(|a| client().upload(a, 0).expect("upload")).collect();
        let outs = exe.execute(&bufs.iter().collect::<Vec<_>>()).expect("runs on the device");
        outs.iter().map(|b| b.download().expect("download")).collect()
    }

    /// Both ways, labelled, for checks that each must pass.
    pub fn both(&self, args: &[Array]) -> [(&'static str, Vec<Array>); 2] {
        [("interpreter", self.host(args)), ("pjrt", self.device(args))]
    }
}

/// An env of an example file with its derived functions
/// (see `podracer::elab::env::EnvFuncs` for their signatures).
pub struct Env {
    /// The state's fields in declaration order, which is the order of its leaves; only
    /// states whose fields are arrays (one leaf each) are supported.
    pub fields: Vec<(String, ArrayTy)>,
    pub reset: EnvFn,
    pub step: EnvFn,
    pub raw_step: EnvFn,
}

impl Env {
    /// Checks `file` (relative to the crate root) and derives the env `name`'s functions,
    /// failing with the rendered diagnostics.
    pub fn load(file: &str, name: &str) -> Env {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
        let (prog, diags) = podracer::driver::check_file(&path).expect("readable");
        if !diags.is_empty() {
            panic!("{}", podracer::diag::render_plain(&prog.map, &diags));
        }
        let f = build_env(&prog, &[], name)
            .unwrap_or_else(|d| panic!("{}", podracer::diag::render_plain(&prog.map, &[*d])));
        let Ty::Struct(def, args) = &f.info.state else { panic!("the state of {name} is not a struct") };
        let fields = Ty::struct_fields(def, args)
            .into_iter()
            .map(|(n, t)| match t.leaves().as_deref() {
                Some([leaf]) => (n, leaf.clone()),
                _ => panic!("state field `{n}` of {name} is not an array"),
            })
            .collect();
        Env { fields, reset: EnvFn::new(f.reset), step: EnvFn::new(f.step), raw_step: EnvFn::new(f.raw_step) }
    }

    /// How many leaves the state has.
    pub fn n_state(&self) -> usize {
        self.fields.len()
    }

    /// The state's leaves from a JSON object with (at least) every field of the state;
    /// fields the state does not have are ignored (a reference may keep more).
    pub fn state(&self, v: &Value) -> Vec<Array> {
        self.fields
            .iter()
            .map(|(n, t)| {
                let x = v.get(n).unwrap_or_else(|| panic!("no field `{n}` in {v}"));
                let ty = Ty::Array(t.dtype, t.shape.iter().map(|&d| Dim::Known(d as u64)).collect());
                podracer::io::args_from_json(&[ty], &json!([x]))
                    .unwrap_or_else(|e| panic!("field `{n}`: {e}"))
                    .remove(0)
            })
            .collect()
    }
}

/// A fixture of `tests/fixtures/envs/`, e.g. `fixture("catch")`.
pub fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/envs").join(format!("{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture is readable")).expect("fixture is JSON")
}

/// A key as the fixtures record it: `[k0, k1]`, two u32.
pub fn key(v: &Value) -> Array {
    let words: Vec<u32> =
        v.as_array().expect("a key is a list").iter().map(|w| w.as_u64().expect("u32") as u32).collect();
    assert_eq!(words.len(), 2, "a key has two words: {v}");
    Array::new(vec![2], Data::U32(words))
}

pub fn i32_scalar(x: i32) -> Array {
    Array::i32(vec![], vec![x])
}

pub fn f32_scalar(x: f32) -> Array {
    Array::f32(vec![], vec![x])
}

pub fn bool_scalar(b: bool) -> Array {
    Array::new(vec![], Data::Bool(vec![b]))
}

/// A JSON list of numbers as f32 (exact for values the fixtures wrote from float32).
pub fn f32s(v: &Value) -> Vec<f32> {
    v.as_array().expect("a list of numbers").iter().map(|x| x.as_f64().expect("a number") as f32).collect()
}

/// An array's f32 entries, row-major.
pub fn f32_data(a: &Array) -> &[f32] {
    match &a.data {
        Data::F32(v) => v,
        d => panic!("expected f32 data, found {d:?}"),
    }
}

/// A scalar's value, as the fixtures write scalars.
pub fn scalar_json(a: &Array) -> Value {
    assert!(a.shape.is_empty(), "not a scalar: {a:?}");
    match &a.data {
        Data::F32(v) => json!(v[0]),
        Data::I32(v) => json!(v[0]),
        Data::U32(v) => json!(v[0]),
        Data::U8(v) => json!(v[0]),
        Data::Bool(v) => json!(v[0]),
    }
}

/// A fixture value that must be a list.
pub fn list(v: &Value) -> &Vec<Value> {
    v.as_array().unwrap_or_else(|| panic!("expected a list, found {v}"))
}

/// A fixture value that must be a bool.
pub fn flag(v: &Value) -> bool {
    v.as_bool().unwrap_or_else(|| panic!("expected a bool, found {v}"))
}

/// A fixture value that must be an integer.
pub fn int(v: &Value) -> i32 {
    v.as_i64().unwrap_or_else(|| panic!("expected an integer, found {v}")) as i32
}

/// Asserts an output equals the reference's, naming where and what.
pub fn same(at: &str, what: &str, got: &Array, want: &Array) {
    assert_eq!(got, want, "{at}: {what} differs (left: ours, right: gymnax)");
}

/// Asserts every state field equals the reference's.
pub fn same_state(env: &Env, at: &str, got: &[Array], want: &[Array]) {
    for (((f, _), g), w) in env.fields.iter().zip(got).zip(want) {
        same(at, &format!("state.{f}"), g, w);
    }
}
