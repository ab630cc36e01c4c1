use clap::Parser;

fn main() -> std::process::ExitCode {
    // XLA writes INFO lines (each client's options) to stderr, and on AVX-512 hosts an
    // ERROR for every executable loaded from the compilation cache (it compares LLVM's
    // tuning pseudo-features, `+prefer-no-gather`, with the CPU's). Its real failures
    // reach podc as statuses, which it prints; so XLA's own log stays quiet unless the
    // user chose a level (`TF_CPP_MIN_LOG_LEVEL=0` shows everything).
    if std::env::var_os("TF_CPP_MIN_LOG_LEVEL").is_none() {
        // SAFETY: no other thread exists yet, so nothing reads the environment concurrently.
        unsafe { std::env::set_var("TF_CPP_MIN_LOG_LEVEL", "3") };
    }
    podracer::cli::main(podracer::cli::Cli::parse())
}
