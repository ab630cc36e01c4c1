//! Generates the parser from `grammar/pod.lalrpop` into `$OUT_DIR/pod.rs`, and builds the
//! gloo shim (`src/distributed/gloo_shim.cc`) as its own shared library where gloo's
//! headers are installed (`apt-get install libgloo-dev`): podc embeds it and loads it only
//! for multi-process CPU runs, so the podc binary never needs libgloo to start.

use std::path::PathBuf;
use std::process::Command;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    gloo_shim()?;
    lalrpop::Configuration::new()
        .set_in_dir("grammar")
        // Only the grammar can change the generated parser, so do not rerun on every edit.
        .emit_rerun_directives(true)
        .process()
}

/// Sets `cfg(gloo)` and `PODC_GLOO_SHIM` (the library's path) when the shim builds.
fn gloo_shim() -> Result<(), Box<dyn std::error::Error>> {
    const SRC: &str = "src/distributed/gloo_shim.cc";
    println!("cargo::rustc-check-cfg=cfg(gloo)");
    println!("cargo::rerun-if-changed={SRC}");
    println!("cargo::rerun-if-changed=/usr/include/gloo/allreduce.h");
    println!("cargo::rerun-if-env-changed=CXX");
    if !std::path::Path::new("/usr/include/gloo/allreduce.h").exists() {
        println!(
            "cargo::warning=gloo is not installed (apt-get install libgloo-dev): multi-process CPU training is off"
        );
        return Ok(());
    }
    let out = PathBuf::from(std::env::var("OUT_DIR")?).join("libpodc_gloo.so");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".into());
    let status = Command::new(&cxx)
        .args(["-std=c++17", "-O2", "-fPIC", "-shared", SRC, "-o"])
        .arg(&out)
        .args(["-lgloo", "-pthread"])
        .status()
        .map_err(|e| format!("cannot run the C++ compiler `{cxx}`: {e}"))?;
    if !status.success() {
        return Err(format!("building {SRC} failed").into());
    }
    println!("cargo::rustc-cfg=gloo");
    println!("cargo::rustc-env=PODC_GLOO_SHIM={}", out.display());
    Ok(())
}
