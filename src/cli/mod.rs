//! `podc`, the command line. Each subcommand is a thin layer over `driver` and `runtime`.

use crate::array::Array;
use crate::diag::{SourceMap, emit_stderr};
use crate::driver::{self, Entry, LoadOptions};
use crate::overrides::Override;
use crate::resolve::Program;
use crate::runtime::{Backend, Client, ClientOptions, CompileCache, Runtime};
use clap::{Parser, Subcommand, ValueEnum};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::OnceLock;

mod bench;
mod env;
mod eval;
mod launch;
mod run_env;
mod train;

#[derive(Parser)]
#[command(name = "podc", version, about = "The podracer compiler: typed array programs for RL, run through PJRT")]
pub struct Cli {
    /// The PJRT plugin to use (else `PODC_PJRT_PLUGIN`, else the cached CPU plugin,
    /// fetched with pip on first use).
    #[arg(long, global = true, value_name = "PATH")]
    plugin: Option<PathBuf>,
    /// Where programs run: `cpu`, or `cuda` for NVIDIA GPUs (its plugin is found in the
    /// user's Python's `jax-cuda13-pjrt`, else fetched into the cache).
    #[arg(long, global = true, env = "PODC_BACKEND", default_value = "cpu", value_name = "cpu|cuda")]
    backend: Backend,
    /// The fraction of each GPU's memory that `--backend cuda` may use (default: the CUDA
    /// plugin's, 0.75).
    #[arg(long, global = true, value_name = "F")]
    gpu_memory_fraction: Option<f32>,
    /// Whether `--backend cuda` takes that memory when it starts (default: the plugin's, true).
    #[arg(long, global = true, value_name = "BOOL")]
    gpu_preallocate: Option<bool>,
    /// Compile every program afresh, neither reading nor writing the compilation cache
    /// (also `PODC_NO_CACHE=1`).
    #[arg(long, global = true)]
    no_cache: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Parse, resolve and type-check files; print diagnostics. Exit status 1 on errors.
    Check {
        #[arg(required = true)]
        files: Vec<PathBuf>,
        #[command(flatten)]
        source: SourceArgs,
    },
    /// Show a compilation stage of one entry point.
    Build {
        file: PathBuf,
        #[arg(long, value_enum)]
        emit: Emit,
        /// A function without generics, or an agent: its Anakin `init` and `train`
        /// programs at `podc train`'s default sizes.
        #[arg(long, default_value = "main")]
        entry: String,
        /// Write to this file instead of stdout.
        #[arg(short, long)]
        output: Option<PathBuf>,
        #[command(flatten)]
        source: SourceArgs,
    },
    /// Compile an entry point and run it on the device through PJRT.
    Run(RunArgs),
    /// Run an entry point through the reference interpreter (same interface as `run`).
    /// With `--checkpoint DIR`, evaluate a trained agent instead: the mean, standard
    /// deviation and distribution of the returns of `--episodes` whole episodes (with
    /// `--json`, one object: `{"episodes", "mean_return", "std_return", ..}`).
    Eval {
        #[command(flatten)]
        run: RunArgs,
        #[command(flatten)]
        agent: eval::EvalFlags,
    },
    /// Play one episode with a trained agent and write it as an animated GIF (the env
    /// must define `render`).
    Play {
        file: PathBuf,
        #[command(flatten)]
        trained: eval::TrainedArgs,
        /// The GIF to write.
        #[arg(long, value_name = "FILE.gif")]
        out: PathBuf,
        /// Frames per second of the GIF.
        #[arg(long, default_value_t = 10)]
        fps: u32,
        #[command(flatten)]
        source: SourceArgs,
    },
    /// Step one environment with given actions; print one JSON line per step.
    Sim {
        file: PathBuf,
        /// The env to run (default: the file's only env).
        #[arg(long)]
        env: Option<String>,
        /// Reset with `key(seed)`; step `t` uses `fold_in(key(seed), t + 1)`.
        #[arg(long, default_value_t = 0)]
        seed: i64,
        /// State fields to override after the reset: a JSON object, inline or in a file.
        #[arg(long, value_name = "JSON|FILE")]
        state: Option<String>,
        /// Actions, comma-separated (default: random ones from the seed).
        #[arg(long, value_name = "A,A,...", allow_hyphen_values = true)]
        actions: Option<String>,
        /// How many steps (default: one per action, or 10; with `--gif`, one episode).
        #[arg(long)]
        steps: Option<usize>,
        /// Also write the states as an animated GIF (the env must define `render`).
        #[arg(long, value_name = "FILE.gif")]
        gif: Option<PathBuf>,
        /// Frames per second of the GIF.
        #[arg(long, default_value_t = 10, requires = "gif")]
        fps: u32,
        #[command(flatten)]
        source: SourceArgs,
    },
    /// Train an agent with the Anakin driver: acting, env steps and learning in one
    /// program per `--updates-per-call` updates, replicated over `--devices`. With
    /// `--env URI` (or `--arch sebulba`), the Sebulba driver: host envs stepped by actor
    /// threads, a learner replicated over `--learner-devices`.
    Train {
        file: PathBuf,
        #[command(flatten)]
        shape: ShapeArgs,
        /// Stop after this many env steps (rounded up to whole calls); default 500,000, or
        /// a resumed run's own. Consts `TOTAL_STEPS` and `TOTAL_UPDATES` of the file take
        /// the run's length.
        #[arg(long)]
        total_steps: Option<u64>,
        /// The run's seed: the learner's initialisation, the envs' resets and every
        /// sample come from `key(seed)` (with `--seeds N`, the first of N).
        #[arg(long, default_value_t = 0)]
        seed: i64,
        /// Where `metrics.jsonl`, `curve.png` and the checkpoint go (default: a directory of
        /// the run's own, `runs/AGENT__ENV__SEED__TIME`, linked from `runs/latest`; with
        /// `--resume`, the resumed run's). A directory that holds another run is refused.
        #[arg(long, value_name = "DIR")]
        out: Option<PathBuf>,
        /// Write over the run that `--out` holds.
        #[arg(long, requires = "out")]
        force: bool,
        /// Continue the run checkpointed in this directory (same flags; `--total-steps` may
        /// grow unless the agent reads the run's length), in that directory unless `--out`
        /// says otherwise.
        #[arg(long, value_name = "DIR")]
        resume: Option<PathBuf>,
        /// Write a checkpoint every this many calls (and at the end).
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
        checkpoint_every: u64,
        /// No progress bar or summary.
        #[arg(long, short)]
        quiet: bool,
        /// Print the run's fingerprint (the hashes of its programs' StableHLO, the plugin,
        /// a host env's packages) as JSON and stop: nothing is compiled or trained.
        #[arg(long)]
        fingerprint: bool,
        #[command(flatten)]
        source: SourceArgs,
        #[command(flatten)]
        sebulba: train::SebulbaFlags,
    },
    /// Host environments (Gymnasium, EnvPool, Atari through ale-py, `.pod` stepped on the host).
    #[command(subcommand)]
    Env(EnvCmd),
    /// Measure throughput.
    #[command(subcommand)]
    Bench(Bench),
    /// Run a job of N podc processes on this host (`podc launch --processes 2 -- train
    /// AGENT.pod ...`): each is told the job's coordinator, size and its rank, as Slurm or
    /// torchrun would; output is prefixed by rank; the first failure's status is the
    /// launch's. Global flags (`--plugin`, ...) go after `--`.
    Launch {
        /// How many processes.
        #[arg(long)]
        processes: usize,
        /// The podc command each process runs, after `--`.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "COMMAND")]
        command: Vec<String>,
    },
    /// List the plugin's devices.
    Devices {
        /// How many CPU devices the CPU plugin should expose.
        #[arg(long)]
        cpu_devices: Option<usize>,
    },
}

#[derive(Subcommand)]
enum Bench {
    /// Env steps per second of the batched, auto-resetting env with random actions, run
    /// in one loop on the device: the median of several runs after a warm-up. A host env
    /// URI (`gymnasium:ID`, `envpool:ID`, `ale:GAME`, `pod:FILE.pod`) is stepped from the host instead,
    /// one `step` call per batch step, as Sebulba's actors step it.
    Env {
        /// A `.pod` file, or a host env URI.
        #[arg(value_name = "FILE|URI")]
        file: PathBuf,
        #[arg(long)]
        env: Option<String>,
        /// Environments in the batch (split evenly over the devices).
        #[arg(long, default_value_t = 1024)]
        envs: usize,
        /// Steps per run, all inside one device program.
        #[arg(long, default_value_t = 128)]
        steps: usize,
        #[arg(long, default_value_t = 1)]
        devices: usize,
        /// Timed runs (after one warm-up run).
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
        runs: u64,
        /// Print one JSON object: `{"steps_per_sec", "compile_s", "cache", "envs", "steps",
        /// "devices"}` (`cache`: `hit`, `miss` or `off`, for the compilation cache).
        #[arg(long)]
        json: bool,
        /// Worker processes the host envs are split over (Python backends).
        #[arg(long, default_value_t = 1)]
        env_workers: usize,
        #[command(flatten)]
        host: HostArgs,
        #[command(flatten)]
        source: SourceArgs,
    },
    /// The time of one call of a compiled entry point: the median of several calls after
    /// a warm-up, each waited for on the device. Arguments are uploaded once: `--args`,
    /// else random f32 in [-1, 1) (a fixed stream per parameter), integers 0, bools false.
    Run {
        file: PathBuf,
        #[arg(long, default_value = "main")]
        entry: String,
        /// Arguments as a JSON array (one element per parameter), inline or in a file.
        #[arg(long, value_name = "JSON|FILE")]
        args: Option<String>,
        /// Timed calls (after one warm-up call).
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
        runs: u64,
        /// Print one JSON object: `{"entry", "compile_s", "cache", "median_s", "runs_s"}`.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        source: SourceArgs,
    },
    /// Compile time and env steps per second of Anakin training (learning included):
    /// the median of several calls after a warm-up.
    Train {
        file: PathBuf,
        #[command(flatten)]
        shape: ShapeArgs,
        /// Timed calls (after one warm-up call).
        #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..))]
        runs: u64,
        /// Print one JSON object: `{"compile_s", "cache", "steps_per_sec", "runs", "envs",
        /// "rollout", "updates_per_call", "devices", "processes", "all_reduce_share"}` (`cache`:
        /// `hit`, `miss` or `off`; `all_reduce_share`: in a job of several processes, the
        /// fraction of the device time spent in cross-process sums;
        /// Sebulba has no `cache` and adds its idle fractions).
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        source: SourceArgs,
        #[command(flatten)]
        sebulba: train::SebulbaFlags,
    },
}

#[derive(Subcommand)]
enum EnvCmd {
    /// Add Python packages to podc's own Python environment for host envs (binary wheels
    /// preferred), e.g. `podc env install box2d==2.3.10 pygame==2.6.1` for Gymnasium's
    /// Box2D envs.
    Install {
        /// pip requirements: `NAME`, `NAME==VERSION`, ...
        #[arg(required = true, value_name = "PACKAGE")]
        packages: Vec<String>,
    },
    /// Print the `extern env` block that declares a host env's spaces, ready to paste
    /// into a `.pod` file.
    Describe {
        /// `gymnasium:ID[?key=value&...]`, `envpool:ID[?...]`, `ale:GAME[?...]` or
        /// `pod:FILE.pod[?env=NAME]`.
        uri: String,
        #[command(flatten)]
        host: HostArgs,
    },
}

/// How host envs run.
#[derive(clap::Args)]
struct HostArgs {
    /// The Python for env workers (else `PODC_PYTHON`, else `$VIRTUAL_ENV`, else a venv
    /// with pinned packages that podc makes in its cache on first use).
    #[arg(long, value_name = "PATH")]
    python: Option<PathBuf>,
    /// A module the workers import before making their envs (e.g. one that registers
    /// Gymnasium envs): a dotted name (found from the working directory) or a `.py` file.
    #[arg(long = "env-import", value_name = "MODULE")]
    env_import: Vec<String>,
}

/// Where a file's modules are found, and which of its consts this run overrides.
#[derive(clap::Args)]
struct SourceArgs {
    /// Also look for `use`d modules in DIR, after the root file's directory (repeatable;
    /// then the directories of `PODC_PATH`, colon-separated).
    #[arg(long, value_name = "DIR")]
    lib: Vec<PathBuf>,
    /// Override a top-level `const` of the root file for this run, e.g. `--set LR=0.001`:
    /// a JSON value of the const's type (repeatable).
    #[arg(long = "set", value_name = "NAME=VALUE")]
    set: Vec<String>,
}

/// Environment variable with more directories to look for modules in (after `--lib`).
pub const PATH_ENV: &str = "PODC_PATH";

impl SourceArgs {
    fn options(&self) -> Result<LoadOptions, Failure> {
        let mut lib = self.lib.clone();
        if let Some(path) = std::env::var_os(PATH_ENV) {
            lib.extend(std::env::split_paths(&path).filter(|p| !p.as_os_str().is_empty()));
        }
        Ok(LoadOptions { lib, overrides: crate::overrides::parse_all(&self.set)? })
    }
}

/// The sizes of an Anakin run.
#[derive(clap::Args)]
struct ShapeArgs {
    /// The agent to train (default: the file's only one).
    #[arg(long)]
    agent: Option<String>,
    /// `anakin` (a `.pod` env stepped inside the device program) or `sebulba` (host envs
    /// stepped by actor threads; implied by `--env`).
    #[arg(long, value_enum, default_value = "anakin")]
    arch: Arch,
    /// Environments, split evenly over the devices.
    #[arg(long, default_value_t = train::DEFAULT_ENVS)]
    envs: usize,
    /// Steps per rollout (T; default: what the agent's `update` fixes, else 16).
    #[arg(long)]
    rollout: Option<usize>,
    /// Updates per call of the device program (K).
    #[arg(long, default_value_t = train::DEFAULT_UPDATES_PER_CALL)]
    updates_per_call: usize,
    /// Devices to replicate over (CPU devices come from the CPU plugin).
    #[arg(long, default_value_t = 1)]
    devices: usize,
    /// Independent runs in one program (Anakin): seeds `--seed` .. `--seed + N - 1`, each
    /// with `--envs` environments.
    #[arg(long, default_value_t = 1)]
    seeds: usize,
    #[command(flatten)]
    distributed: Box<crate::distributed::Flags>,
}

#[derive(Clone, Copy, ValueEnum)]
enum Arch {
    Anakin,
    Sebulba,
}

impl ShapeArgs {
    /// The Sebulba flags when the run is Sebulba's.
    fn sebulba(&self, flags: train::SebulbaFlags) -> Option<train::SebulbaFlags> {
        (matches!(self.arch, Arch::Sebulba) || flags.env.is_some()).then_some(flags)
    }

    fn sizes(&self) -> train::Sizes {
        train::Sizes {
            envs: self.envs,
            rollout: self.rollout,
            updates_per_call: self.updates_per_call,
            devices: self.devices,
            processes: 1,
            seeds: self.seeds,
        }
    }
}

#[derive(clap::Args)]
struct RunArgs {
    file: PathBuf,
    #[arg(long, default_value = "main")]
    entry: String,
    /// Arguments as a JSON array (one element per parameter), inline or in a file.
    #[arg(long, value_name = "JSON|FILE")]
    args: Option<String>,
    /// Print exactly one JSON object: `{"entry", "outputs": [{"dtype", "shape", "data"}]}`.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    source: SourceArgs,
}

#[derive(Clone, Copy, ValueEnum)]
enum Emit {
    Ast,
    Ir,
    Stablehlo,
}

/// Runs `podc` with parsed arguments.
pub fn main(cli: Cli) -> ExitCode {
    NO_CACHE.get_or_init(|| cli.no_cache);
    let target = Target {
        plugin: cli.plugin,
        options: ClientOptions {
            backend: cli.backend,
            gpu_memory_fraction: cli.gpu_memory_fraction,
            gpu_preallocate: cli.gpu_preallocate,
            ..ClientOptions::default()
        },
    };
    let target = &target;
    let result = match cli.command {
        Command::Check { files, source } => source.options().and_then(|o| check(&files, &o)),
        Command::Build { file, emit, entry, output, source } => {
            source.options().and_then(|o| build(&file, &o, emit, &entry, output.as_deref()))
        }
        Command::Run(a) => run(&a, Some(target)),
        Command::Eval { run: a, agent } => match agent.trained.checkpoint {
            Some(_) if a.entry != "main" || a.args.is_some() => Err(Failure::Message(
                "`--checkpoint` evaluates an agent; `--entry` and `--args` run a function: give one or the other"
                    .into(),
            )),
            Some(_) => eval::evaluate(&a.file, &a.source, &agent, a.json, target),
            None => run(&a, None),
        },
        Command::Play { file, trained, out, fps, source } => match trained.checkpoint {
            Some(_) => eval::play_gif(&file, &source, &trained, &out, fps, target),
            None => Err(Failure::Message("`podc play` needs the trained agent's `--checkpoint DIR`".into())),
        },
        Command::Sim { file, env, seed, state, actions, steps, gif, fps, source } => source.options().and_then(|o| {
            let args = env::SimArgs {
                file: &file,
                source: &o,
                env: env.as_deref(),
                seed,
                state: state.as_deref(),
                actions: actions.as_deref(),
                steps,
                gif: gif.as_deref().map(|p| (p, fps)),
            };
            env::sim(args, target)
        }),
        Command::Bench(Bench::Env { file, env, envs, steps, devices, runs, json, env_workers, host, source }) => {
            source.options().and_then(|o| {
                let args = env::BenchArgs {
                    file: &file,
                    source: &o,
                    env: env.as_deref(),
                    envs,
                    steps,
                    devices,
                    runs: runs as usize,
                    json,
                    env_workers,
                    python: host.python,
                    env_import: host.env_import,
                };
                env::bench(args, target)
            })
        }
        Command::Bench(Bench::Run { file, entry, args, runs, json, source }) => {
            let a = bench::BenchRunArgs {
                file: &file,
                entry: &entry,
                args: args.as_deref(),
                runs: runs as usize,
                json,
                source: &source,
            };
            bench::run(a, target)
        }
        Command::Train {
            file,
            shape,
            total_steps,
            seed,
            out,
            force,
            resume,
            checkpoint_every,
            quiet,
            fingerprint,
            source,
            sebulba,
        } => source.options().and_then(|load| {
            let args = train::TrainArgs {
                file,
                load,
                agent: shape.agent.clone(),
                sizes: shape.sizes(),
                total_steps,
                seed,
                out,
                force,
                resume,
                checkpoint_every,
                quiet,
                sebulba: shape.sebulba(sebulba),
                distributed: (*shape.distributed).clone(),
                fingerprint,
            };
            train::train(args, target)
        }),
        Command::Bench(Bench::Train { file, shape, runs, json, source, sebulba }) => {
            source.options().and_then(|load| {
                let args = train::BenchTrainArgs {
                    file,
                    load,
                    agent: shape.agent.clone(),
                    sizes: shape.sizes(),
                    runs: runs as usize,
                    json,
                    sebulba: shape.sebulba(sebulba),
                    distributed: (*shape.distributed).clone(),
                };
                train::bench(args, target)
            })
        }
        Command::Env(EnvCmd::Install { packages }) => env::install(&packages),
        Command::Env(EnvCmd::Describe { uri, host }) => env::describe(&uri, host.python, host.env_import),
        Command::Devices { cpu_devices } => devices(target, cpu_devices),
        Command::Launch { processes, command } => launch::launch(processes, &command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Reported) => ExitCode::FAILURE,
        Err(Failure::Interrupted(signal)) => ExitCode::from(128 + signal as u8),
        Err(Failure::Status(code)) => ExitCode::from(code),
        Err(Failure::Message(m)) => {
            eprintln!("error: {m}");
            ExitCode::FAILURE
        }
    }
}

/// `--no-cache`, set once in [`main`]: a setting of the whole process, as the flag is.
static NO_CACHE: OnceLock<bool> = OnceLock::new();

/// Where programs run: `--plugin`, and the backend with its client options.
struct Target {
    plugin: Option<PathBuf>,
    options: ClientOptions,
}

impl Target {
    /// The runtime, its CPU plugin asked for `cpu_devices` devices.
    fn open(&self, cpu_devices: Option<usize>) -> Result<Client, Failure> {
        let options = ClientOptions { cpu_device_count: cpu_devices, ..self.options.clone() };
        Ok(Runtime::open_with(self.plugin.as_deref(), &options)?)
    }
}

/// Opens the runtime with the compilation cache that `--no-cache` and the environment
/// ask for (see `runtime::cache`).
fn open_runtime(target: &Target, cpu_devices: Option<usize>) -> Result<Client, Failure> {
    let cache = match NO_CACHE.get() {
        Some(true) => None,
        _ => CompileCache::from_env()?,
    };
    Ok(target.open(cpu_devices)?.with_compile_cache(cache))
}

enum Failure {
    /// Diagnostics were already printed.
    Reported,
    Message(String),
    /// A process of `podc launch` failed with this status (it said why).
    Status(u8),
    /// A run stopped by this signal (after saying so and how to resume): the process exits
    /// as one killed by it would, 128 + its number.
    Interrupted(i32),
}

impl<E: std::fmt::Display> From<E> for Failure {
    fn from(e: E) -> Failure {
        Failure::Message(e.to_string())
    }
}

fn check(files: &[PathBuf], opts: &LoadOptions) -> Result<(), Failure> {
    let mut failed = false;
    for f in files {
        let (prog, diags) = driver::check_file_with(f, opts)?;
        emit_stderr(&prog.map, &diags);
        failed |= !diags.is_empty();
    }
    if failed { Err(Failure::Reported) } else { Ok(()) }
}

/// Loads and checks `file`, printing diagnostics; only a clean program comes back.
fn load(file: &Path, opts: &LoadOptions) -> Result<Program, Failure> {
    load_noted(file, opts, None)
}

/// [`load`], with `note` added to each diagnostic (where the values of some consts came from).
fn load_noted(file: &Path, opts: &LoadOptions, note: Option<&str>) -> Result<Program, Failure> {
    let (prog, mut diags) = driver::check_file_with(file, opts)?;
    if diags.is_empty() {
        Ok(prog)
    } else {
        for d in diags.iter_mut() {
            d.notes.extend(note.map(str::to_string));
        }
        emit_stderr(&prog.map, &diags);
        let n = diags.len();
        eprintln!(
            "error: could not compile `{}` due to {n} previous error{}",
            file.display(),
            if n == 1 { "" } else { "s" }
        );
        Err(Failure::Reported)
    }
}

fn entry(prog: &Program, overrides: &[Override], name: &str) -> Result<Entry, Failure> {
    driver::build(prog, overrides, name).map_err(|d| {
        emit_stderr(&prog.map, &[*d]);
        Failure::Reported
    })
}

fn build(file: &Path, opts: &LoadOptions, emit: Emit, name: &str, output: Option<&Path>) -> Result<(), Failure> {
    let text = match emit {
        Emit::Ast => {
            let src = std::fs::read_to_string(file).map_err(|e| format!("cannot read `{}`: {e}", file.display()))?;
            let mut map = SourceMap::default();
            let id = map.add(file.display().to_string(), src);
            let (module, diags) = crate::syntax::parse(id, map.source(id));
            if !diags.is_empty() {
                emit_stderr(&map, &diags);
                return Err(Failure::Reported);
            }
            crate::syntax::print::print_module(&module)
        }
        Emit::Ir | Emit::Stablehlo => {
            let prog = load(file, opts)?;
            // An agent's entry is its Anakin training program, at `podc train`'s defaults.
            let funcs = match crate::elab::agent::agent_names(&prog).iter().any(|a| a == name) {
                true => {
                    let p = train::anakin_programs_at_defaults(&prog, &opts.overrides, name)?;
                    vec![(p.init, 0), (p.train, p.state.len())]
                }
                false => vec![(entry(&prog, &opts.overrides, name)?.func, 0)],
            };
            let text = funcs.iter().map(|(f, donated)| match emit {
                Emit::Ir => crate::ir::print::print_func(f),
                _ => crate::lower::stablehlo::lower_module_donating(f, 1, *donated),
            });
            text.collect::<Vec<_>>().join("\n")
        }
    };
    match output {
        Some(p) => std::fs::write(p, text).map_err(|e| format!("cannot write `{}`: {e}", p.display()))?,
        None => print!("{text}"),
    }
    Ok(())
}

/// `run` (with `Some(target)`) and `eval` (with `None`).
fn run(a: &RunArgs, device: Option<&Target>) -> Result<(), Failure> {
    let opts = a.source.options()?;
    let prog = load(&a.file, &opts)?;
    let e = entry(&prog, &opts.overrides, &a.entry)?;
    let args = read_args(&e, a.args.as_deref())?;
    let outs = match device {
        Some(target) => {
            let client = open_runtime(target, None)?;
            run_on_device(&client, &e, &args)?
        }
        None => driver::eval(&e, &args),
    };
    if a.json {
        println!("{}", crate::io::outputs_json(&a.entry, &outs));
    } else {
        println!("{}", crate::io::show(&e.ret, &outs));
    }
    Ok(())
}

/// Compiles an entry for one device, runs it once, and downloads the results.
pub fn run_on_device(client: &Client, e: &Entry, args: &[Array]) -> Result<Vec<Array>, crate::runtime::RuntimeError> {
    let exe = client.compile(&crate::lower::stablehlo::lower_module(&e.func, 1), 1)?;
    let bufs = args.iter().map(|a| client.upload(a, 0)).collect::<Result<Vec<_>, _>>()?;
    let refs: Vec<_> = bufs.iter().collect();
    exe.execute(&refs)?.iter().map(|b| b.download()).collect()
}

fn read_args(e: &Entry, args: Option<&str>) -> Result<Vec<Array>, Failure> {
    let text = match args {
        None if e.params.is_empty() => return Ok(vec![]),
        None => {
            return Err(Failure::Message(format!(
                "`{}` takes {} arguments: pass them with `--args`",
                e.func.name,
                e.params.len()
            )));
        }
        Some(s) if s.trim_start().starts_with('[') => s.to_string(),
        Some(path) => {
            std::fs::read_to_string(path).map_err(|err| format!("cannot read `--args` file `{path}`: {err}"))?
        }
    };
    let v: serde_json::Value =
        serde_json::from_str(&text).map_err(|err| format!("`--args` is not valid JSON: {err}"))?;
    Ok(crate::io::args_from_json(&e.params, &v)?)
}

fn devices(target: &Target, cpu_devices: Option<usize>) -> Result<(), Failure> {
    let client = target.open(cpu_devices)?;
    let v = client.api_version();
    println!("plugin: {} (PJRT C API {v}, platform {})", client.plugin_path().display(), client.platform_name());
    for (i, d) in client.devices().iter().enumerate() {
        let memory = match client.memory_limit(i) {
            Some(bytes) => format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30)),
            None => "memory not reported".into(),
        };
        println!("  {i}: {} ({}, id {}, {memory})", d.description, d.kind, d.id);
    }
    Ok(())
}
