//! podracer's own binding of the PJRT C API: the subset it needs to create a client,
//! compile StableHLO text, move arrays to and from devices and execute.
//!
//! `ffi` holds the C layouts and every `unsafe` block; `client` and `buffer` are the safe
//! API on top. The crates.io `pjrt` crate is built for API 0.54, which current
//! plugins (0.106 CPU, 0.115 CUDA) reject, hence this binding.

mod buffer;
mod client;
#[allow(unsafe_code)]
mod ffi;

pub use buffer::Buffer;
pub use client::{ApiVersion, Client, ClientOptions, Device, Executable, XlaOption};
pub(crate) use ffi::{library_loads, preload};
