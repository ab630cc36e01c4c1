//! What every valid program must satisfy, for programs nobody designed the compiler around
//! (generated ones, and the regressions they found): it checks cleanly, builds without a
//! panic, the IR verifies, and the compiled results equal the reference interpreter's; its
//! `main` batched by `vmap` equals a loop over the examples; its env's derived step, and
//! the step batched, compile to what the interpreter computes; its agent's Anakin training
//! program does too.
//!
//! Floats are compared as the other runtime tests compare them: within a relative 1e-4
//! (plus 1e-4 absolute), because XLA fuses multiply-adds and the interpreter does not, and
//! generated programs chain many operations; integers, bools and keys exactly.

use podracer::array::{Array, DType, Data};
use podracer::driver;
use podracer::elab::env::build_env;
use podracer::ir::Func;
use podracer::ir::build::Builder;
use podracer::ir::eval::eval_func;
use podracer::lower::stablehlo::lower_module;
use podracer::programs::anakin::{DeviceShape, anakin_programs};
use podracer::runtime::Client;
use podracer::space::ActionSpace;
use podracer::train::anakin::{RunShape, agent_and_env};
use podracer::transform::vmap::vmap;

const RTOL: f32 = 1e-4;
const ATOL: f32 = 1e-4;

/// Deterministic inputs (splitmix64).
pub struct Inputs(pub u64);

impl Inputs {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Floats on a grid of 0.05 in [-2, 2], i32 in [-5, 5], any u32 (keys) and u8.
    pub fn array(&mut self, dtype: DType, shape: &[usize]) -> Array {
        let n: usize = shape.iter().product();
        let data = match dtype {
            DType::F32 => Data::F32((0..n).map(|_| (self.next() % 81) as f32 * 0.05 - 2.0).collect()),
            DType::I32 => Data::I32((0..n).map(|_| (self.next() % 11) as i32 - 5).collect()),
            DType::U32 => Data::U32((0..n).map(|_| self.next() as u32).collect()),
            DType::U8 => Data::U8((0..n).map(|_| self.next() as u8).collect()),
            DType::Bool => Data::Bool((0..n).map(|_| self.next() & 1 == 1).collect()),
        };
        Array::new(shape.to_vec(), data)
    }

    fn args(&mut self, f: &Func) -> Vec<Array> {
        f.param_types().iter().map(|t| self.array(t.dtype, &t.shape)).collect()
    }
}

/// Equal dtypes and shapes; floats within the tolerances, the rest exactly.
pub fn close(what: &str, host: &[Array], dev: &[Array]) -> Result<(), String> {
    if host.len() != dev.len() {
        return Err(format!("{what}: {} outputs against {}", host.len(), dev.len()));
    }
    for (i, (x, y)) in host.iter().zip(dev).enumerate() {
        if x.shape != y.shape {
            return Err(format!("{what}: output {i} has shape {:?} against {:?}", x.shape, y.shape));
        }
        let same = match (&x.data, &y.data) {
            (Data::F32(u), Data::F32(v)) => u.iter().zip(v).all(|(p, q)| {
                (p.is_nan() && q.is_nan()) || p == q || (p - q).abs() <= ATOL + RTOL * q.abs().max(p.abs())
            }),
            (a, b) => a == b,
        };
        if !same {
            return Err(format!("{what}: output {i} differs:\n  interpreter {:?}\n  compiled    {:?}", x.data, y.data));
        }
    }
    Ok(())
}

/// `f` compiled for one device and run on `args`.
pub fn run_compiled(client: &Client, f: &Func, args: &[Array]) -> Result<Vec<Array>, String> {
    let exe = client.compile(&lower_module(f, 1), 1).map_err(|e| format!("{}: compile: {e}", f.name))?;
    let bufs = args.iter().map(|a| client.upload(a, 0)).collect::<Result<Vec<_>, _>>().map_err(|e| e.to_string())?;
    let out = exe.execute(&bufs.iter().collect::<Vec<_>>()).map_err(|e| format!("{}: run: {e}", f.name))?;
    out.iter().map(|b| b.download().map_err(|e| e.to_string())).collect()
}

/// A compiled check: `func` on `args` must give `want`, what the interpreter computes.
pub struct Case {
    pub func: Func,
    pub args: Vec<Array>,
    pub want: Vec<Array>,
}

impl Case {
    fn new(func: Func, args: Vec<Array>) -> Case {
        let want = eval_func(&func, &args);
        Case { func, args, want }
    }

    /// The case compiled alone.
    pub fn run(&self, client: &Client) -> Result<(), String> {
        close(&self.func.name, &self.want, &run_compiled(client, &self.func, &self.args)?)
    }
}

/// The failures among `cases` (index and message), compiled as one program (compiling
/// costs XLA a fixed part per program). Where the whole fails, each case is compiled
/// alone, so that a failure names its own case.
pub fn run_together(client: &Client, cases: &[Case]) -> Vec<(usize, String)> {
    let mut b = Builder::new();
    let mut params = vec![];
    let mut results = vec![];
    for c in cases {
        let ps: Vec<_> = c.func.param_types().iter().map(|t| b.fresh(t.clone())).collect();
        results.extend(b.inline(&c.func, &ps));
        params.extend(ps);
    }
    let together = b.finish("cases", params, results);
    let args: Vec<Array> = cases.iter().flat_map(|c| c.args.iter().cloned()).collect();
    let want: Vec<Array> = cases.iter().flat_map(|c| c.want.iter().cloned()).collect();
    if run_compiled(client, &together, &args).and_then(|got| close("cases", &want, &got)).is_ok() {
        return vec![];
    }
    cases.iter().enumerate().filter_map(|(i, c)| c.run(client).err().map(|e| (i, e))).collect()
}

/// `n` examples stacked along a new leading axis.
fn stack(xs: &[Array]) -> Array {
    let mut shape = vec![xs.len()];
    shape.extend(&xs[0].shape);
    let data = match &xs[0].data {
        Data::F32(_) => {
            Data::F32(xs.iter().flat_map(|x| if let Data::F32(v) = &x.data { v.clone() } else { vec![] }).collect())
        }
        Data::I32(_) => {
            Data::I32(xs.iter().flat_map(|x| if let Data::I32(v) = &x.data { v.clone() } else { vec![] }).collect())
        }
        Data::U32(_) => {
            Data::U32(xs.iter().flat_map(|x| if let Data::U32(v) = &x.data { v.clone() } else { vec![] }).collect())
        }
        Data::U8(_) => {
            Data::U8(xs.iter().flat_map(|x| if let Data::U8(v) = &x.data { v.clone() } else { vec![] }).collect())
        }
        Data::Bool(_) => {
            Data::Bool(xs.iter().flat_map(|x| if let Data::Bool(v) = &x.data { v.clone() } else { vec![] }).collect())
        }
    };
    Array::new(shape, data)
}

/// `f` batched over `n` examples (every parameter batched) equals `f` on each, in the
/// interpreter; the batched function and its arguments, to compile.
fn batched_agrees(f: &Func, examples: &[Vec<Array>]) -> Result<Case, String> {
    let n = examples.len();
    let batched = vmap(f, &vec![true; f.graph.params.len()], n);
    podracer::ir::verify::verify(&batched).map_err(|e| format!("vmap of {}: {e}", f.name))?;
    let each: Vec<Vec<Array>> = examples.iter().map(|a| eval_func(f, a)).collect();
    let want: Vec<Array> =
        (0..each[0].len()).map(|r| stack(&each.iter().map(|o| o[r].clone()).collect::<Vec<_>>())).collect();
    let args: Vec<Array> =
        (0..f.graph.params.len()).map(|p| stack(&examples.iter().map(|a| a[p].clone()).collect::<Vec<_>>())).collect();
    let got = eval_func(&batched, &args);
    close(&format!("vmap of {} against a loop", f.name), &want, &got)?;
    Ok(Case { func: Func { name: format!("vmap of {}", f.name), ..batched }, args, want: got })
}

/// Runs every check on a program's source; `Err` says what failed.
pub fn check(
    client: &Client,
    source: &str,
    env: Option<&str>,
    agent: Option<(&str, usize, usize)>,
    seed: u64,
) -> Result<(), String> {
    let cases = cases(source, env, agent, seed)?;
    match run_together(client, &cases).into_iter().next() {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

/// The checks of a program's source that need no device (`Err` says what failed), and
/// the cases left for the device.
pub fn cases(
    source: &str,
    env: Option<&str>,
    agent: Option<(&str, usize, usize)>,
    seed: u64,
) -> Result<Vec<Case>, String> {
    let (prog, diags) = driver::check_source("generated.pod", source, None);
    if !diags.is_empty() {
        return Err(format!("does not check:\n{}", podracer::diag::render_plain(&prog.map, &diags)));
    }
    let render = |d: &podracer::diag::Diag| podracer::diag::render_plain(&prog.map, std::slice::from_ref(d));
    let mut inputs = Inputs(seed);
    let mut cases = vec![];
    if prog.root_fn("main").is_some() {
        let e = driver::build(&prog, &[], "main").map_err(|d| format!("main does not build:\n{}", render(&d)))?;
        let args = inputs.args(&e.func);
        let examples: Vec<Vec<Array>> = (0..2).map(|_| inputs.args(&e.func)).collect();
        batched_agrees(&e.func, &examples)?;
        cases.push(Case::new(e.func, args));
    }
    if let Some(name) = env {
        let env = build_env(&prog, &[], name).map_err(|d| format!("env does not build:\n{}", render(&d)))?;
        // From reset states: the auto-resetting step, alone and batched.
        let states: Vec<Vec<Array>> = (0..3)
            .map(|_| {
                let mut out = eval_func(&env.reset, &[inputs.array(DType::U32, &[2])]);
                out.pop(); // the observation
                out.push(match &env.info.action {
                    ActionSpace::Discrete(n) => Array::i32(vec![], vec![(inputs.next() % n) as i32]),
                    ActionSpace::Box { n, .. } => inputs.array(DType::F32, &[*n as usize]),
                });
                out.push(inputs.array(DType::U32, &[2]));
                out
            })
            .collect();
        cases.push(batched_agrees(&env.step, &states)?);
        cases.push(Case::new(env.step, states.into_iter().next().expect("three states")));
    }
    if let Some((name, steps, envs)) = agent {
        let run = RunShape { envs, rollout: steps, updates_per_call: 2, devices: 1, processes: 1, seeds: 1 };
        let (a, e) =
            agent_and_env(&prog, &[], name, run).map_err(|d| format!("agent does not build:\n{}", render(&d)))?;
        let p = anakin_programs(&prog, &a, &e, DeviceShape { envs, steps, updates: 2 });
        let state = eval_func(&p.init, &[podracer::io::seed_key(seed as i64), Array::i32(vec![], vec![0])]);
        cases.push(Case::new(Func { name: "anakin train".into(), ..p.train }, state));
    }
    Ok(cases)
}
