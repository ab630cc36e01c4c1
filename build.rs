//! Generates the parser from `grammar/pod.lalrpop` into `$OUT_DIR/pod.rs`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    lalrpop::Configuration::new()
        .set_in_dir("grammar")
        // Only the grammar can change the generated parser, so do not rerun on every edit.
        .emit_rerun_directives(true)
        .process()
}
