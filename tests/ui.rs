//! Every `tests/ui/**/*.pod` must fail to check; the snapshot shows the source and the
//! rendered diagnostics, exactly as a user sees them (without colour).

use podracer::diag::render_plain;
use podracer::driver;

#[test]
fn ui() {
    insta::glob!("ui/**/*.pod", |path| {
        let src = std::fs::read_to_string(path).expect("fixture is readable");
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let rel = path.strip_prefix(root.join("tests/ui")).unwrap_or(path);
        let dir = path.parent().and_then(|d| d.strip_prefix(root).ok());
        let (prog, diags) = driver::check_source(&rel.display().to_string(), &src, dir);
        assert!(!diags.is_empty(), "{} checked without errors", rel.display());
        let out = render_plain(&prog.map, &diags);
        insta::assert_snapshot!(format!("----- SOURCE CODE\n{src}\n----- ERROR\n{out}"));
    });
}
