//! Captured program output: a bounded buffer addressed by byte offset, read
//! without draining, so any number of clients can follow it.

use std::{collections::VecDeque, sync::Mutex};

use stepd_proto::v1::{OutputChunk, ReadOutputResponse};

use crate::time::now_timestamp;

/// Output kept per session.
const CAPACITY_BYTES: usize = 1 << 20;

/// The output of one session.
#[derive(Debug, Default)]
pub struct OutputBuffer {
    chunks: VecDeque<OutputChunk>,
    bytes: usize,
    next_offset: u64,
    dropped: u64,
}

/// What a read returns.
pub struct Read {
    /// Chunks in order.
    pub chunks: Vec<OutputChunk>,
    /// Offset to read from next.
    pub next_offset: u64,
    /// Output before the first chunk was dropped.
    pub truncated: bool,
    /// Bytes dropped since the session began.
    pub dropped: u64,
}

/// Bytes a read returns when the client names no maximum.
const DEFAULT_READ_BYTES: usize = 64 * 1024;

/// A `ReadOutput` answer from a session's buffer.
pub fn read_response(
    buffer: &Mutex<OutputBuffer>,
    after: u64,
    max_bytes: u32,
    categories: &[String],
) -> ReadOutputResponse {
    let max = match max_bytes {
        0 => DEFAULT_READ_BYTES,
        n => n as usize,
    };
    let Read {
        chunks,
        next_offset,
        truncated,
        dropped,
    } = buffer
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .read(after, max, categories);
    ReadOutputResponse {
        chunks,
        next_offset,
        truncated,
        dropped_bytes: dropped,
    }
}

impl OutputBuffer {
    /// Appends text and returns the chunk as stored.
    pub fn push(&mut self, category: &str, text: &str) -> OutputChunk {
        let chunk = OutputChunk {
            offset: self.next_offset,
            category: category.to_owned(),
            text: text.to_owned(),
            time: Some(now_timestamp()),
        };
        self.next_offset += text.len() as u64;
        self.bytes += text.len();
        self.chunks.push_back(chunk.clone());
        while self.bytes > CAPACITY_BYTES {
            match self.chunks.pop_front() {
                Some(old) => {
                    self.bytes -= old.text.len();
                    self.dropped += old.text.len() as u64;
                }
                None => break,
            }
        }
        chunk
    }

    /// The offset the next chunk will have.
    pub fn end(&self) -> u64 {
        self.next_offset
    }

    /// Chunks at or after `after_offset`, at most `max_bytes` of text.
    pub fn read(&self, after_offset: u64, max_bytes: usize, categories: &[String]) -> Read {
        let first_kept = self.chunks.front().map_or(self.next_offset, |c| c.offset);
        let mut chunks = Vec::new();
        let mut size = 0;
        let mut next_offset = after_offset.max(first_kept);
        for chunk in &self.chunks {
            let end = chunk.offset + chunk.text.len() as u64;
            if end <= after_offset {
                continue;
            }
            if size > 0 && size + chunk.text.len() > max_bytes {
                break;
            }
            next_offset = end;
            if categories.is_empty() || categories.contains(&chunk.category) {
                size += chunk.text.len();
                chunks.push(chunk.clone());
            }
        }
        Read {
            chunks,
            next_offset,
            truncated: after_offset < first_kept,
            dropped: self.dropped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_from_offsets_without_draining() {
        let mut buf = OutputBuffer::default();
        buf.push("stdout", "hello\n");
        buf.push("stderr", "oops\n");
        let all = buf.read(0, 1024, &[]);
        assert_eq!(all.chunks.len(), 2);
        assert_eq!(all.next_offset, 11);
        let again = buf.read(0, 1024, &["stderr".into()]);
        assert_eq!(again.chunks[0].text, "oops\n");
        let later = buf.read(6, 1024, &[]);
        assert_eq!(later.chunks.len(), 1);
        assert!(!later.truncated);
    }

    #[test]
    fn drops_the_oldest_beyond_capacity_and_says_so() {
        let mut buf = OutputBuffer::default();
        let big = "x".repeat(CAPACITY_BYTES / 2 + 1);
        buf.push("stdout", &big);
        buf.push("stdout", &big);
        let read = buf.read(0, usize::MAX, &[]);
        assert!(read.truncated);
        assert_eq!(read.dropped, big.len() as u64);
        assert_eq!(read.chunks.len(), 1);
    }
}
