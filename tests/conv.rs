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

mod common;

use common::client;
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
    driver::build(&prog, "main").unwrap_or_else(|d| panic!("{}", podracer::diag::render_plain(&prog.map, &[*d])))
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
        driver::build(&prog, name).unwrap_or_else(|d| panic!("{}", podracer::diag::render_plain(&prog.map, &[*d])))
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
