//! Training across processes, after `jax.distributed`: N processes (started by `podc
//! launch`, Slurm, `mpirun`, `torchrun`, Kubernetes or by hand) each run the same program
//! on their own devices; process 0 serves a coordination service ([`coord`]) for
//! rendezvous and metadata; the collectives' data goes through the collective engine
//! ([`gloo`] on the CPU plugin).
//!
//! Which process is which comes from the flags (`--coordinator`, `--num-processes`,
//! `--process-id`), else `PODC_COORDINATOR`, `PODC_NUM_PROCESSES`, `PODC_PROCESS_ID`, else
//! what a launcher sets: Slurm, Open MPI or torchrun ([`detect`]).

pub mod coord;
pub mod gloo;

use coord::Coordinator;
use serde_json::Value;
use std::net::TcpListener;
use std::time::Duration;

/// The flags of `podc train` and `podc bench train` that place a process in a job.
#[derive(clap::Args, Clone, Debug, Default)]
pub struct Flags {
    /// Process 0's coordination service, `HOST:PORT` (else `PODC_COORDINATOR`, else the
    /// launcher's: Slurm's first node, torchrun's `MASTER_ADDR:MASTER_PORT`).
    #[arg(long, value_name = "HOST:PORT")]
    pub coordinator: Option<String>,
    /// Processes in the job (else `PODC_NUM_PROCESSES`, `SLURM_NTASKS`,
    /// `OMPI_COMM_WORLD_SIZE`, `WORLD_SIZE`; default 1).
    #[arg(long, value_name = "N")]
    pub num_processes: Option<usize>,
    /// This process's index, 0 .. N-1 (else `PODC_PROCESS_ID`, `SLURM_PROCID`,
    /// `OMPI_COMM_WORLD_RANK`, `RANK`).
    #[arg(long, value_name = "I")]
    pub process_id: Option<usize>,
    /// Seconds to wait for the coordinator and the other processes at start.
    #[arg(long, value_name = "SECONDS", default_value_t = 300)]
    pub distributed_timeout: u64,
}

/// Where a process stands in a job of several.
#[derive(Clone, Debug, PartialEq)]
pub struct Topology {
    pub coordinator: String,
    pub processes: usize,
    pub rank: usize,
}

/// The job this process belongs to, from the flags, else the environment (`var`);
/// `None` for a job of one process.
pub fn detect(flags: &Flags, var: &dyn Fn(&str) -> Option<String>) -> Result<Option<Topology>, String> {
    let number = |name: &str| -> Result<Option<usize>, String> {
        var(name)
            .map(|v| v.trim().parse::<usize>().map_err(|_| format!("`{name}={v}` is not a process count or index")))
            .transpose()
    };
    let first = |names: &[&str]| -> Result<Option<usize>, String> {
        for n in names {
            if let Some(v) = number(n)? {
                return Ok(Some(v));
            }
        }
        Ok(None)
    };
    let processes = match flags.num_processes {
        Some(n) => Some(n),
        None => first(&["PODC_NUM_PROCESSES", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "WORLD_SIZE"])?,
    };
    let Some(processes) = processes.filter(|&n| n > 1) else {
        if processes == Some(0) {
            return Err("the number of processes must be at least 1".into());
        }
        return Ok(None);
    };
    let rank = match flags.process_id {
        Some(i) => i,
        None => first(&["PODC_PROCESS_ID", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "RANK"])?.ok_or_else(|| {
            format!("a job of {processes} processes needs this process's index: `--process-id` or `PODC_PROCESS_ID`")
        })?,
    };
    if rank >= processes {
        return Err(format!("process index {rank} is out of range for {processes} processes"));
    }
    let coordinator = match &flags.coordinator {
        Some(c) => c.clone(),
        None => match var("PODC_COORDINATOR") {
            Some(c) => c,
            None => launcher_coordinator(var)?.ok_or_else(|| {
                format!("a job of {processes} processes needs process 0's address: `--coordinator HOST:PORT` or `PODC_COORDINATOR`")
            })?,
        },
    };
    Ok(Some(Topology { coordinator, processes, rank }))
}

/// The coordinator a launcher implies: Slurm's first node of the step (port from the job
/// id, as JAX picks it), or torchrun's `MASTER_ADDR:MASTER_PORT`.
fn launcher_coordinator(var: &dyn Fn(&str) -> Option<String>) -> Result<Option<String>, String> {
    if let (Some(nodes), Some(job)) = (var("SLURM_STEP_NODELIST"), var("SLURM_JOB_ID")) {
        let job: u64 = job.trim().parse().map_err(|_| format!("`SLURM_JOB_ID={job}` is not a number"))?;
        let host = first_slurm_host(&nodes).ok_or_else(|| format!("cannot read the node list `{nodes}`"))?;
        return Ok(Some(format!("{host}:{}", job % 4096 + 61440)));
    }
    if let Some(addr) = var("MASTER_ADDR") {
        let port = var("MASTER_PORT").ok_or("`MASTER_ADDR` is set without `MASTER_PORT`")?;
        return Ok(Some(format!("{addr}:{port}")));
    }
    Ok(None)
}

/// The first host of a Slurm node list: `node[07-09,12],gpu3` gives `node07`.
pub fn first_slurm_host(list: &str) -> Option<String> {
    let list = list.trim();
    let end = list.find(',').unwrap_or(list.len());
    let open = list.find('[');
    match open {
        Some(o) if o < end => {
            let close = list[o..].find(']')? + o;
            let first = list[o + 1..close].split([',', '-']).next()?;
            Some(format!("{}{first}", &list[..o]))
        }
        _ => (end > 0).then(|| list[..end].to_string()),
    }
}

/// This process's membership of a running job.
pub struct Session {
    pub rank: usize,
    pub processes: usize,
    pub coordinator: &'static Coordinator,
    pub timeout: Duration,
    /// Keys handed out by [`Session::fresh_key`].
    keys: std::sync::atomic::AtomicU64,
}

impl Session {
    /// Joins the job: process 0 starts the coordination service; every process connects,
    /// and from then on exits when another dies (see [`Coordinator::watch`]).
    pub fn start(t: &Topology, timeout: Duration) -> Result<Session, String> {
        if t.rank == 0 {
            let port = t.coordinator.rsplit_once(':').map(|(_, p)| p).unwrap_or("");
            let listener = TcpListener::bind(format!("0.0.0.0:{port}")).map_err(|e| {
                format!("process 0 cannot serve the coordinator on port {port} of `{}`: {e}", t.coordinator)
            })?;
            coord::serve(listener);
        }
        let c = Coordinator::connect(&t.coordinator, t.rank, timeout)?;
        let coordinator: &'static Coordinator = Box::leak(Box::new(c));
        coordinator.watch(t.rank, &t.coordinator)?;
        Ok(Session { rank: t.rank, processes: t.processes, coordinator, timeout, keys: Default::default() })
    }

    /// Refuses to go on unless every process runs with the same `settings` (a JSON
    /// object: the program, the flags, podc's version), naming the first difference.
    pub fn check_same(&self, settings: &Value) -> Result<(), String> {
        self.coordinator.put(&format!("settings/{}", self.rank), settings.to_string().as_bytes())?;
        let mut verdict = Ok(());
        for r in (0..self.processes).filter(|&r| r != self.rank) {
            let theirs = self.coordinator.get(&format!("settings/{r}"), self.timeout)?;
            let theirs: Value = serde_json::from_slice(&theirs).map_err(|e| e.to_string())?;
            if let (Some(mine), Ok(())) = (difference(settings, &theirs), &verdict) {
                verdict = Err(format!(
                    "process {r} runs with {} where this process (process {}) has {mine}: every process must run the same program with the same flags",
                    difference(&theirs, settings).unwrap_or_default(),
                    self.rank
                ));
            }
        }
        // Where the settings differ, every process finds a difference and refuses, saying
        // why itself. The barrier makes each read every other's settings before any
        // leaves; once it is passed, process 0 may leave first, so a refusing process
        // stops watching the coordinator before it enters the barrier.
        if verdict.is_err() {
            self.coordinator.leaving();
        }
        let barrier = self.coordinator.barrier("settings", self.rank, self.processes, self.timeout);
        verdict.and(barrier)
    }

    /// A key for one exchange (`what/N`): every process asks for its keys in the same
    /// order, so the N-th key is the same everywhere.
    pub fn fresh_key(&self, what: &str) -> String {
        format!("{what}/{}", self.keys.fetch_add(1, std::sync::atomic::Ordering::SeqCst))
    }

    /// Records what this process just did, for the message if it dies.
    pub fn note(&self, what: &str) {
        self.coordinator.note(what);
    }

    /// Whether any process was asked to stop (by a signal, `stop`) at report `n`: every
    /// process stops at the same report, so none waits alone in a collective.
    pub fn any_stop(&self, n: u64, stop: Option<i32>) -> Result<Option<i32>, String> {
        let mine = stop.unwrap_or(0).to_le_bytes();
        self.coordinator.put(&format!("stop/{n}/{}", self.rank), &mine)?;
        let mut any = stop;
        for r in (0..self.processes).filter(|&r| r != self.rank) {
            let theirs = self.coordinator.get(&format!("stop/{n}/{r}"), self.timeout)?;
            let signal = i32::from_le_bytes(theirs[..].try_into().map_err(|_| "a malformed stop flag")?);
            any = any.or((signal != 0).then_some(signal));
        }
        Ok(any)
    }

    /// `bytes` from every process, on process 0 (`None` elsewhere), under a fresh `key`.
    pub fn gather(&self, key: &str, bytes: &[u8]) -> Result<Option<Vec<Vec<u8>>>, String> {
        if self.rank != 0 {
            self.coordinator.put(&format!("{key}/{}", self.rank), bytes)?;
            return Ok(None);
        }
        let mut all = vec![bytes.to_vec()];
        for r in 1..self.processes {
            let k = format!("{key}/{r}");
            all.push(self.coordinator.get(&k, self.timeout)?);
            self.coordinator.delete(&k)?;
        }
        Ok(Some(all))
    }

    /// Process 0's `bytes`, on every process, under a fresh `key`.
    pub fn broadcast(&self, key: &str, bytes: Option<&[u8]>) -> Result<Vec<u8>, String> {
        match (self.rank, bytes) {
            (0, Some(b)) => {
                self.coordinator.put(key, b)?;
                Ok(b.to_vec())
            }
            (0, None) => Err("process 0 has nothing to send".into()),
            _ => self.coordinator.get(key, self.timeout),
        }
    }

    /// Ends this process's part: waits for every process here, then says goodbye, so that
    /// process 0 (whose service the others use) exits last.
    pub fn finish(&self) -> Result<(), String> {
        self.coordinator.barrier("finish", self.rank, self.processes, self.timeout)?;
        self.coordinator.leaving();
        self.coordinator.put(&format!("left/{}", self.rank), &[])?;
        if self.rank == 0 {
            for r in 1..self.processes {
                self.coordinator.get(&format!("left/{r}"), self.timeout)?;
            }
        }
        self.coordinator.bye();
        Ok(())
    }
}

/// The first key whose value differs between two JSON objects, as "`key` = value".
fn difference(a: &Value, b: &Value) -> Option<String> {
    let (a, b) = (a.as_object()?, b.as_object()?);
    a.keys().chain(b.keys()).find(|k| a.get(*k) != b.get(*k)).map(|k| match a.get(k) {
        Some(v) => format!("`{k}` = {v}"),
        None => format!("no `{k}`"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    fn topo(c: &str, processes: usize, rank: usize) -> Option<Topology> {
        Some(Topology { coordinator: c.into(), processes, rank })
    }

    #[test]
    fn flags_win_over_the_environment() {
        let flags =
            Flags { coordinator: Some("h:1".into()), num_processes: Some(2), process_id: Some(1), ..Flags::default() };
        let vars = [("PODC_COORDINATOR", "x:9"), ("PODC_NUM_PROCESSES", "4"), ("PODC_PROCESS_ID", "3")];
        assert_eq!(detect(&flags, &env(&vars)).unwrap(), topo("h:1", 2, 1));
        assert_eq!(detect(&Flags::default(), &env(&vars)).unwrap(), topo("x:9", 4, 3));
    }

    #[test]
    fn launchers_are_detected() {
        let slurm = [
            ("SLURM_NTASKS", "4"),
            ("SLURM_PROCID", "2"),
            ("SLURM_STEP_NODELIST", "gpu[07-09,12],cpu1"),
            ("SLURM_JOB_ID", "123456"),
        ];
        assert_eq!(detect(&Flags::default(), &env(&slurm)).unwrap(), topo("gpu07:62016", 4, 2));
        let torchrun = [("MASTER_ADDR", "10.0.0.1"), ("MASTER_PORT", "29500"), ("RANK", "1"), ("WORLD_SIZE", "2")];
        assert_eq!(detect(&Flags::default(), &env(&torchrun)).unwrap(), topo("10.0.0.1:29500", 2, 1));
        let mpi = [("OMPI_COMM_WORLD_RANK", "1"), ("OMPI_COMM_WORLD_SIZE", "3"), ("PODC_COORDINATOR", "a:5")];
        assert_eq!(detect(&Flags::default(), &env(&mpi)).unwrap(), topo("a:5", 3, 1));
    }

    #[test]
    fn one_process_is_no_job_and_bad_settings_are_named() {
        assert_eq!(detect(&Flags::default(), &env(&[])).unwrap(), None);
        assert_eq!(detect(&Flags::default(), &env(&[("WORLD_SIZE", "1"), ("RANK", "0")])).unwrap(), None);
        let err = |vars: &[(&str, &str)]| detect(&Flags::default(), &env(vars)).unwrap_err();
        assert!(err(&[("PODC_NUM_PROCESSES", "2"), ("PODC_PROCESS_ID", "0")]).contains("--coordinator"));
        assert!(err(&[("PODC_NUM_PROCESSES", "2"), ("PODC_COORDINATOR", "a:1")]).contains("--process-id"));
        assert!(
            err(&[("PODC_NUM_PROCESSES", "2"), ("PODC_PROCESS_ID", "2"), ("PODC_COORDINATOR", "a:1")])
                .contains("out of range")
        );
        assert!(err(&[("WORLD_SIZE", "two")]).contains("`WORLD_SIZE=two`"));
        assert!(err(&[("OMPI_COMM_WORLD_SIZE", "2"), ("OMPI_COMM_WORLD_RANK", "0")]).contains("--coordinator"));
    }

    #[test]
    fn slurm_node_lists() {
        assert_eq!(first_slurm_host("node1").as_deref(), Some("node1"));
        assert_eq!(first_slurm_host("node[3-4]").as_deref(), Some("node3"));
        assert_eq!(first_slurm_host("a1,b[2-3]").as_deref(), Some("a1"));
        assert_eq!(first_slurm_host("").as_deref(), None);
    }

    #[test]
    fn the_first_difference_is_named() {
        let a = serde_json::json!({"envs": 32, "seed": 0});
        let b = serde_json::json!({"envs": 64, "seed": 0});
        assert_eq!(difference(&a, &b).as_deref(), Some("`envs` = 32"));
        assert_eq!(difference(&a, &a), None);
    }
}
