//! MemoryChain (`examples/envs/memory_chain.pod`) against gymnax's `MemoryChain-bsuite`,
//! using `tests/fixtures/envs/memory_chain.json`, for the registered env (one context bit)
//! and for three bits (the same source with `NUM_BITS = 3`). Everything is compared
//! exactly, through the reference interpreter and through PJRT: resets from 11 keys, and
//! gymnax's auto-resetting `env.step` rollouts closed loop from their reset keys (every
//! returned state, observation, reward, flag and final observation).

use crate::common;

use common::env::{Env, f32_data, f32s, fixture, i32_scalar, key, list, scalar_json};
use podracer::array::Array;
use serde_json::Value;

fn check_state(env: &Env, leaves: &[Array], want: &Value, at: &str) {
    let want = env.state(want);
    for (((name, _), got), want) in env.fields.iter().zip(leaves).zip(&want) {
        assert_eq!(got, want, "{at}: field `{name}`");
    }
}

/// Exact through PJRT. XLA turns gymnax's `1 - t / 5` into a fused multiply-add with the
/// reciprocal (giving -1.5e-8 for t = 5), which the interpreter, rounding each operation,
/// does not: it may differ by an ulp of 1.
fn check_obs(got: &Array, want: &Value, how: &str, at: &str) {
    let (got, want) = (f32_data(got), f32s(want));
    if how == "pjrt" {
        assert_eq!(got, want, "{at}: observation");
    } else {
        let close = got.len() == want.len() && got.iter().zip(&want).all(|(g, w)| (g - w).abs() <= f32::EPSILON);
        assert!(close, "{at}: observation {got:?}, want {want:?}");
    }
}

/// The env with `NUM_BITS` set to `bits`: the example itself for 1.
fn load(bits: usize) -> Env {
    let file = "examples/envs/memory_chain.pod";
    if bits == 1 {
        return Env::load(file, "MemoryChain");
    }
    let src = std::fs::read_to_string(file).expect("readable");
    let src = src.replace("const NUM_BITS: i32 = 1;", &format!("const NUM_BITS: i32 = {bits};"));
    let path = std::env::temp_dir().join(format!("podc-memory-chain-{bits}-{}.pod", std::process::id()));
    std::fs::write(&path, src).expect("writable");
    let env = Env::load(path.to_str().expect("utf-8"), "MemoryChain");
    std::fs::remove_file(&path).ok();
    env
}

fn variant(bits: usize) {
    let fx = fixture("memory_chain");
    let v = list(&fx["variants"]).iter().find(|v| v["num_bits"] == bits).expect("variant");
    let env = load(bits);
    let n = env.n_state();
    for r in list(&v["resets"]) {
        for (how, out) in env.reset.both(&[key(&r["key"])]) {
            let at = format!("{bits} bits, reset with key {} ({how})", r["key"]);
            check_state(&env, &out[..n], &r["state"], &at);
            check_obs(&out[n + 1], &r["obs"], how, &at);
        }
    }
    let (mut episodes, mut rewards) = (0, vec![]);
    for ro in list(&v["autoreset_rollouts"]) {
        let name = ro["name"].as_str().expect("name");
        let out = env.reset.host(&[key(&ro["reset_key"])]);
        check_state(&env, &out[..n], &ro["init_state"], &format!("{name}: reset"));
        let mut carry = out[..=n].to_vec();
        for (i, st) in list(&ro["steps"]).iter().enumerate() {
            let at = format!("{name}, step {i}");
            let action = i32_scalar(st["action"].as_i64().expect("action") as i32);
            let args = [carry.clone(), vec![action, key(&st["key"])]].concat();
            let done = st["terminated"] == true || st["truncated"] == true;
            let mut next = vec![];
            for (how, out) in env.step.both(&args) {
                let at = format!("{at} ({how})");
                check_state(&env, &out[..n], &st["state"], &at);
                assert_eq!(scalar_json(&out[n]), st["state"]["time"], "{at}: t");
                check_obs(&out[n + 1], &st["obs"], how, &at);
                assert_eq!(scalar_json(&out[n + 2]), st["reward"], "{at}: reward");
                assert_eq!(scalar_json(&out[n + 3]), st["terminated"], "{at}: terminated");
                assert_eq!(scalar_json(&out[n + 4]), st["truncated"], "{at}: truncated");
                let final_obs = if done { &st["final_obs"] } else { &st["obs"] };
                check_obs(&out[n + 5], final_obs, how, &format!("{at}: final observation"));
                next = out[..=n].to_vec();
            }
            carry = next;
            episodes += usize::from(done);
            rewards.push(st["reward"].as_f64().expect("reward"));
        }
    }
    // Several episodes, with both a right and a wrong answer among them.
    assert!(episodes >= 20, "{bits} bits: {episodes} episodes");
    assert!(rewards.contains(&1.0) && rewards.contains(&-1.0));
}

#[test]
fn one_bit_matches_gymnax() {
    variant(1);
}

#[test]
fn three_bits_match_gymnax() {
    variant(3);
}
