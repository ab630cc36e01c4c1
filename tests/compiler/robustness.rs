//! Bad input never panics: hundreds of mutated versions of the examples and test programs
//! (truncations, deleted, duplicated and swapped tokens, random bytes) go through the
//! whole front end. Each either checks cleanly and then builds and verifies (agents: their
//! training programs), or ends in diagnostics.

use podracer::driver;
use podracer::programs::anakin::{DeviceShape, anakin_programs};
use podracer::train::anakin::{RunShape, agent_and_env};
use std::path::{Path, PathBuf};

/// A tiny deterministic generator (xorshift), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}

/// Splits source into rough tokens: identifier/number runs, whitespace runs, single symbols.
fn tokens(src: &str) -> Vec<String> {
    let mut out: Vec<String> = vec![];
    let class = |c: char| {
        if c.is_alphanumeric() || c == '_' || c == '.' {
            0
        } else if c.is_whitespace() {
            1
        } else {
            2
        }
    };
    for c in src.chars() {
        match out.last_mut() {
            Some(t) if class(c) != 2 && t.chars().last().map(class) == Some(class(c)) => t.push(c),
            _ => out.push(c.to_string()),
        }
    }
    out
}

fn mutate(src: &str, rng: &mut Rng) -> String {
    let mut t = tokens(src);
    match rng.below(6) {
        0 => {
            let cut = rng.below(src.len());
            return src.char_indices().map(|(i, c)| if i < cut { c } else { '\0' }).filter(|c| *c != '\0').collect();
        }
        1 => {
            t.remove(rng.below(t.len()));
        }
        2 => {
            let (a, b) = (rng.below(t.len()), rng.below(t.len()));
            t.swap(a, b);
        }
        3 => {
            let i = rng.below(t.len());
            let x = t[i].clone();
            t.insert(rng.below(t.len()), x);
        }
        4 => {
            let mut bytes = src.as_bytes().to_vec();
            for _ in 0..1 + rng.below(4) {
                let i = rng.below(bytes.len());
                bytes[i] = rng.below(256) as u8;
            }
            return String::from_utf8_lossy(&bytes).into_owned();
        }
        _ => {
            let pool = [
                "{",
                "}",
                "(",
                ")",
                "[",
                "]",
                ";",
                ",",
                "@",
                "**",
                "..",
                "::",
                "as",
                "let",
                "if",
                "for",
                "carry",
                "0",
                "1.5",
                "f32",
                "N",
                "-",
                "*",
                "agent",
                "Trajectory",
                "P",
            ];
            let i = rng.below(t.len());
            t[i] = pool[rng.below(pool.len())].to_string();
        }
    }
    t.concat()
}

fn sources() -> Vec<(PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = vec![];
    for dir in ["examples", "examples/basics", "tests/pass", "tests/agents"] {
        for e in std::fs::read_dir(root.join(dir)).expect("directory exists").flatten() {
            let p = e.path();
            if p.extension().is_some_and(|x| x == "pod") {
                out.push((p.clone(), std::fs::read_to_string(&p).expect("readable")));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn mutated_programs_never_panic() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut with_errors = 0;
    let mut total = 0;
    for (path, src) in sources() {
        let dir = path.parent().map(Path::to_path_buf);
        for _ in 0..60 {
            let m = mutate(&src, &mut rng);
            let (prog, diags) = driver::check_source("mutant.pod", &m, dir.as_deref());
            total += 1;
            if diags.is_empty() {
                // A mutant that still checks must also build (the builder panics on any
                // internal inconsistency) and verify.
                if prog.root_fn("main").is_some() {
                    let _ = driver::build(&prog, &[], "main");
                }
                // And an agent must build its Anakin programs, or say why not.
                for agent in podracer::elab::agent::agent_names(&prog) {
                    let shape =
                        RunShape { envs: 4, rollout: 4, updates_per_call: 1, devices: 1, processes: 1, seeds: 1 };
                    if let Ok((a, e)) = agent_and_env(&prog, &[], &agent, shape) {
                        anakin_programs(&prog, &a, &e, DeviceShape { envs: 4, steps: 4, updates: 1 });
                    }
                }
            } else {
                with_errors += 1;
                let text = podracer::diag::render_plain(&prog.map, &diags);
                assert!(text.contains("error"), "diagnostics render: {text}");
            }
        }
    }
    assert!(total >= 500, "only {total} mutants");
    assert!(with_errors * 2 > total, "most mutants should be invalid ({with_errors} of {total})");
}
