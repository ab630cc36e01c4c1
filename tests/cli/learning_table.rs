//! The learning table of docs/training.md knows when it is stale
//! (`bench/learning_table.py --stale`): every documented run has the fingerprint of what the
//! current build compiles for its command, and a change to an example's numerics makes its
//! row, and only its row, stale.

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

/// `bench/learning_table.py ARGS` in the tree `root`, with this build's `podc`.
fn learning_table(root: &Path, args: &[&str]) -> Output {
    Command::new("python3")
        .arg(root.join("bench/learning_table.py"))
        .args(args)
        .args(["--podc", env!("CARGO_BIN_EXE_podc")])
        .current_dir(root)
        .output()
        .expect("python3 starts")
}

fn text(o: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&o.stdout), String::from_utf8_lossy(&o.stderr))
}

#[test]
fn every_documented_run_is_current() {
    let o = learning_table(Path::new(env!("CARGO_MANIFEST_DIR")), &["--stale"]);
    assert!(
        o.status.success(),
        "the learning table of docs/training.md is stale: re-run its rows (`python3 bench/learning_table.py --stale --run`) or say why they keep their figures (`--keep ROW --why ...`):\n{}",
        text(&o)
    );
}

fn copy_dir(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("mkdir");
    for entry in fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("an entry");
        let target = to.join(entry.file_name());
        match entry.file_type().expect("a file type").is_dir() {
            true => copy_dir(&entry.path(), &target),
            false => drop(fs::copy(entry.path(), target).expect("copy")),
        }
    }
}

/// `podc COMMAND --fingerprint` in `root`.
fn fingerprint(root: &Path, command: &str) -> serde_json::Value {
    let o = Command::new(env!("CARGO_BIN_EXE_podc"))
        .args(command.split_whitespace())
        .arg("--fingerprint")
        .current_dir(root)
        .output()
        .expect("podc starts");
    assert!(o.status.success(), "{}", text(&o));
    serde_json::from_slice(&o.stdout).expect("one JSON object")
}

#[test]
fn a_changed_constant_makes_its_row_stale() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let copy = tempfile::tempdir().expect("tempdir");
    for file in ["bench/learning_table.py", "bench/last5.py", "docs/learning-runs.json", "docs/training.md"] {
        fs::create_dir_all(copy.path().join(file).parent().expect("a parent")).expect("mkdir");
        fs::copy(root.join(file), copy.path().join(file)).expect("copy");
    }
    copy_dir(&root.join("examples"), &copy.path().join("examples"));
    // In the copy, two rows whose runs have this build's fingerprints, whatever the table's
    // state: a row of `ppo.pod`, and one of another file.
    let names = ["ppo_cartpole_pod", "cartpole_a2c"];
    let results = copy.path().join("docs/learning-runs.json");
    let mut table: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(&results).expect("read")).expect("JSON");
    for name in names {
        let row = &mut table[name];
        let fp = fingerprint(copy.path(), row["command"].as_str().expect("a command"));
        for run in row["runs"].as_array_mut().expect("runs") {
            run["fingerprint"] = fp["sha256"].clone();
        }
        row["fingerprint"] = fp;
    }
    fs::write(&results, table.to_string()).expect("write");
    let rows = ["--stale", "--only", &names.join(",")];
    let before = learning_table(copy.path(), &rows);
    assert!(before.status.success(), "{}", text(&before));

    let ppo = copy.path().join("examples/ppo.pod");
    let src = fs::read_to_string(&ppo).expect("read ppo.pod");
    let changed = src.replace("const CLIP_EPS: f32 = 0.2;", "const CLIP_EPS: f32 = 0.25;");
    assert_ne!(src, changed, "ppo.pod has no `CLIP_EPS` of 0.2 to change");
    fs::write(&ppo, changed).expect("write ppo.pod");
    let after = learning_table(copy.path(), &rows);
    assert_eq!(after.status.code(), Some(1), "{}", text(&after));
    let stale: Vec<String> = String::from_utf8_lossy(&after.stdout)
        .lines()
        .filter(|l| l.starts_with("stale: "))
        .map(str::to_string)
        .collect();
    let [line] = &stale[..] else { panic!("one stale row: {stale:?}") };
    assert!(line.starts_with("stale: ppo_cartpole_pod: seeds 0, 1, 2, 3, 4 ("), "{line}");
    assert!(line.ends_with("program `learn` changed"), "{line}");
}
