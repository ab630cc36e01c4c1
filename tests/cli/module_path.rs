//! Where `use a::b` finds `a/b.pod`: next to the root file, then in each `--lib DIR`, then
//! in each directory of `PODC_PATH`; the first that has it wins.

use std::process::{Command, Output};

const APP: &str = "tests/modules/app/main.pod";

fn podc(args: &[&str], podc_path: Option<&str>) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_podc"));
    cmd.args(args).current_dir(env!("CARGO_MANIFEST_DIR")).env_remove("PODC_PATH");
    if let Some(p) = podc_path {
        cmd.env("PODC_PATH", p);
    }
    cmd.output().expect("podc starts")
}

/// `main`'s result through the interpreter.
fn eval(args: &[&str], podc_path: Option<&str>) -> String {
    let o = podc(&[&["eval", APP], args].concat(), podc_path);
    assert!(o.status.success(), "{args:?}: {}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

#[test]
fn modules_are_found_in_lib_directories_in_order() {
    assert_eq!(eval(&["--lib", "tests/modules/lib"], None), "9.0");
    assert_eq!(eval(&[], Some("tests/modules/lib")), "9.0");
    assert_eq!(eval(&[], Some("/nonexistent:tests/modules/lib")), "9.0");
    // `--lib` before `PODC_PATH`, and the first `--lib` first.
    assert_eq!(eval(&["--lib", "tests/modules/cubes"], Some("tests/modules/lib")), "27.0");
    assert_eq!(eval(&["--lib", "tests/modules/lib", "--lib", "tests/modules/cubes"], None), "9.0");
    let check = podc(&["check", APP, "--lib", "tests/modules/lib"], None);
    assert!(check.status.success(), "{}", String::from_utf8_lossy(&check.stderr));
}

#[test]
fn a_missing_module_lists_where_it_was_looked_for() {
    let o = podc(&["check", APP, "--lib", "tests/modules/nowhere"], Some("tests/modules/cubes/geometry"));
    assert_eq!(o.status.code(), Some(1));
    insta::assert_snapshot!(String::from_utf8_lossy(&o.stderr));
}
