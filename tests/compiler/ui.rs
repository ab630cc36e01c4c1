//! Every `tests/ui/**/*.pod` must fail to compile; the snapshot shows the source and the
//! rendered diagnostics, exactly as a user sees them (without colour). Most fail to
//! check; a fixture that checks cleanly must fail when its `main` is built (errors found
//! on the IR, such as differentiating through `argmax`).

use podracer::diag::render_plain;
use podracer::driver;

#[test]
fn ui() {
    insta::glob!("../ui", "**/*.pod", |path| {
        let src = std::fs::read_to_string(path).expect("fixture is readable");
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let rel = path.strip_prefix(root.join("tests/ui")).unwrap_or(path);
        let dir = path.parent().and_then(|d| d.strip_prefix(root).ok());
        let (prog, mut diags) = driver::check_source(&rel.display().to_string(), &src, dir);
        if diags.is_empty() {
            match driver::build(&prog, &[], "main") {
                Ok(_) => panic!("{} compiles without errors", rel.display()),
                Err(d) => diags.push(*d),
            }
        }
        let out = render_plain(&prog.map, &diags);
        insta::assert_snapshot!(format!("----- SOURCE CODE\n{src}\n----- ERROR\n{out}"));
    });
}
