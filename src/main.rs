use clap::Parser;

fn main() -> std::process::ExitCode {
    podracer::cli::main(podracer::cli::Cli::parse())
}
