//! The test tiers. `cargo test --workspace` runs every test (what `.ci/run` does);
//! `PODC_TESTS=fast cargo test --workspace` is the fast tier, for a developer's loop: the
//! slow tests (Python env workers, release-build learning runs, the exhaustive conv
//! geometries) skip, saying so, and the generated corpus shrinks.
//! `docs/architecture.md` has the table.

#![allow(dead_code)] // each test binary uses what it needs

/// Whether this is the fast tier.
pub fn fast() -> bool {
    std::env::var("PODC_TESTS").is_ok_and(|v| v == "fast")
}

/// True (skip the test) in the fast tier, saying what is skipped.
pub fn slow(what: &str) -> bool {
    if fast() {
        eprintln!("skipped in the fast tier (PODC_TESTS=fast): {what}");
    }
    fast()
}
