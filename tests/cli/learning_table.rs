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

/// The lines of `--stale`'s output that name a stale row.
fn stale_lines(o: &Output) -> Vec<String> {
    String::from_utf8_lossy(&o.stdout).lines().filter(|l| l.starts_with("stale: ")).map(str::to_string).collect()
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
    let rows = ["--stale", "--only", "ppo_cartpole_pod,cartpole_a2c"];
    let before = learning_table(copy.path(), &rows);

    let ppo = copy.path().join("examples/ppo.pod");
    let src = fs::read_to_string(&ppo).expect("read ppo.pod");
    let changed = src.replace("const CLIP_EPS: f32 = 0.2;", "const CLIP_EPS: f32 = 0.25;");
    assert_ne!(src, changed, "ppo.pod has no `CLIP_EPS` of 0.2 to change");
    fs::write(&ppo, changed).expect("write ppo.pod");
    let after = learning_table(copy.path(), &rows);

    assert_eq!(after.status.code(), Some(1), "{}", text(&after));
    let (was, is) = (stale_lines(&before), stale_lines(&after));
    let ppo_row = is.iter().find(|l| l.starts_with("stale: ppo_cartpole_pod: ")).unwrap_or_else(|| panic!("{is:?}"));
    assert!(ppo_row.contains("program `learn`") && ppo_row.ends_with(" changed"), "{ppo_row}");
    let others = |lines: &[String]| lines.iter().filter(|l| !l.contains("ppo_cartpole_pod")).cloned().collect::<Vec<_>>();
    assert_eq!(others(&is), others(&was), "only the changed file's row moves");
}
