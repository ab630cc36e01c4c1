//! The coordination service: process 0 serves a key-value store over TCP that every
//! process (itself included) connects to, for rendezvous and metadata only (gloo's
//! addresses, the run's settings, checkpoints to share), as `jax.distributed`'s service
//! is. A `get` blocks until its key exists.
//!
//! Each process also holds a *lifeline*: a connection that says who it is and stays open
//! until it says goodbye. A lifeline that closes without one means the process died; the
//! service then tells every other lifeline, and each process exits naming the dead one
//! (see [`Coordinator::watch`]). A process whose coordinator vanishes exits too. Keys
//! stay until deleted.
//!
//! Frames are a u32 length then the bytes (little-endian); a request is an opcode and
//! length-prefixed fields.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

const PUT: u8 = 1;
const GET: u8 = 2;
const TRY_GET: u8 = 3;
const HELLO: u8 = 4;
const NOTE: u8 = 5;
const BYE: u8 = 6;
const DELETE: u8 = 7;

/// Replies' first byte.
const OK: u8 = 0;
const MISSING: u8 = 1;
const FAILED: u8 = 2;

fn write_frame(w: &mut impl Write, parts: &[&[u8]]) -> io::Result<()> {
    let mut buf = vec![];
    for p in parts {
        buf.extend_from_slice(&(p.len() as u32).to_le_bytes());
        buf.extend_from_slice(p);
    }
    let mut out = (buf.len() as u32).to_le_bytes().to_vec();
    out.extend(buf);
    w.write_all(&out)
}

fn read_frame(r: &mut impl Read) -> io::Result<Vec<Vec<u8>>> {
    let mut n = [0u8; 4];
    r.read_exact(&mut n)?;
    let mut buf = vec![0u8; u32::from_le_bytes(n) as usize];
    r.read_exact(&mut buf)?;
    let mut parts = vec![];
    let mut at = 0;
    while at + 4 <= buf.len() {
        let len = u32::from_le_bytes(buf[at..at + 4].try_into().expect("4 bytes")) as usize;
        let end = (at + 4 + len).min(buf.len());
        parts.push(buf[at + 4..end].to_vec());
        at = end;
    }
    Ok(parts)
}

/// The service's state, shared by its connection threads.
#[derive(Default)]
struct Store {
    kv: HashMap<Vec<u8>, Vec<u8>>,
    /// Why the job failed, once a process died.
    failed: Option<String>,
    /// Per process: its host and the last thing it said it did.
    who: HashMap<u32, (String, String)>,
}

struct Service {
    store: Mutex<Store>,
    changed: Condvar,
}

impl Service {
    fn lock(&self) -> std::sync::MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Serves the store on `listener` until the process ends.
pub fn serve(listener: TcpListener) {
    let service = Arc::new(Service { store: Mutex::default(), changed: Condvar::new() });
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let service = service.clone();
            std::thread::spawn(move || {
                let _ = connection(service, stream);
            });
        }
    });
}

fn connection(s: Arc<Service>, mut stream: TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)?;
    loop {
        let parts = read_frame(&mut stream)?;
        let op = parts.first().and_then(|p| p.first()).copied().unwrap_or(0);
        match (op, &parts[1..]) {
            (PUT, [key, value]) => {
                s.lock().kv.insert(key.clone(), value.clone());
                s.changed.notify_all();
                write_frame(&mut stream, &[&[OK]])?;
            }
            (GET, [key, timeout]) => {
                let ms = u64::from_le_bytes(timeout[..].try_into().unwrap_or([0; 8]));
                let deadline = Instant::now() + Duration::from_millis(ms);
                let mut st = s.lock();
                let reply: (u8, Vec<u8>) = loop {
                    if let Some(v) = st.kv.get(key) {
                        break (OK, v.clone());
                    }
                    if let Some(why) = &st.failed {
                        break (FAILED, why.clone().into_bytes());
                    }
                    let now = Instant::now();
                    if now >= deadline {
                        break (MISSING, vec![]);
                    }
                    st = s.changed.wait_timeout(st, deadline - now).unwrap_or_else(PoisonError::into_inner).0;
                };
                drop(st);
                write_frame(&mut stream, &[&[reply.0], &reply.1])?;
            }
            (TRY_GET, [key]) => {
                let v = s.lock().kv.get(key).cloned();
                match v {
                    Some(v) => write_frame(&mut stream, &[&[OK], &v])?,
                    None => write_frame(&mut stream, &[&[MISSING]])?,
                }
            }
            (DELETE, [key]) => {
                s.lock().kv.remove(key);
                write_frame(&mut stream, &[&[OK]])?;
            }
            (HELLO, [rank, host]) => {
                let (rank, host) = (rank.clone(), host.clone());
                return lifeline(s, stream, &rank, &host);
            }
            _ => return Err(io::Error::new(io::ErrorKind::InvalidData, "a malformed request")),
        }
    }
}

/// Holds process `rank`'s lifeline: records its notes, and on a close without goodbye
/// fails the job. Tells the process when the job fails.
fn lifeline(s: Arc<Service>, mut stream: TcpStream, rank: &[u8], host: &[u8]) -> io::Result<()> {
    let rank = u32::from_le_bytes(rank.try_into().unwrap_or([0; 4]));
    let host = String::from_utf8_lossy(host).into_owned();
    s.lock().who.insert(rank, (host.clone(), "started".into()));
    // A thread that forwards the failure, whoever's it is.
    let mut tell = stream.try_clone()?;
    let service = s.clone();
    std::thread::spawn(move || {
        let mut st = service.lock();
        while st.failed.is_none() {
            st = service.changed.wait(st).unwrap_or_else(PoisonError::into_inner);
        }
        let why = st.failed.clone().unwrap_or_default();
        drop(st);
        let _ = write_frame(&mut tell, &[&[FAILED], why.as_bytes()]);
    });
    loop {
        match read_frame(&mut stream) {
            Ok(parts) if parts.first().and_then(|p| p.first()) == Some(&NOTE) => {
                let note = parts.get(1).map(|n| String::from_utf8_lossy(n).into_owned()).unwrap_or_default();
                if let Some(w) = s.lock().who.get_mut(&rank) {
                    w.1 = note;
                }
            }
            Ok(parts) if parts.first().and_then(|p| p.first()) == Some(&BYE) => return Ok(()),
            Ok(_) => {}
            Err(_) => {
                let mut st = s.lock();
                if st.failed.is_none() {
                    let last = st.who.get(&rank).map(|w| w.1.clone()).unwrap_or_default();
                    st.failed = Some(format!("process {rank} (on {host}) exited; its last step: {last}"));
                }
                drop(st);
                s.changed.notify_all();
                return Ok(());
            }
        }
    }
}

/// A process's connection to the coordination service.
pub struct Coordinator {
    addr: SocketAddr,
    /// Idle connections for requests; a blocking `get` takes one of its own, so that it
    /// never holds up another thread's `put`.
    idle: Mutex<Vec<TcpStream>>,
    lifeline: Mutex<Option<TcpStream>>,
    /// Set when this process leaves on purpose: its lifeline closing is then no failure.
    leaving: Arc<std::sync::atomic::AtomicBool>,
    /// This process's address as the coordinator sees it (what peers can reach).
    pub local_ip: std::net::IpAddr,
}

/// Why a `get` returned nothing.
#[derive(Debug)]
pub enum GetError {
    Timeout,
    /// The job failed (a process died), with the reason.
    Failed(String),
    Io(io::Error),
}

impl std::fmt::Display for GetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GetError::Timeout => write!(f, "timed out"),
            GetError::Failed(why) => write!(f, "{why}"),
            GetError::Io(e) => write!(f, "lost the coordinator: {e}"),
        }
    }
}

impl Coordinator {
    /// Connects to the service at `addr`, retrying until `timeout` passes (process 0 may
    /// not be listening yet), and opens this process's lifeline as `rank`.
    pub fn connect(addr: &str, rank: usize, timeout: Duration) -> Result<Coordinator, String> {
        let deadline = Instant::now() + timeout;
        let mut last = String::new();
        loop {
            let addrs: Vec<SocketAddr> = addr.to_socket_addrs().map(|a| a.collect()).unwrap_or_default();
            for a in &addrs {
                match TcpStream::connect_timeout(a, Duration::from_secs(2)) {
                    Ok(mut s) => {
                        let _ = s.set_nodelay(true);
                        let local_ip = s.local_addr().map_err(|e| e.to_string())?.ip();
                        let host = hostname();
                        write_frame(&mut s, &[&[HELLO], &(rank as u32).to_le_bytes(), host.as_bytes()])
                            .map_err(|e| e.to_string())?;
                        return Ok(Coordinator {
                            addr: *a,
                            idle: Mutex::new(vec![]),
                            lifeline: Mutex::new(Some(s)),
                            leaving: Arc::default(),
                            local_ip,
                        });
                    }
                    Err(e) => last = e.to_string(),
                }
            }
            if addrs.is_empty() {
                last = format!("cannot resolve `{addr}`");
            }
            if Instant::now() >= deadline {
                return Err(format!(
                    "cannot reach the coordinator at {addr} after {} s ({last}); is process 0 running, and is the address one this host can reach?",
                    timeout.as_secs()
                ));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    fn request(&self, parts: &[&[u8]]) -> Result<Vec<Vec<u8>>, GetError> {
        let pooled = self.idle.lock().unwrap_or_else(PoisonError::into_inner).pop();
        let mut s = match pooled {
            Some(s) => s,
            None => {
                let s = TcpStream::connect(self.addr).map_err(GetError::Io)?;
                let _ = s.set_nodelay(true);
                s
            }
        };
        write_frame(&mut s, parts).map_err(GetError::Io)?;
        let reply = read_frame(&mut s).map_err(GetError::Io)?;
        self.idle.lock().unwrap_or_else(PoisonError::into_inner).push(s);
        Ok(reply)
    }

    pub fn put(&self, key: &str, value: &[u8]) -> Result<(), String> {
        self.put_bytes(key.as_bytes(), value).map_err(|e| format!("cannot store `{key}`: {e}"))
    }

    pub(crate) fn put_bytes(&self, key: &[u8], value: &[u8]) -> Result<(), GetError> {
        self.request(&[&[PUT], key, value]).map(|_| ())
    }

    /// The value of `key`, once some process has put it.
    pub fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>, String> {
        self.get_bytes(key.as_bytes(), timeout).map_err(|e| match e {
            GetError::Timeout => format!("no process put `{key}` within {} s", timeout.as_secs()),
            e => e.to_string(),
        })
    }

    pub(crate) fn get_bytes(&self, key: &[u8], timeout: Duration) -> Result<Vec<u8>, GetError> {
        let ms = (timeout.as_millis() as u64).to_le_bytes();
        let mut reply = self.request(&[&[GET], key, &ms])?;
        match reply.first().and_then(|r| r.first()) {
            Some(&OK) => Ok(reply.swap_remove(1)),
            Some(&FAILED) => Err(GetError::Failed(String::from_utf8_lossy(&reply[1]).into_owned())),
            _ => Err(GetError::Timeout),
        }
    }

    /// Forgets `key` (a large value read once).
    pub fn delete(&self, key: &str) -> Result<(), String> {
        self.request(&[&[DELETE], key.as_bytes()]).map(|_| ()).map_err(|e| e.to_string())
    }

    /// The value of `key` if it is there now.
    pub fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>, String> {
        let mut reply = self.request(&[&[TRY_GET], key.as_bytes()]).map_err(|e| e.to_string())?;
        Ok(match reply.first().and_then(|r| r.first()) {
            Some(&OK) => Some(reply.swap_remove(1)),
            _ => None,
        })
    }

    /// Waits until all `size` processes reach barrier `name`.
    pub fn barrier(&self, name: &str, rank: usize, size: usize, timeout: Duration) -> Result<(), String> {
        self.put(&format!("barrier/{name}/{rank}"), &[])?;
        for r in 0..size {
            self.get(&format!("barrier/{name}/{r}"), timeout)?;
        }
        Ok(())
    }

    /// Records what this process last did, for the message if it dies.
    pub fn note(&self, what: &str) {
        if let Some(s) = self.lifeline.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
            let _ = write_frame(s, &[&[NOTE], what.as_bytes()]);
        }
    }

    /// Watches the lifeline from a thread of its own: when the job fails (another process
    /// died) or the coordinator goes, prints why and exits the process with status 1,
    /// since the others can no longer finish their collectives.
    pub fn watch(&self, rank: usize, addr: &str) -> Result<(), String> {
        let mut s = match self.lifeline.lock().unwrap_or_else(PoisonError::into_inner).as_ref() {
            Some(s) => s.try_clone().map_err(|e| e.to_string())?,
            None => return Ok(()),
        };
        let addr = addr.to_string();
        let leaving = self.leaving.clone();
        std::thread::spawn(move || {
            let read = read_frame(&mut s);
            if leaving.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            let why = match read {
                Ok(parts) => parts.get(1).map(|w| String::from_utf8_lossy(w).into_owned()).unwrap_or_default(),
                Err(_) => format!("lost the coordinator at {addr} (process 0 died or was killed)"),
            };
            eprintln!("error: process {rank}: the job failed: {why}");
            std::process::exit(1);
        });
        Ok(())
    }

    /// From now on, losing the coordinator is no failure: this process is about to leave
    /// (and process 0 may leave first).
    pub fn leaving(&self) {
        self.leaving.store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Says goodbye: this process's end is not a failure. The lifeline closes.
    pub fn bye(&self) {
        self.leaving();
        if let Some(mut s) = self.lifeline.lock().unwrap_or_else(PoisonError::into_inner).take() {
            let _ = write_frame(&mut s, &[&[BYE]]);
            let _ = s.shutdown(std::net::Shutdown::Write);
        }
    }
}

/// This host's name, for messages.
fn hostname() -> String {
    rustix::system::uname().nodename().to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        serve(listener);
        addr
    }

    const SHORT: Duration = Duration::from_millis(200);

    #[test]
    fn keys_are_put_got_waited_for_and_deleted() {
        let addr = service();
        let (a, b) = (Coordinator::connect(&addr, 0, SHORT).unwrap(), Coordinator::connect(&addr, 1, SHORT).unwrap());
        assert_eq!(a.try_get("k").unwrap(), None);
        assert!(matches!(a.get_bytes(b"k", SHORT), Err(GetError::Timeout)));
        a.put("k", b"v").unwrap();
        assert_eq!(b.try_get("k").unwrap().as_deref(), Some(&b"v"[..]));
        // A get blocks until another process puts the key.
        std::thread::scope(|s| {
            let waiting = s.spawn(|| b.get("later", Duration::from_secs(10)));
            std::thread::sleep(SHORT);
            a.put("later", b"now").unwrap();
            assert_eq!(waiting.join().unwrap().unwrap(), b"now");
            let barrier = s.spawn(|| b.barrier("x", 1, 2, Duration::from_secs(10)));
            a.barrier("x", 0, 2, Duration::from_secs(10)).unwrap();
            barrier.join().unwrap().unwrap();
        });
        a.delete("k").unwrap();
        assert_eq!(b.try_get("k").unwrap(), None);
    }

    #[test]
    fn a_process_gone_without_goodbye_fails_every_wait_naming_it() {
        let addr = service();
        let (a, b, c) = (
            Coordinator::connect(&addr, 0, SHORT).unwrap(),
            Coordinator::connect(&addr, 1, SHORT).unwrap(),
            Coordinator::connect(&addr, 2, SHORT).unwrap(),
        );
        // Process 2 leaves properly: no failure.
        c.bye();
        b.note("trained to 640 env steps");
        drop(b);
        match a.get_bytes(b"never", Duration::from_secs(10)) {
            Err(GetError::Failed(why)) => {
                assert!(
                    why.starts_with("process 1 (on ") && why.ends_with("its last step: trained to 640 env steps"),
                    "{why}"
                )
            }
            other => panic!("{other:?}"),
        }
    }
}
