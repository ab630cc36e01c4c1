//! `bench/gpu_check.sh --dry-run`: every step of the first GPU run, on the CPU plugin at
//! small sizes, so that the script is known to work before a GPU is lent. The JAX
//! baselines need a Python with JAX (`--python`); without one their half of a step fails
//! and the step says so, while podc's half must still be there.

use crate::tier;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

#[test]
fn the_dry_run_writes_every_step() {
    if tier::slow("bench/gpu_check.sh --dry-run (a minute of benchmarks)") {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = tempfile::tempdir().unwrap();
    let o = Command::new("bash")
        .arg(root.join("bench/gpu_check.sh"))
        .args(["--dry-run", "--podc", env!("CARGO_BIN_EXE_podc"), "--out"])
        .arg(out.path())
        .current_dir(root)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let summary: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("summary.json")).unwrap()).unwrap();
    assert_eq!(summary["dry_run"], true);
    assert_eq!(summary["backend"], "cpu");
    let steps = summary["steps"].as_array().unwrap();
    let names: Vec<&str> = steps.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["devices", "parity", "bench_env", "bench_train", "sebulba", "nature_cnn"]);
    let step = |name: &str| steps.iter().find(|s| s["name"] == name).unwrap();
    for name in ["devices", "parity", "bench_env", "sebulba"] {
        assert_eq!(step(name)["status"], "ok", "{name}: {}", step(name)["log_tail"]);
    }
    for s in steps {
        assert!(s["seconds"].as_f64().unwrap() < s["timeout_s"].as_f64().unwrap(), "{s}");
        assert!(s["log_tail"].is_string() && s["figures"].is_array(), "{s}");
    }
    assert_eq!(step("parity")["figures"][0]["ok"], true);
    assert_eq!(step("bench_env")["figures"].as_array().unwrap().len(), 4);
    let podc_side =
        |name: &str| step(name)["figures"].as_array().unwrap().iter().filter(|f| f["side"] == "podc").count();
    assert_eq!(podc_side("bench_train"), 4);
    assert_eq!(podc_side("nature_cnn"), 1);
    assert!(step("sebulba")["figures"][0]["env_steps"].as_u64().unwrap() >= 65536);
    let md = std::fs::read_to_string(out.path().join("summary.md")).unwrap();
    assert!(md.contains("| sebulba | ok |"), "{md}");
}
