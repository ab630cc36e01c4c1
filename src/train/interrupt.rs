//! SIGINT and SIGTERM during a run (Ctrl-C; Slurm's warning before it kills a job): the
//! first asks the run loop to stop after the call in flight, with a checkpoint, the
//! metrics and the curve written; a second exits at once, with the status a shell gives a
//! process killed by it (128 + its number).

use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::flag;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

static SEEN: AtomicBool = AtomicBool::new(false);
static SIGNAL: AtomicUsize = AtomicUsize::new(0);

/// Installs the handlers, once per process; until then [`requested`] is always `None`.
pub fn install() -> Result<(), String> {
    static INSTALLED: OnceLock<Result<(), String>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| {
            for s in [SIGINT, SIGTERM] {
                // In order: exit if one came before, then note this one.
                flag::register_conditional_shutdown(s, 128 + s, &SEEN).map_err(|e| e.to_string())?;
                flag::register(s, &SEEN).map_err(|e| e.to_string())?;
                flag::register_usize(s, &SIGNAL, s as usize).map_err(|e| e.to_string())?;
            }
            Ok(())
        })
        .clone()
}

/// The signal that asked the run to stop, if one did.
pub fn requested() -> Option<i32> {
    match SIGNAL.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s as i32),
    }
}

/// A signal's name, for messages.
pub fn name(signal: i32) -> String {
    match signal {
        SIGINT => "SIGINT".into(),
        SIGTERM => "SIGTERM".into(),
        s => format!("signal {s}"),
    }
}
