//! The u8 dtype against JAX's `jnp.uint8`: every program of `tests/fixtures/u8/u8.pod`
//! through the interpreter and through PJRT, compared with what `gen_u8.py` recorded from
//! jitted JAX. Bytes, integers and bools must match exactly; floats within 1e-6 relative
//! (a float divided by a constant is an ulp apart: XLA multiplies by the reciprocal).

use crate::common;

use common::{assert_close, client};
use podracer::array::{Array, Data};
use podracer::driver;
use serde_json::Value;
use std::path::Path;

fn fixture_path(file: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/u8").join(file)
}

fn array(v: &Value) -> Array {
    let shape: Vec<usize> =
        v["shape"].as_array().expect("shape").iter().map(|d| d.as_u64().unwrap() as usize).collect();
    let list = |k: &str| v[k].as_array().unwrap_or_else(|| panic!("{k} of {v}")).clone();
    let ints = |k: &str| list(k).iter().map(|x| x.as_i64().expect("an integer")).collect::<Vec<i64>>();
    let data = match v["dtype"].as_str() {
        Some("f32") => Data::F32(ints("bits").iter().map(|&b| f32::from_bits(b as u32)).collect()),
        Some("i32") => Data::I32(ints("data").iter().map(|&x| x as i32).collect()),
        Some("u32") => Data::U32(ints("data").iter().map(|&x| x as u32).collect()),
        Some("u8") => Data::U8(ints("data").iter().map(|&x| x as u8).collect()),
        Some("bool") => Data::Bool(list("data").iter().map(|x| x.as_bool().expect("a bool")).collect()),
        other => panic!("dtype {other:?}"),
    };
    Array::new(shape, data)
}

#[test]
fn programs_match_jax_uint8() {
    let (prog, diags) = driver::check_file(&fixture_path("u8.pod")).expect("readable");
    assert!(diags.is_empty(), "{}", podracer::diag::render_plain(&prog.map, &diags));
    let doc: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture_path("u8.json")).expect("fixture")).expect("json");
    let cases = doc["cases"].as_array().expect("cases");
    assert_eq!(cases.len(), 10);
    for c in cases {
        let name = c["name"].as_str().expect("name");
        let e = driver::build(&prog, &[], &format!("t_{name}"))
            .unwrap_or_else(|d| panic!("{}", podracer::diag::render_plain(&prog.map, &[*d])));
        let args: Vec<Array> = c["inputs"].as_array().expect("inputs").iter().map(array).collect();
        let want: Vec<Array> = c["outputs"].as_array().expect("outputs").iter().map(array).collect();
        let host = driver::eval(&e, &args);
        let dev = podracer::cli::run_on_device(client(), &e, &args).expect("runs on the device");
        println!("{name}: {host:?}");
        assert_close(&host, &want, 1e-6);
        assert_close(&dev, &want, 1e-6);
    }
}

/// An env whose observation and state hold u8 frames trains under Anakin, checkpoints
/// them as safetensors U8, and a run resumed from its checkpoint equals an uninterrupted
/// one (`tests/agents/pixels.pod`).
#[test]
fn a_pixel_agent_trains_checkpoints_and_resumes() {
    use podracer::train::{checkpoint, metrics};
    let agent = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/agents/pixels.pod");
    let dir = tempfile::tempdir().expect("tempdir");
    let train = |out: &str, steps: &str, extra: &[&str]| {
        let out = dir.path().join(out);
        let mut args = vec!["train", agent.to_str().expect("utf-8"), "-q", "--seed", "3", "--envs", "4"];
        args.extend(["--rollout", "4", "--updates-per-call", "2", "--total-steps", steps]);
        args.extend(["--out", out.to_str().expect("utf-8")]);
        args.extend(extra);
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_podc")).args(&args).output().expect("podc starts");
        assert!(o.status.success(), "podc train failed: {}", String::from_utf8_lossy(&o.stderr));
        let mut records = metrics::read(&out).expect("metrics");
        for r in &mut records {
            r.remove("steps_per_sec");
            r.remove("wall_s");
        }
        (out, records)
    };
    let (whole, whole_metrics) = train("whole", "128", &[]);
    let (half, _) = train("half", "64", &[]);
    let (_, resumed_metrics) = train("half", "128", &["--resume", half.to_str().expect("utf-8")]);
    assert_eq!(resumed_metrics, whole_metrics);
    // Two lit pixels per frame, 16 frames per update.
    assert!(whole_metrics.iter().all(|r| r["lit"].as_f64() == Some(32.0)), "{whole_metrics:?}");
    let (arrays, _) = checkpoint::load(&whole).expect("checkpoint");
    let (resumed, _) = checkpoint::load(&half).expect("checkpoint");
    assert!(arrays == resumed, "the final checkpoints' arrays differ");
    let frames: Vec<&(String, Array)> = arrays.iter().filter(|(_, a)| matches!(a.data, Data::U8(_))).collect();
    assert!(frames.iter().any(|(n, a)| n.contains("frame") && a.shape.ends_with(&[10, 5])), "no u8 frame in {:?}", {
        arrays.iter().map(|(n, a)| format!("{n}: {}", a.ty())).collect::<Vec<_>>()
    });
}

/// The same agent under Sebulba, its env stepped on the host by the `pod:` backend: u8
/// observations travel through the host rollout buffers intact (two lit pixels a frame).
#[test]
fn a_pixel_agent_trains_under_sebulba() {
    let agent = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/agents/pixels.pod");
    let agent = agent.to_str().expect("utf-8");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().to_str().expect("utf-8");
    let env = format!("pod:{agent}");
    let args = ["train", agent, "--env", &env, "-q", "--seed", "0", "--envs", "4", "--rollout", "4"];
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_podc"))
        .args(args)
        .args(["--total-steps", "64", "--out", out])
        .output()
        .expect("podc starts");
    assert!(o.status.success(), "podc train failed: {}", String::from_utf8_lossy(&o.stderr));
    let records = podracer::train::metrics::read(dir.path()).expect("metrics");
    assert!(!records.is_empty() && records.iter().all(|r| r["lit"].as_f64() == Some(32.0)), "{records:?}");
}
