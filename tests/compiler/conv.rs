//! `conv2d` and `max_pool` against JAX: `lax.conv_general_dilated` (NHWC, HWIO, NHWC) and
//! `flax.linen.max_pool` on the generated cases of `tests/fixtures/conv/conv.json`
//! (`gen_conv.py`: random shapes, strides and paddings, valid, same-like and asymmetric,
//! kernels 1x1 to 8x8, strides 1 to 4, pooling inputs with ties), values and `jax.grad`
//! of `sum(out * ct)`, and a few second derivatives (Hessian-vector products), on the
//! interpreter and on PJRT.
//!
//! Every case becomes a function of one program, and one entry computes them all, so XLA
//! compiles a single module. Values must agree within 1e-5 and gradients within 1e-4,
//! relative to the largest magnitude of the reference array (a sum of products that
//! cancels has no meaningful elementwise relative error).

use crate::common;
use crate::tier;

use common::{client, quick_client};
use podracer::array::{Array, Data};
use podracer::driver::{self, Entry};
use serde_json::Value;
use std::path::Path;

fn fixture() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/conv/conv.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("json")
}

fn dims(v: &Value) -> Vec<usize> {
    v.as_array().expect("a list").iter().map(|d| d.as_u64().expect("a size") as usize).collect()
}

fn ty(shape: &[usize]) -> String {
    let s: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    format!("f32[{}]", s.join(", "))
}

fn array(shape: &[usize], v: &Value) -> Array {
    // Each number is the shortest decimal of an f32: read as f32 from its text.
    let f32_of = |x: &Value| x.to_string().parse::<f32>().expect("a number");
    let data: Vec<f32> = v.as_array().expect("data").iter().map(f32_of).collect();
    Array::new(shape.to_vec(), Data::F32(data))
}

/// `[SH, SW], [[PT, PB], [PL, PR]]` as `.pod` source.
fn geometry(c: &Value) -> String {
    let s = dims(&c["strides"]);
    let p: Vec<Vec<usize>> = c["padding"].as_array().expect("padding").iter().map(dims).collect();
    format!("[{}, {}], [[{}, {}], [{}, {}]]", s[0], s[1], p[0][0], p[0][1], p[1][0], p[1][1])
}

/// One output checked against its reference.
struct Check {
    what: String,
    want: Array,
    tol: f32,
}

/// The program, its arguments, and what each output must be.
fn program(doc: &Value) -> (String, Vec<Array>, Vec<Check>) {
    let (mut src, mut params, mut outs, mut out_tys) = (String::new(), vec![], vec![], vec![]);
    let (mut args, mut checks) = (vec![], vec![]);
    let mut check = |what: String, shape: &[usize], v: &Value, tol: f32| {
        checks.push(Check { what, want: array(shape, v), tol });
    };
    for (i, c) in doc["conv"].as_array().expect("conv").iter().enumerate() {
        let name = c["name"].as_str().expect("name");
        let (xs, ws, ys) = (dims(&c["x_shape"]), dims(&c["w_shape"]), dims(&c["y_shape"]));
        let (xt, wt, yt) = (ty(&xs), ty(&ws), ty(&ys));
        let g = geometry(c);
        src.push_str(&format!(
            "fn conv{i}(x: {xt}, w: {wt}) -> {yt} {{ conv2d(x, w, {g}) }}\n\
             fn conv{i}_loss(p: ({xt}, {wt}), ct: {yt}) -> f32 {{ let (x, w) = p; sum(conv{i}(x, w) * ct) }}\n"
        ));
        params.push(format!("cx{i}: {xt}, cw{i}: {wt}, cct{i}: {yt}"));
        outs.push(format!("conv{i}(cx{i}, cw{i}), grad(conv{i}_loss, (cx{i}, cw{i}), cct{i})"));
        out_tys.push(format!("{yt}, ({xt}, {wt})"));
        args.extend([array(&xs, &c["x"]), array(&ws, &c["w"]), array(&ys, &c["ct"])]);
        check(format!("conv {name}: value"), &ys, &c["y"], 1e-5);
        check(format!("conv {name}: d/dx"), &xs, &c["dx"], 1e-4);
        check(format!("conv {name}: d/dw"), &ws, &c["dw"], 1e-4);
    }
    for (i, c) in doc["pool"].as_array().expect("pool").iter().enumerate() {
        let name = c["name"].as_str().expect("name");
        let (xs, ys) = (dims(&c["x_shape"]), dims(&c["y_shape"]));
        let (xt, yt) = (ty(&xs), ty(&ys));
        let k = dims(&c["window"]);
        let g = geometry(c);
        src.push_str(&format!(
            "fn pool{i}(x: {xt}) -> {yt} {{ max_pool(x, [{}, {}], {g}) }}\n\
             fn pool{i}_loss(x: {xt}, ct: {yt}) -> f32 {{ sum(pool{i}(x) * ct) }}\n",
            k[0], k[1]
        ));
        params.push(format!("px{i}: {xt}, pct{i}: {yt}"));
        outs.push(format!("pool{i}(px{i}), grad(pool{i}_loss, px{i}, pct{i})"));
        out_tys.push(format!("{yt}, {xt}"));
        args.extend([array(&xs, &c["x"]), array(&ys, &c["ct"])]);
        check(format!("pool {name}: value"), &ys, &c["y"], 1e-5);
        check(format!("pool {name}: d/dx"), &xs, &c["dx"], 1e-4);
    }
    src.push_str(&format!("fn main({}) -> ({}) {{ ({}) }}\n", params.join(", "), out_tys.join(", "), outs.join(", ")));
    (src, args, checks)
}

fn build(src: &str) -> Entry {
    let (prog, diags) = driver::check_source("conv.pod", src, None);
    assert!(diags.is_empty(), "{}", podracer::diag::render_plain(&prog.map, &diags));
    driver::build(&prog, &[], "main").unwrap_or_else(|d| panic!("{}", podracer::diag::render_plain(&prog.map, &[*d])))
}

/// Within `tol` of the reference, relative to its largest magnitude.
fn compare(engine: &str, got: &[Array], checks: &[Check]) {
    assert_eq!(got.len(), checks.len(), "{engine}: one output per check");
    let mut worst = [0.0f32; 2];
    for (g, c) in got.iter().zip(checks) {
        assert_eq!(g.shape, c.want.shape, "{engine}, {}: shape", c.what);
        let (Data::F32(g), Data::F32(w)) = (&g.data, &c.want.data) else { panic!("f32 outputs") };
        let scale = w.iter().fold(1e-6f32, |m, v| m.max(v.abs()));
        let err = g.iter().zip(w).fold(0.0f32, |m, (a, b)| m.max((a - b).abs() / scale));
        assert!(err <= c.tol, "{engine}, {}: relative error {err:e} over {:e}\ngot  {g:?}\nwant {w:?}", c.what, c.tol);
        let k = usize::from(c.tol > 1e-5);
        worst[k] = worst[k].max(err);
    }
    println!("{engine}: worst relative error, values {:e}, gradients {:e}", worst[0], worst[1]);
}

/// Every fixture case, values and gradients, through the interpreter and through PJRT.
#[test]
fn conv_and_max_pool_match_jax() {
    let (src, args, checks) = program(&fixture());
    let e = build(&src);
    compare("interpreter", &driver::eval(&e, &args), &checks);
    let dev = podracer::cli::run_on_device(client(), &e, &args).expect("runs on the device");
    compare("pjrt", &dev, &checks);
}

/// `vmap` over `conv2d` and `max_pool` in the three placements (a batch of images with
/// shared weights, shared image with a batch of kernels, both: what `--seeds N` makes),
/// per-example gradients (`vmap` of `grad`) and the gradient of a batched loss (`grad` of
/// `vmap`, whose derivative goes through feature and batch groups), each against a loop
/// over the examples, on the interpreter and on PJRT.
const BATCHED: &str = "
const B: i32 = 3;
fn f(x: f32[9, 8, 3], w: f32[3, 3, 3, 4]) -> f32[4, 3, 4] {
    max_pool(conv2d(x, w, [2, 2], [[1, 1], [1, 1]]), [2, 2], [1, 1], [[0, 0], [0, 0]])
}
fn loss(p: (f32[9, 8, 3], f32[3, 3, 3, 4]), ct: f32[4, 3, 4]) -> f32 { let (x, w) = p; sum(f(x, w) * ct) }
fn g(x: f32[9, 8, 3], w: f32[3, 3, 3, 4], ct: f32[4, 3, 4]) -> (f32[9, 8, 3], f32[3, 3, 3, 4]) {
    grad(loss, (x, w), ct)
}
fn batch_loss(ws: f32[B, 3, 3, 3, 4], xs: f32[B, 9, 8, 3], cts: f32[B, 4, 3, 4]) -> f32 {
    sum(vmap(f, xs, ws) * cts)
}

fn batched(xs: f32[B, 9, 8, 3], ws: f32[B, 3, 3, 3, 4], cts: f32[B, 4, 3, 4])
    -> (f32[B, 4, 3, 4], f32[B, 4, 3, 4], f32[B, 4, 3, 4], (f32[B, 9, 8, 3], f32[B, 3, 3, 3, 4]), f32[B, 3, 3, 3, 4]) {
    (vmap(f, xs, ws[0]), vmap(f, xs[0], ws), vmap(f, xs, ws), vmap(g, xs, ws, cts), grad(batch_loss, ws, xs, cts))
}

fn looped(xs: f32[B, 9, 8, 3], ws: f32[B, 3, 3, 3, 4], cts: f32[B, 4, 3, 4])
    -> (f32[B, 4, 3, 4], f32[B, 4, 3, 4], f32[B, 4, 3, 4], (f32[B, 9, 8, 3], f32[B, 3, 3, 3, 4]), f32[B, 3, 3, 3, 4]) {
    for i in 0..B carry out = (zeros([B, 4, 3, 4]), zeros([B, 4, 3, 4]), zeros([B, 4, 3, 4]), (zeros([B, 9, 8, 3]), zeros([B, 3, 3, 3, 4])), zeros([B, 3, 3, 3, 4])) {
        let (a, b, c, (dx, dw), dws) = out;
        let (gx, gw) = g(xs[i], ws[i], cts[i]);
        (a.set(i, f(xs[i], ws[0])), b.set(i, f(xs[0], ws[i])), c.set(i, f(xs[i], ws[i])), (dx.set(i, gx), dw.set(i, gw)), dws.set(i, gw))
    }
}
";

#[test]
fn batched_conv_matches_a_loop() {
    let (prog, diags) = driver::check_source("batched.pod", BATCHED, None);
    assert!(diags.is_empty(), "{}", podracer::diag::render_plain(&prog.map, &diags));
    let entry = |name| {
        driver::build(&prog, &[], name).unwrap_or_else(|d| panic!("{}", podracer::diag::render_plain(&prog.map, &[*d])))
    };
    let mut rng = common::rng::Rng(0xC0DE);
    let args = vec![
        rng.f32s(&[3, 9, 8, 3], -1.0, 1.0),
        rng.f32s(&[3, 3, 3, 3, 4], -1.0, 1.0),
        rng.f32s(&[3, 4, 3, 4], -1.0, 1.0),
    ];
    let (batched, looped) = (entry("batched"), entry("looped"));
    let want = driver::eval(&looped, &args);
    let checks: Vec<Check> = want.into_iter().map(|a| Check { what: "batched".into(), want: a, tol: 1e-5 }).collect();
    compare("interpreter", &driver::eval(&batched, &args), &checks);
    compare("pjrt", &podracer::cli::run_on_device(client(), &batched, &args).expect("runs"), &checks);
}

/// One spatial dimension of an exhaustive case: input size, kernel (or window), stride,
/// padding before and after.
type Axis = [usize; 5];

/// An exhaustive case: H, W, input channels, output channels.
type Case = (Axis, Axis, usize, usize);

/// The cases of `tests/fixtures/conv/gen_exhaustive.py`, in its order: every geometry of
/// one dimension with a kernel that fits the padded input (sizes 1..5, kernels 1..4,
/// strides 1..3, padding 0..2 per side), on H and on W, beside partner geometries (a
/// kernel of 1 on an input of 1, issue 25's two dimensions: the second for `conv2d`
/// only); (H, W, input channels, output channels).
fn small_cases(conv: bool) -> Vec<Case> {
    const PARTNERS: [Axis; 3] = [[1, 1, 1, 0, 0], [4, 2, 2, 1, 1], [1, 2, 1, 1, 0]];
    const CHANNELS: [(usize, usize); 4] = [(1, 1), (2, 1), (1, 2), (2, 2)];
    let mut axes = vec![];
    for n in 1..=5 {
        for k in 1..=4 {
            for s in 1..=3 {
                for lo in 0..=2 {
                    for hi in 0..=2 {
                        if n + lo + hi >= k {
                            axes.push([n, k, s, lo, hi]);
                        }
                    }
                }
            }
        }
    }
    let mut out = vec![];
    for a in axes {
        for &p in &PARTNERS[..if conv { 3 } else { 2 }] {
            for (h, w) in [(a, p), (p, a)] {
                let (c, o) = CHANNELS[out.len() % 4];
                out.push((h, w, c, if conv { o } else { c }));
            }
        }
    }
    out
}

/// The generator's name of a case, `n k s lo hi|n k s lo hi|c o`.
fn case_name(&(h, w, c, o): &Case) -> String {
    let axis = |a: Axis| a.map(|v| v.to_string()).join(" ");
    format!("{}|{}|{c} {o}", axis(h), axis(w))
}

/// `count` nonzero integers in -4..=4 from splitmix64 seeded with `case * 4 + tensor`
/// (the generator's `ints`).
fn small_ints(case: usize, tensor: u64, shape: &[usize]) -> Array {
    const VALUES: [f32; 8] = [-4.0, -3.0, -2.0, -1.0, 1.0, 2.0, 3.0, 4.0];
    let mut state = case as u64 * 4 + tensor;
    let data = (0..shape.iter().product::<usize>())
        .map(|_| {
            state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            VALUES[((z ^ (z >> 31)) % 8) as usize]
        })
        .collect();
    Array::new(shape.to_vec(), Data::F32(data))
}

/// The generator's `checksum`: a polynomial hash of integer values to 32 bits, -inf as -1e6.
fn checksum(a: &Array) -> Result<u64, String> {
    const PRIME: u128 = (1 << 61) - 1;
    let Data::F32(v) = &a.data else { return Err("not f32".into()) };
    let mut h: u128 = 0;
    for &x in v {
        let q = if x == f32::NEG_INFINITY { -1e6 } else { x as f64 };
        if q.fract() != 0.0 || !q.is_finite() {
            return Err(format!("{x} is not an integer"));
        }
        h = (h * 1_000_003 + (q as i64 + (1 << 40)) as u128) % PRIME;
    }
    Ok((h % (1 << 32)) as u64)
}

/// The failures among `chunk` of the `kind` cases, compiled as one program; `want` is the
/// fixture's list for `kind`.
fn check_chunk(kind: &str, cases: &[Case], chunk: &[usize], want: &[Value]) -> Vec<String> {
    let conv = kind == "conv";
    let mut failures = vec![];
    let (mut src, mut params, mut outs, mut out_tys, mut args) = (String::new(), vec![], vec![], vec![], vec![]);
    for &i in chunk {
        let ([n, kh, sh, pt, pb], [m, kw, sw, pl, pr], c, o) = cases[i];
        let (xs, ys) = ([n, m, c], [(n + pt + pb - kh) / sh + 1, (m + pl + pr - kw) / sw + 1, o]);
        let (xt, yt) = (ty(&xs), ty(&ys));
        let g = format!("[{sh}, {sw}], [[{pt}, {pb}], [{pl}, {pr}]]");
        args.push(small_ints(i, 0, &xs));
        if conv {
            let ws = [kh, kw, c, o];
            let wt = ty(&ws);
            src.push_str(&format!(
                "fn f{i}(x: {xt}, w: {wt}) -> {yt} {{ conv2d(x, w, {g}) }}\n\
                 fn l{i}(p: ({xt}, {wt}), ct: {yt}) -> f32 {{ let (x, w) = p; sum(f{i}(x, w) * ct) }}\n"
            ));
            params.push(format!("x{i}: {xt}, w{i}: {wt}, ct{i}: {yt}"));
            outs.push(format!("f{i}(x{i}, w{i}), grad(l{i}, (x{i}, w{i}), ct{i})"));
            out_tys.push(format!("{yt}, ({xt}, {wt})"));
            args.push(small_ints(i, 1, &ws));
        } else {
            src.push_str(&format!(
                "fn f{i}(x: {xt}) -> {yt} {{ max_pool(x, [{kh}, {kw}], {g}) }}\n\
                 fn l{i}(x: {xt}, ct: {yt}) -> f32 {{ sum(f{i}(x) * ct) }}\n"
            ));
            params.push(format!("x{i}: {xt}, ct{i}: {yt}"));
            outs.push(format!("f{i}(x{i}), grad(l{i}, x{i}, ct{i})"));
            out_tys.push(format!("{yt}, {xt}"));
        }
        args.push(small_ints(i, 2, &ys));
    }
    src.push_str(&format!("fn main({}) -> ({}) {{ ({}) }}\n", params.join(", "), out_tys.join(", "), outs.join(", ")));
    let e = build(&src);
    let host = driver::eval(&e, &args);
    let dev = podracer::cli::run_on_device(quick_client(), &e, &args).expect("runs on the device");
    let per_case = if conv { 3 } else { 2 };
    for (j, &i) in chunk.iter().enumerate() {
        let name = case_name(&cases[i]);
        let outputs = j * per_case..(j + 1) * per_case;
        if host[outputs.clone()] != dev[outputs.clone()] {
            failures.push(format!("{kind} {name}: PJRT differs from the interpreter"));
        }
        let sums: Result<Vec<u64>, String> = host[outputs].iter().map(checksum).collect();
        match (sums, &want[i][1]) {
            (Err(e), _) => failures.push(format!("{kind} {name}: {e}")),
            (Ok(_), Value::Null) => {} // JAX aborted on this case
            (Ok(got), jax) => {
                let jax: Vec<u64> = jax.as_array().expect("sums").iter().map(|s| s.as_u64().expect("a sum")).collect();
                if got != jax {
                    failures.push(format!("{kind} {name}: checksums {got:?}, JAX's {jax:?}"));
                }
            }
        }
    }
    failures
}

/// Issue 25: every small geometry of `conv2d` and `max_pool` (see `small_cases`), with
/// the gradients with respect to image and kernel, compiles on the CPU plugin and gives
/// exactly what the interpreter and JAX give (integer data makes every result exact;
/// JAX's results are checksums, `gen_exhaustive.py`). Programs of 250 cases, compiled on
/// two threads (one client, compiling quickly): XLA's compile is the time.
#[test]
fn exhaustive_small_geometries_match_jax() {
    if tier::slow("every small conv geometry") {
        return;
    }
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/conv/exhaustive.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("json");
    let kinds = ["conv", "pool"].map(|kind| {
        let cases = small_cases(kind == "conv");
        let want = doc[kind].as_array().expect("cases");
        let names: Vec<&str> = want.iter().map(|c| c[0].as_str().expect("a name")).collect();
        assert_eq!(names, cases.iter().map(case_name).collect::<Vec<_>>(), "{kind}: the fixture's cases");
        let chunks: Vec<Vec<usize>> = (0..cases.len()).collect::<Vec<_>>().chunks(250).map(<[usize]>::to_vec).collect();
        (kind, cases, want, chunks)
    });
    // (kind, its cases, its fixture list, one chunk of case indices)
    let jobs: Vec<_> = kinds
        .iter()
        .flat_map(|(kind, cases, want, chunks)| chunks.iter().map(move |c| (*kind, &cases[..], &want[..], &c[..])))
        .collect();
    // Each thread takes the next chunk when it is done with one (a pooling chunk costs
    // about twice a convolution chunk), so that both stay busy to the end.
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut failures: Vec<(usize, String)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    std::iter::from_fn(|| {
                        let j = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        jobs.get(j).map(|job| (j, job))
                    })
                    .flat_map(|(j, &(k, cases, want, c))| {
                        check_chunk(k, cases, c, want).into_iter().map(move |f| (j, f))
                    })
                    .collect::<Vec<_>>()
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("a worker")).collect()
    });
    // In the order of the jobs, as one thread would have found them.
    failures.sort_by_key(|(j, _)| *j);
    let failures: Vec<String> = failures.into_iter().map(|(_, f)| f).collect();
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures[..failures.len().min(20)].join("\n"));
}
