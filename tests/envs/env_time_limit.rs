//! `time_limit` takes a literal or an integer const, which `--set` can replace.

use podracer::elab::env::build_env;
use podracer::overrides::Override;

const SOURCE: &str = "
const LIMIT: i32 = 7;
struct S { n: i32 }
env Count {
    observation: f32[1]
    action: discrete(2)
    time_limit: LIMIT
    fn reset(key: Key) -> S { S { n: 0 } }
    fn step(s: S, a: i32, key: Key) -> Step<S> {
        Step { state: S { n: s.n + a }, reward: 1.0, terminated: false, truncated: false }
    }
    fn observe(s: S) -> f32[1] { [s.n as f32] }
}
";

fn time_limit(overrides: &[&str]) -> Option<u64> {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("count.pod");
    std::fs::write(&path, SOURCE).expect("written");
    let (prog, diags) = podracer::driver::check_file(&path).expect("readable");
    assert!(diags.is_empty(), "{}", podracer::diag::render_plain(&prog.map, &diags));
    let overrides: Vec<Override> = overrides.iter().map(|o| Override::parse(o).expect("an override")).collect();
    let env = build_env(&prog, &overrides, "Count")
        .unwrap_or_else(|d| panic!("{}", podracer::diag::render_plain(&prog.map, &[*d])));
    env.info.time_limit
}

#[test]
fn a_const_time_limit_is_its_value_or_the_set_one() {
    assert_eq!(time_limit(&[]), Some(7));
    assert_eq!(time_limit(&["LIMIT=9"]), Some(9));
}
