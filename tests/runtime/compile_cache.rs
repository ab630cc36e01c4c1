//! The persistent compilation cache: a hit gives the executable a compile gives, damaged
//! or foreign entries are compiled again without an error, the size cap evicts, and
//! `podc` reports hits and misses. Every test uses a cache in a temporary directory.

use podracer::array::Array;
use podracer::runtime::{CacheStatus, Client, CompileCache, Executable, Runtime};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The process's client, without a cache (each test adds its own).
fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| Runtime::open(None, Some(2)).unwrap_or_else(|e| panic!("the cache tests need PJRT: {e}")))
}

fn cached(dir: &Path, max_bytes: u64) -> Client {
    client().clone().with_compile_cache(Some(CompileCache::new(dir, max_bytes)))
}

/// `main` of a `.pod` file, as StableHLO for one replica.
fn stablehlo(file: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(file);
    let (prog, diags) = podracer::driver::check_file(&path).expect("readable");
    assert!(diags.is_empty(), "{}", podracer::diag::render_plain(&prog.map, &diags));
    let e = podracer::driver::build(&prog, &[], "main").unwrap_or_else(|d| panic!("{}", d.message));
    podracer::lower::stablehlo::lower_module(&e.func, 1)
}

fn run(exe: &Executable) -> Vec<Array> {
    exe.execute(&[]).expect("runs").iter().map(|b| b.download().expect("downloads")).collect()
}

/// The cache's entries.
fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.map(|e| e.expect("entry").path()).filter(|p| p.extension().is_some_and(|x| x == "xla")).collect())
        .unwrap_or_default();
    out.sort();
    out
}

#[test]
fn a_hit_after_a_miss_gives_the_same_results() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = cached(dir.path(), 1 << 30);
    let text = stablehlo("examples/basics/select.pod");
    let first = c.compile(&text, 1).expect("compiles");
    assert_eq!(first.cache_status(), CacheStatus::Miss);
    assert_eq!(entries(dir.path()).len(), 1);
    let second = c.compile(&text, 1).expect("loads");
    assert_eq!(second.cache_status(), CacheStatus::Hit);
    assert_eq!(run(&first), run(&second));
    assert_eq!(client().compile(&text, 1).expect("compiles").cache_status(), CacheStatus::Off);

    // The devices are part of the key, and a hit runs where it was compiled for.
    let on_1 = c.compile_on(&text, &[1]).expect("compiles");
    assert_eq!((on_1.cache_status(), on_1.devices()), (CacheStatus::Miss, &[1][..]));
    let again = c.compile_on(&text, &[1]).expect("loads");
    assert_eq!((again.cache_status(), again.devices()), (CacheStatus::Hit, &[1][..]));
    assert_eq!(run(&again), run(&first));
}

#[test]
fn damaged_and_foreign_entries_are_compiled_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let c = cached(dir.path(), 1 << 30);
    let text = stablehlo("examples/basics/select.pod");
    let want = run(&c.compile(&text, 1).expect("compiles"));
    let [entry] = &entries(dir.path())[..] else { panic!("one entry") };
    let good = std::fs::read(entry).expect("readable");
    let key: [u8; 32] = (0..32)
        .map(|i| u8::from_str_radix(&entry.file_stem().unwrap().to_str().unwrap()[2 * i..2 * i + 2], 16).unwrap())
        .collect::<Vec<_>>()
        .try_into()
        .unwrap();

    for what in ["garbage", "truncated", "empty", "foreign"] {
        match what {
            "garbage" => std::fs::write(entry, b"garbage, not an executable").unwrap(),
            "truncated" => std::fs::write(entry, &good[..good.len() / 2]).unwrap(),
            "empty" => std::fs::write(entry, b"").unwrap(),
            // A sound entry whose bytes the plugin cannot load.
            _ => CompileCache::new(dir.path(), 1 << 30).put(&key, &[7; 4096]).unwrap(),
        }
        let exe = c.compile(&text, 1).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_eq!(exe.cache_status(), CacheStatus::Miss, "{what}");
        assert_eq!(run(&exe), want, "{what}");
        // Replaced by a sound entry.
        assert_eq!(c.compile(&text, 1).expect("loads").cache_status(), CacheStatus::Hit, "{what}");
    }
}

#[test]
fn the_size_cap_evicts_the_least_recently_used() {
    let (a, b) = (stablehlo("examples/basics/select.pod"), stablehlo("examples/basics/loop.pod"));
    let sizes = tempfile::tempdir().expect("tempdir");
    let unlimited = cached(sizes.path(), 1 << 30);
    unlimited.compile(&a, 1).expect("compiles");
    unlimited.compile(&b, 1).expect("compiles");
    let size = |p: &PathBuf| std::fs::metadata(p).expect("an entry").len();
    let both: Vec<u64> = entries(sizes.path()).iter().map(size).collect();
    // Room for either entry, not for both.
    let cap = both[0].max(both[1]) + both[0].min(both[1]) / 2;

    let dir = tempfile::tempdir().expect("tempdir");
    let c = cached(dir.path(), cap);
    let fits = || {
        let left = entries(dir.path());
        (left.len(), left.iter().map(size).sum::<u64>() <= cap)
    };
    assert_eq!(c.compile(&a, 1).expect("compiles").cache_status(), CacheStatus::Miss);
    // Storing `b` evicts `a`, the least recently used.
    assert_eq!(c.compile(&b, 1).expect("compiles").cache_status(), CacheStatus::Miss);
    assert_eq!(fits(), (1, true));
    assert_eq!(c.compile(&b, 1).expect("loads").cache_status(), CacheStatus::Hit);
    assert_eq!(c.compile(&a, 1).expect("compiles").cache_status(), CacheStatus::Miss);
    assert_eq!(fits(), (1, true));
    assert_eq!(c.compile(&a, 1).expect("loads").cache_status(), CacheStatus::Hit);
}

fn podc(args: &[&str], cache: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_podc"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("PODC_XLA_CACHE", cache)
        .env_remove("PODC_NO_CACHE")
        .env_remove("PODC_CACHE_MAX_MB")
        .output()
        .expect("podc starts")
}

fn json(o: &Output) -> serde_json::Value {
    assert!(o.status.success(), "podc failed: {}", String::from_utf8_lossy(&o.stderr));
    serde_json::from_slice(&o.stdout).expect("one JSON object")
}

/// `metrics.jsonl` without the keys that measure time.
fn metrics(dir: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join("metrics.jsonl")).expect("metrics");
    text.lines()
        .map(|l| {
            let mut v: serde_json::Value = serde_json::from_str(l).expect("JSON");
            let o = v.as_object_mut().expect("an object");
            o.remove("steps_per_sec");
            o.remove("wall_s");
            v
        })
        .collect()
}

#[test]
fn podc_reports_hits_and_a_warm_run_learns_the_same() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let cache = tmp.path().join("xla");
    let bench = ["bench", "train", "examples/catch_a2c.pod", "--envs", "8", "--runs", "1", "--json"];
    let cold = json(&podc(&bench, &cache));
    let warm = json(&podc(&bench, &cache));
    assert_eq!((cold["cache"].as_str(), warm["cache"].as_str()), (Some("miss"), Some("hit")));
    let off = json(&podc(&[&bench[..], &["--no-cache"]].concat(), &cache));
    assert_eq!(off["cache"], "off");

    let train = |out: &Path| {
        let o = podc(
            &[
                "train",
                "examples/catch_a2c.pod",
                "--envs",
                "8",
                "--total-steps",
                "2560",
                "-q",
                "--out",
                out.to_str().unwrap(),
            ],
            &cache,
        );
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    };
    let (first, second) = (tmp.path().join("first"), tmp.path().join("second"));
    train(&first);
    train(&second);
    assert_eq!(metrics(&first), metrics(&second));

    // Runs that start at once share the cache without tearing it.
    let env = ["bench", "env", "examples/envs/catch.pod", "--envs", "8", "--steps", "4", "--runs", "1", "--json"];
    let racers: Vec<_> = (0..3)
        .map(|_| {
            Command::new(env!("CARGO_BIN_EXE_podc"))
                .args(env)
                .current_dir(env!("CARGO_MANIFEST_DIR"))
                .env("PODC_XLA_CACHE", &cache)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("podc starts")
        })
        .collect();
    for r in racers {
        json(&r.wait_with_output().expect("podc ends"));
    }
    assert_eq!(json(&podc(&env, &cache))["cache"], "hit");
}
