//! Random well-typed programs (see `common/generate.rs`) and the regressions they found go
//! through the whole compiler: each must check, build without a panic, and compile to
//! what the reference interpreter computes (see `common/oracle.rs`). The corpus is fixed
//! (seeds `0..PROGRAMS`; the fast tier's first tenth), so a failure reproduces;
//! `PODC_GEN_SEEDS=a..b` runs others, and the fuzz target `generated` explores further.

use crate::common;
use crate::tier;

use common::generate::{Choices, program};
use common::{client, oracle, quick_client};
use std::path::Path;

const PROGRAMS: u64 = 2000;

/// Programs whose compiled checks are compiled as one.
const GROUP: usize = 8;

/// Seeds whose programs meet XLA's own limits, kept out of the corpus (a user's program
/// could meet them too):
/// - 311: XLA's CPU compiler does not finish (u8 arithmetic in loops and vmaps: LLVM's
///   loop vectorizer recurses through `vputils::isUniformAcrossVFsAndUFs` for more than
///   15 minutes);
/// - 1380: `abs(c * c)` on i32 where `c * c` overflows: XLA's simplifier drops the `abs`
///   of a square, which is right only without overflow, so the device is negative where
///   the interpreter (and two's-complement arithmetic) is positive.
const XLA_LIMITS: &[u64] = &[311, 1380];

/// A panic's message.
fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
    let msg = panic.downcast_ref::<String>().cloned();
    format!("panicked: {}", msg.or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string())).unwrap_or_default())
}

/// The failures among the programs of `seeds` (seed, what failed, the source). Their
/// compiled checks are compiled together (`oracle::run_together`).
fn failures(seeds: &[u64]) -> Vec<(u64, String, String)> {
    let mut failed = vec![];
    let mut cases = vec![];
    let mut owners = vec![];
    for &seed in seeds {
        let p = std::panic::catch_unwind(|| program(&mut Choices::seeded(seed)))
            .unwrap_or_else(|_| panic!("the generator panicked on seed {seed}"));
        let agent = p.agent.as_ref().map(|(n, t, b)| (n.as_str(), *t, *b));
        match std::panic::catch_unwind(|| oracle::cases(&p.source, p.env.as_deref(), agent, seed)) {
            Ok(Ok(cs)) => {
                owners.extend(cs.iter().map(|_| (seed, p.source.clone())));
                cases.extend(cs);
            }
            Ok(Err(e)) => failed.push((seed, e, p.source)),
            Err(panic) => failed.push((seed, panic_message(panic), p.source)),
        }
    }
    match std::panic::catch_unwind(|| oracle::run_together(quick_client(), &cases)) {
        Ok(fs) => failed.extend(fs.into_iter().map(|(i, e)| (owners[i].0, e, owners[i].1.clone()))),
        Err(panic) => {
            let e = panic_message(panic);
            owners.dedup_by_key(|o| o.0);
            failed.extend(owners.into_iter().map(|(s, src)| (s, e.clone(), src)));
        }
    }
    failed
}

#[test]
fn generated_programs_compile_to_what_the_interpreter_computes() {
    let range = match std::env::var("PODC_GEN_SEEDS") {
        Ok(r) => {
            let (a, b) = r.split_once("..").expect("PODC_GEN_SEEDS is a range a..b");
            a.parse().expect("a number")..b.parse().expect("a number")
        }
        // The fast tier runs a tenth of the corpus.
        Err(_) if tier::fast() => 0..PROGRAMS / 10,
        Err(_) => 0..PROGRAMS,
    };
    // Two threads, one client: compiling dominates, and XLA compiles on the calling thread.
    // Each thread takes the next few seeds when it is done with some, so that both stay
    // busy to the end (programs differ a lot in cost).
    let seeds: Vec<u64> = range.clone().filter(|s| !XLA_LIMITS.contains(s)).collect();
    let groups: Vec<&[u64]> = seeds.chunks(GROUP).collect();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let mut failures: Vec<(u64, String, String)> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..2)
            .map(|_| {
                scope.spawn(|| {
                    std::iter::from_fn(|| groups.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)))
                        .flat_map(|g| failures(g))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers.into_iter().flat_map(|w| w.join().expect("a worker's panics are caught")).collect()
    });
    failures.sort_by_key(|f| f.0);
    let n = range.end - range.start;
    if let Some((seed, err, source)) = failures.first() {
        let summary: Vec<String> =
            failures.iter().map(|(s, e, _)| format!("  seed {s}: {}", e.lines().next().unwrap_or_default())).collect();
        panic!(
            "{} of {n} programs failed:\n{}\nthe first, seed {seed}: {err}\n----- program\n{source}",
            failures.len(),
            summary.join("\n")
        );
    }
    // The corpus reaches every construct, and envs and agents, not only functions.
    if n >= 1000 {
        let made: Vec<_> = range.map(|s| program(&mut Choices::seeded(s))).collect();
        let envs = made.iter().filter(|p| p.env.is_some()).count() as u64;
        let agents = made.iter().filter(|p| p.agent.is_some()).count() as u64;
        assert!(envs * 20 > n && agents * 40 > n, "{envs} envs and {agents} agents in {n} programs");
        let boxes = made.iter().filter(|p| p.source.contains("action: box(")).count() as u64;
        assert!(boxes * 40 > n, "only {boxes} of {n} programs have an env with `box` actions");
        for what in ["fn initial_carry", "fn auto_reset"] {
            let count = made.iter().filter(|p| p.source.contains(what)).count() as u64;
            assert!(count * 80 > n, "only {count} of {n} programs have `{what}`");
        }
        let batch_of_structs = |src: &str| {
            src.split('S').skip(1).any(|w| w.trim_start_matches(|c: char| c.is_ascii_digit()).starts_with('['))
        };
        for (what, has) in [
            ("vmap", &(|src: &str| src.contains("vmap(")) as &dyn Fn(&str) -> bool),
            ("grad", &|src: &str| src.contains("grad(")),
            ("for", &|src: &str| src.contains(" carry ")),
            ("size generics", &|src: &str| src.contains("<N>")),
            ("batches of structs", &batch_of_structs),
            ("u8", &|src: &str| src.contains("u8")),
        ] {
            let count = made.iter().filter(|p| has(&p.source)).count() as u64;
            assert!(count * 10 > n, "only {count} of {n} programs use {what}");
        }
    }
}

/// Programs that once failed, kept as they were found (`tests/regressions/*.pod`); each
/// names its env and agent, if any, in a first line `// env E, agent A T B`.
#[test]
fn regressions_compile_to_what_the_interpreter_computes() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/regressions");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).expect("tests/regressions exists") {
        let path = entry.expect("readable").path();
        if path.extension().is_none_or(|e| e != "pod") {
            continue;
        }
        let src = std::fs::read_to_string(&path).expect("readable");
        let header = src.lines().next().unwrap_or_default();
        let words: Vec<&str> = header.trim_start_matches("//").split([',', ' ']).filter(|w| !w.is_empty()).collect();
        let env = words.iter().position(|w| *w == "env").map(|i| words[i + 1]);
        let agent = words
            .iter()
            .position(|w| *w == "agent")
            .map(|i| (words[i + 1], words[i + 2].parse().expect("steps"), words[i + 3].parse().expect("envs")));
        oracle::check(client(), &src, env, agent, 7).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        n += 1;
    }
    assert!(n > 0, "no regressions in {}", dir.display());
}
