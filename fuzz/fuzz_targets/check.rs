//! `cargo fuzz run check`: any bytes through the front end (parse, resolve, check, and
//! for clean programs, build and verify) must end in diagnostics or success, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let src = String::from_utf8_lossy(data);
    let (prog, diags) = podracer::driver::check_source("fuzz.pod", &src, None);
    if diags.is_empty() && prog.root_fn("main").is_some() {
        let _ = podracer::driver::build(&prog, "main");
    }
    let _ = podracer::diag::render_plain(&prog.map, &diags);
});
