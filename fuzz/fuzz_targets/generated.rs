//! `cargo fuzz run generated`: libFuzzer's bytes choose a random well-typed program (the
//! generator of `tests/compiler/generated.rs`), which must check, build without a panic, and
//! compile (through the PJRT CPU plugin) to what the reference interpreter computes.
#![no_main]

#[path = "../../tests/common/generate.rs"]
#[allow(dead_code)]
mod generate;
#[path = "../../tests/common/oracle.rs"]
#[allow(dead_code)]
mod oracle;

use libfuzzer_sys::fuzz_target;
use podracer::runtime::{Client, Runtime};
use std::sync::OnceLock;

fn client() -> &'static Client {
    static CLIENT: OnceLock<Client> = OnceLock::new();
    CLIENT.get_or_init(|| Runtime::open(None, Some(1)).unwrap_or_else(|e| panic!("the PJRT CPU plugin: {e}")))
}

fuzz_target!(|data: &[u8]| {
    let p = generate::program(&mut generate::Choices::from_bytes(data));
    let agent = p.agent.as_ref().map(|(n, t, b)| (n.as_str(), *t, *b));
    if let Err(e) = oracle::check(client(), &p.source, p.env.as_deref(), agent, 0) {
        panic!("{e}\n----- program\n{}", p.source);
    }
});
