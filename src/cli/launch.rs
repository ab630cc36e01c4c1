//! `podc launch --processes N -- COMMAND...`: a job of N podc processes on this host, as
//! `torchrun --standalone` starts one. Each runs `podc COMMAND...` with
//! `PODC_COORDINATOR` (a free local port), `PODC_NUM_PROCESSES` and `PODC_PROCESS_ID` set;
//! their output comes through line by line, prefixed by rank. The launch ends with the
//! first failure's status (the others are then stopped), else 0.

use super::Failure;
use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the others get to stop on their own (they notice a dead process within
/// seconds) after one fails, before they are killed.
const GRACE: Duration = Duration::from_secs(20);

pub fn launch(processes: usize, command: &[String]) -> Result<(), Failure> {
    if processes == 0 {
        return Err(Failure::Message("`--processes` must be at least 1".into()));
    }
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| format!("cannot find a free port for the coordinator: {e}"))?
        .port();
    let exe = std::env::current_exe().map_err(|e| format!("cannot find podc's own executable: {e}"))?;
    let signal = Arc::new(AtomicUsize::new(0));
    for s in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_usize(s, signal.clone(), s as usize).map_err(|e| e.to_string())?;
    }
    let mut children: Vec<Option<Child>> = vec![];
    let mut outputs = vec![];
    for rank in 0..processes {
        let child = Command::new(&exe)
            .args(command)
            .env("PODC_COORDINATOR", format!("127.0.0.1:{port}"))
            .env("PODC_NUM_PROCESSES", processes.to_string())
            .env("PODC_PROCESS_ID", rank.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        let mut child = match child {
            Ok(c) => c,
            Err(e) => {
                stop(&mut children, rustix::process::Signal::KILL);
                return Err(Failure::Message(format!("cannot start process {rank}: {e}")));
            }
        };
        outputs.extend([forward(child.stdout.take(), rank, false), forward(child.stderr.take(), rank, true)]);
        children.push(Some(child));
    }
    let mut failed: Option<(usize, i32)> = None;
    let mut failed_at = Instant::now();
    let mut forwarded = 0;
    while children.iter().any(Option::is_some) {
        let s = signal.load(Ordering::SeqCst);
        if s != forwarded && s != 0 {
            forwarded = s;
            let sig = rustix::process::Signal::from_named_raw(s as i32).unwrap_or(rustix::process::Signal::TERM);
            stop(&mut children, sig);
        }
        let mut ended = vec![];
        for (rank, slot) in children.iter_mut().enumerate() {
            if let Some(Ok(Some(status))) = slot.as_mut().map(Child::try_wait) {
                *slot = None;
                ended.push((rank, exit_code(status)));
            }
        }
        // Of the processes that ended together, one killed by a signal is the cause: the
        // others exit 1 on noticing it.
        ended.sort_by_key(|&(_, code)| std::cmp::Reverse(code > 128));
        if let (None, Some(&(rank, code))) = (failed, ended.iter().find(|(_, code)| *code != 0)) {
            failed = Some((rank, code));
            failed_at = Instant::now();
        }
        if failed.is_some() && failed_at.elapsed() > GRACE {
            stop(&mut children, rustix::process::Signal::KILL);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    for o in outputs.into_iter().flatten() {
        let _ = o.join();
    }
    match failed {
        None => Ok(()),
        Some((rank, code)) => {
            eprintln!("podc launch: process {rank} failed (exit status {code})");
            Err(Failure::Status(code.clamp(1, 255) as u8))
        }
    }
}

/// The status a shell reports: the exit code, or 128 + the signal that killed it.
fn exit_code(status: std::process::ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    status.code().or_else(|| status.signal().map(|s| 128 + s)).unwrap_or(1)
}

/// Sends `signal` to every process still running.
fn stop(children: &mut [Option<Child>], signal: rustix::process::Signal) {
    for child in children.iter().flatten() {
        if let Some(pid) = rustix::process::Pid::from_raw(child.id() as i32) {
            let _ = rustix::process::kill_process(pid, signal);
        }
    }
}

/// Copies a child's output to ours, each line prefixed with `[rank] `. Progress lines that
/// end in `\r` pass through as lines too.
fn forward(from: Option<impl Read + Send + 'static>, rank: usize, stderr: bool) -> Option<JoinHandle<()>> {
    let from = from?;
    Some(std::thread::spawn(move || {
        let mut reader = BufReader::new(from);
        let mut line = vec![];
        while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
            let text = String::from_utf8_lossy(&line);
            let text = format!("[{rank}] {}\n", text.trim_end_matches(['\n', '\r']));
            let _ = match stderr {
                true => std::io::stderr().lock().write_all(text.as_bytes()),
                false => std::io::stdout().lock().write_all(text.as_bytes()),
            };
            line.clear();
        }
    }))
}
