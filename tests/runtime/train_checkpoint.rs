//! Checkpoints from outside: one written by the reference `safetensors` package
//! (`tests/fixtures/checkpoint/gen_checkpoint.py`) loads, and podracer's own digest of its
//! arrays agrees with the script's.
//!
//! Checkpoints survive SIGKILL at any moment of a save. This test binary re-executes itself
//! as a writer that saves checkpoints of a few MB with increasing steps as fast as it can;
//! the test kills it at random moments and each time loads what is on disk, which must be
//! one whole checkpoint: arrays that all belong to the step its JSON names.

use podracer::array::{Array, Data};
use podracer::train::checkpoint;
use serde_json::{Value, json};
use std::fs;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

const TEST: &str = "sigkill_during_saves_never_tears_a_checkpoint";
/// Set in the child: the checkpoint directory, and the first step to write.
const WRITER_DIR: &str = "PODRACER_TEST_CHECKPOINT_WRITER_DIR";
const WRITER_START: &str = "PODRACER_TEST_CHECKPOINT_WRITER_START";
/// What the child prints once its first save is on disk (libtest's own output precedes it).
const SAVED: &str = "first checkpoint saved";

#[test]
fn loads_a_checkpoint_written_by_python_safetensors() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/checkpoint");
    let (tensors, meta) = checkpoint::load(&dir).unwrap();
    let expected = vec![
        ("env.state.ball_x".to_string(), Array::f32(vec![], vec![3.5])),
        ("env.state.done".to_string(), Array::new(vec![2, 1, 2], Data::Bool(vec![true, false, false, true]))),
        ("env.state.empty".to_string(), Array::f32(vec![0, 4], vec![])),
        ("env.state.frame".to_string(), Array::new(vec![2, 3], Data::U8(vec![0, 7, 128, 200, 254, 255]))),
        (
            "learner.params.actor.hidden0.w".to_string(),
            Array::f32(vec![3, 3], vec![0.5, -1.0, 2.25, f32::MAX, -0.0, 1e-45, f32::INFINITY, f32::NEG_INFINITY, 3.0]),
        ),
        ("learner.step".to_string(), Array::i32(vec![], vec![-7])),
        ("rng".to_string(), Array::new(vec![2], Data::U32(vec![0xdead_beef, u32::MAX]))),
    ];
    assert_eq!(tensors, expected);
    assert_eq!(meta, json!({"config": {"envs": 8, "lr": 0.0003}, "env_steps": 1024}));
    let digest = |d: &Path| {
        fs::read(d.join(checkpoint::META_FILE))
            .map(|b| serde_json::from_slice::<Value>(&b).unwrap()["digest"].clone())
            .unwrap()
    };
    let ours = tempfile::tempdir().unwrap();
    checkpoint::save(ours.path(), &expected, &meta).unwrap();
    assert_eq!(digest(ours.path()), digest(&dir));
}

/// The training state at `step`: every element says which step it belongs to.
fn state(step: u64) -> Vec<(String, Array)> {
    let s = step as u32;
    let mut v = vec![
        ("learner.params.w".to_string(), Array::f32(vec![1024, 1024], vec![step as f32; 1 << 20])),
        ("learner.step".to_string(), Array::i32(vec![], vec![s as i32])),
        ("rng".to_string(), Array::new(vec![2], Data::U32(vec![s, !s]))),
        ("env.state.done".to_string(), Array::new(vec![4096], Data::Bool(vec![s.is_multiple_of(2); 4096]))),
    ];
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

/// The child: saves forever (bounded to a minute in case the parent is gone), saying on
/// stdout when the first save is on disk.
fn write_forever(dir: &Path, start: u64) -> ! {
    let began = Instant::now();
    for step in start.. {
        checkpoint::save(dir, &state(step), &json!({"step": step})).unwrap();
        if step == start {
            println!("{SAVED}");
        }
        if began.elapsed() > Duration::from_secs(60) {
            break;
        }
    }
    std::process::exit(0)
}

/// Whether a save is writing to `dir`: a temporary file exists, or the arrays' file is not
/// its full length (every state has the same size).
fn writing(dir: &Path, full_len: u64) -> bool {
    let tmp = |f: &str| dir.join(format!("{f}.tmp")).exists();
    let len = fs::metadata(dir.join(checkpoint::TENSORS_FILE)).map_or(0, |m| m.len());
    tmp(checkpoint::TENSORS_FILE) || tmp(checkpoint::META_FILE) || len != full_len
}

/// Kills the writer even when the test fails midway.
struct Writer(Child);

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn sigkill_during_saves_never_tears_a_checkpoint() {
    if let (Ok(dir), Ok(start)) = (std::env::var(WRITER_DIR), std::env::var(WRITER_START)) {
        write_forever(Path::new(&dir), start.parse().unwrap());
    }
    let dir = tempfile::tempdir().unwrap();
    let seed = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1;
    let mut rng = seed;
    let mut next_start = 0;
    let full_len = {
        let d = tempfile::tempdir().unwrap();
        checkpoint::save(d.path(), &state(0), &json!({"step": 0})).unwrap();
        fs::metadata(d.path().join(checkpoint::TENSORS_FILE)).unwrap().len()
    };
    for round in 0..20 {
        // libtest names this test by its path below the test binary's crate.
        let test = format!("{}::{TEST}", module_path!().split_once("::").expect("a module").1);
        let child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", &test, "--nocapture", "--test-threads=1"])
            .env(WRITER_DIR, dir.path())
            .env(WRITER_START, next_start.to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut writer = Writer(child);
        // Wait for the first save so that the kill lands among saves, not in start-up.
        let out = BufReader::new(writer.0.stdout.take().unwrap());
        assert!(out.lines().map_while(Result::ok).any(|l| l.contains(SAVED)), "the writer stopped");
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        std::thread::sleep(Duration::from_micros(rng % 150_000));
        // Writing the files is a small part of each save, so a kill at a random moment
        // seldom lands in it. Every other round waits until a write is visibly under way.
        if round % 2 == 1 {
            let polling = Instant::now();
            while !writing(dir.path(), full_len) && polling.elapsed() < Duration::from_secs(5) {}
        }
        drop(writer);

        let at = format!("round {round}, seed {seed}");
        let (tensors, meta) = checkpoint::load(dir.path()).unwrap_or_else(|e| panic!("{at}: {e}"));
        let step = meta["step"].as_u64().unwrap_or_else(|| panic!("{at}: meta {meta}"));
        assert!(step >= next_start, "{at}: went back to step {step}");
        assert!(tensors == state(step), "{at}: the arrays are not those of step {step}");
        next_start = step + 1;
    }
}
