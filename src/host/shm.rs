//! Shared memory between podc and one worker process: an anonymous `memfd` (no `/dev/shm`,
//! which is often 64 MB in containers), mapped here and by the worker (the fd is the
//! worker's stdin).
//!
//! The only `unsafe` of the host layer. The mapping is owned by [`Shm`] for its whole
//! life, so the slices never dangle. The worker process writes to it only between a
//! command and its answer, which the types cannot see: `worker::Worker` borrows the
//! bytes only while no command of its own is pending (it checks, and a command whose
//! answer never came stays pending until the worker is killed and reaped). One `Shm`
//! serves one worker.

#![allow(unsafe_code)]

use rustix::fd::OwnedFd;
use rustix::fs::{MemfdFlags, ftruncate, memfd_create};
use rustix::mm::{MapFlags, ProtFlags, mmap, munmap};
use std::ptr::NonNull;

pub struct Shm {
    fd: OwnedFd,
    ptr: NonNull<u8>,
    len: usize,
}

// The mapping is plain memory owned by this value; moving it to another thread is fine.
unsafe impl Send for Shm {}

impl Shm {
    /// An empty memfd (close-on-exec: only the worker it is handed to gets it).
    pub fn create(name: &str) -> std::io::Result<Shm> {
        let fd = memfd_create(name, MemfdFlags::CLOEXEC)?;
        Ok(Shm { fd, ptr: NonNull::dangling(), len: 0 })
    }

    /// A duplicate of the fd, for the worker's stdin.
    pub fn fd(&self) -> std::io::Result<OwnedFd> {
        self.fd.try_clone()
    }

    /// Sizes the memory and maps it (once, before the worker maps it).
    pub fn map(&mut self, len: usize) -> std::io::Result<()> {
        if self.len != 0 || len == 0 {
            return Err(std::io::Error::other("the shared memory is mapped once, with a positive size"));
        }
        ftruncate(&self.fd, len as u64)?;
        // SAFETY: a fresh shared mapping of a file we own, `len` bytes, unmapped in Drop.
        let p = unsafe {
            mmap(std::ptr::null_mut(), len, ProtFlags::READ | ProtFlags::WRITE, MapFlags::SHARED, &self.fd, 0)?
        };
        self.ptr = NonNull::new(p.cast()).ok_or_else(|| std::io::Error::other("mmap returned null"))?;
        self.len = len;
        Ok(())
    }

    pub fn bytes(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: `ptr` maps `len` bytes for as long as `self` lives (see the module doc
        // for why the worker does not write while this borrow exists).
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn bytes_mut(&mut self) -> &mut [u8] {
        if self.len == 0 {
            return &mut [];
        }
        // SAFETY: as in `bytes`, and `&mut self` makes this the only borrow on our side.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }
}

impl Drop for Shm {
    fn drop(&mut self) {
        if self.len != 0 {
            // SAFETY: the mapping made in `map`; no borrow outlives `self`.
            // Nothing useful can be done if munmap fails.
            let _ = unsafe { munmap(self.ptr.as_ptr().cast(), self.len) };
        }
    }
}
