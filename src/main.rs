use clap::Parser;

fn main() -> std::process::ExitCode {
    // XLA writes INFO lines (each client's options) to stderr; keep warnings and errors
    // only, unless the user chose a level.
    if std::env::var_os("TF_CPP_MIN_LOG_LEVEL").is_none() {
        // SAFETY: no other thread exists yet, so nothing reads the environment concurrently.
        unsafe { std::env::set_var("TF_CPP_MIN_LOG_LEVEL", "1") };
    }
    podracer::cli::main(podracer::cli::Cli::parse())
}
