//! TensorBoard event files: every metric of every report as a scalar at its env steps, in
//! `events.out.tfevents.TIME.podc.PID` in the run directory, so that
//! `tensorboard --logdir runs` shows every run while it trains. A resumed run starts a new
//! file in the same directory; TensorBoard drops the old file's steps past the resumption.
//!
//! The file is TensorFlow's record format: per record, its length (u64, little-endian),
//! the length's masked CRC-32C, the bytes (an `Event` protocol buffer, encoded by prost),
//! and their masked CRC-32C. The first event names the format version, `brain.Event:2`.

use crc::{CRC_32_ISCSI, Crc};
use prost::Message;
use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

/// `tensorflow.Event`, the fields written here.
#[derive(Clone, PartialEq, prost::Message)]
struct Event {
    #[prost(double, tag = "1")]
    wall_time: f64,
    #[prost(int64, tag = "2")]
    step: i64,
    #[prost(oneof = "What", tags = "3, 5")]
    what: Option<What>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
enum What {
    #[prost(string, tag = "3")]
    FileVersion(String),
    #[prost(message, tag = "5")]
    Summary(Summary),
}

/// `tensorflow.Summary`: scalars only.
#[derive(Clone, PartialEq, prost::Message)]
struct Summary {
    #[prost(message, repeated, tag = "1")]
    value: Vec<Value>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Value {
    #[prost(string, tag = "1")]
    tag: String,
    #[prost(float, tag = "2")]
    simple_value: f32,
}

const CRC32C: Crc<u32> = Crc::<u32>::new(&CRC_32_ISCSI);

/// The CRC-32C of `data`, rotated and offset as TensorFlow's records store it.
fn masked_crc(data: &[u8]) -> u32 {
    let c = CRC32C.checksum(data);
    c.rotate_right(15).wrapping_add(0xa282_ead8)
}

pub struct EventWriter {
    file: File,
}

fn now() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64())
}

impl EventWriter {
    /// A new event file in `dir`.
    pub fn create(dir: &Path) -> io::Result<EventWriter> {
        let wall_time = now();
        let name = format!("events.out.tfevents.{}.podc.{}", wall_time as u64, std::process::id());
        let mut w = EventWriter { file: File::create(dir.join(name))? };
        w.write(&Event { wall_time, step: 0, what: Some(What::FileVersion("brain.Event:2".into())) })?;
        Ok(w)
    }

    /// One event of scalars at `step`, flushed.
    pub fn scalars(&mut self, step: u64, values: &[(String, f64)]) -> io::Result<()> {
        let value = values.iter().map(|(tag, v)| Value { tag: tag.clone(), simple_value: *v as f32 }).collect();
        self.write(&Event { wall_time: now(), step: step as i64, what: Some(What::Summary(Summary { value })) })
    }

    fn write(&mut self, e: &Event) -> io::Result<()> {
        let data = e.encode_to_vec();
        let len = (data.len() as u64).to_le_bytes();
        let mut record = Vec::with_capacity(data.len() + 16);
        record.extend(len);
        record.extend(masked_crc(&len).to_le_bytes());
        record.extend(&data);
        record.extend(masked_crc(&data).to_le_bytes());
        self.file.write_all(&record)?;
        self.file.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The records of an event file, their checksums checked.
    fn read(bytes: &[u8]) -> Vec<Event> {
        let mut out = vec![];
        let mut at = 0;
        while at < bytes.len() {
            let len: [u8; 8] = bytes[at..at + 8].try_into().unwrap();
            assert_eq!(u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap()), masked_crc(&len));
            let n = u64::from_le_bytes(len) as usize;
            let data = &bytes[at + 12..at + 12 + n];
            assert_eq!(u32::from_le_bytes(bytes[at + 12 + n..at + 16 + n].try_into().unwrap()), masked_crc(data));
            out.push(Event::decode(data).unwrap());
            at += 16 + n;
        }
        out
    }

    #[test]
    fn events_are_records_of_scalars_by_step() {
        // CRC-32C's check value (RFC 3720), and TensorFlow's masking of it.
        assert_eq!(CRC32C.checksum(b"123456789"), 0xE306_9283);
        assert_eq!(masked_crc(b"123456789"), 0xE306_9283u32.rotate_right(15).wrapping_add(0xa282_ead8));
        let dir = tempfile::tempdir().unwrap();
        let mut w = EventWriter::create(dir.path()).unwrap();
        w.scalars(512, &[("episode_return".into(), 0.5), ("loss".into(), -1.25)]).unwrap();
        let path = std::fs::read_dir(dir.path()).unwrap().next().unwrap().unwrap().path();
        assert!(path.file_name().unwrap().to_str().unwrap().starts_with("events.out.tfevents."));
        let events = read(&std::fs::read(path).unwrap());
        assert_eq!(events[0].what, Some(What::FileVersion("brain.Event:2".into())));
        let Some(What::Summary(s)) = &events[1].what else { panic!("a summary") };
        assert_eq!(events[1].step, 512);
        let tags: Vec<(&str, f32)> = s.value.iter().map(|v| (v.tag.as_str(), v.simple_value)).collect();
        assert_eq!(tags, [("episode_return", 0.5), ("loss", -1.25)]);
    }
}
