//! Snapshots of what the compiler emits for the test programs: the IR and the StableHLO.

use podracer::driver;

#[test]
fn ir_and_stablehlo() {
    insta::glob!("../pass", "*.pod", |path| {
        let (prog, diags) = driver::check_file(path).expect("readable");
        assert!(diags.is_empty(), "{}", podracer::diag::render_plain(&prog.map, &diags));
        let e = driver::build(&prog, &[], "main").expect("builds");
        insta::assert_snapshot!("ir", podracer::ir::print::print_func(&e.func));
        insta::assert_snapshot!("stablehlo", podracer::lower::stablehlo::lower_module(&e.func, 1));
    });
}
