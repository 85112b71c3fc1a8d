//! Events as Subscribe streams send them: encoded once, as a whole gRPC
//! message, and shared by every stream that holds the event at the time,
//! down to the HTTP/2 frames (no stream copies or re-encodes it).

use std::{
    ops::Deref,
    sync::{Arc, Mutex, Weak},
};

use prost::Message as _;
use stepd_proto::v1::Event;

use super::memory::SubscriberMemory;

/// Bytes before a gRPC message: a compression flag and a big-endian length.
const GRPC_PREFIX: usize = 5;

/// One message of a Subscribe response, encoded: the gRPC prefix and a
/// `SubscribeResponse` holding the event. While it lives its bytes count
/// toward the daemon's subscriber memory, once however many streams hold it.
#[derive(Debug)]
pub struct Wire {
    bytes: Vec<u8>,
    memory: Arc<SubscriberMemory>,
}

impl Wire {
    /// Encodes `event` as the one field of a `SubscribeResponse`.
    pub fn encode(event: &Event, memory: &Arc<SubscriberMemory>) -> Self {
        // `SubscribeResponse { event = 1 }`, written around the borrowed event
        // rather than cloning it into a response.
        let len = prost::encoding::message::encoded_len(1, event);
        let mut bytes = Vec::with_capacity(GRPC_PREFIX + len);
        bytes.push(0);
        // A message over 4 GiB cannot be framed; the stream refuses anything
        // over --max-message-bytes before it is sent (see `message_len`).
        bytes.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_be_bytes());
        prost::encoding::message::encode(1, event, &mut bytes);
        memory.charge(bytes.len());
        Self {
            bytes,
            memory: memory.clone(),
        }
    }

    /// The whole gRPC message, prefix included.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Bytes it holds.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Length of the protobuf message alone (what `--max-message-bytes`
    /// bounds).
    pub fn message_len(&self) -> usize {
        self.bytes.len() - GRPC_PREFIX
    }
}

impl Drop for Wire {
    fn drop(&mut self) {
        self.memory.release(self.bytes.len());
    }
}

/// A numbered event as the bus publishes it: kept in its session's ring,
/// handed to every live receiver, and encoded for Subscribe streams on first
/// need. The encoding is kept only while some stream holds it, so the rings
/// do not hold every event twice.
#[derive(Debug)]
pub struct Published {
    event: Event,
    encoded_len: usize,
    /// Bytes the bus had published through this event (encoded sizes): how
    /// far behind the live buffer a receiver is, in memory.
    offset: u64,
    wire: Mutex<Weak<Wire>>,
}

impl Published {
    /// Wraps a numbered event.
    pub fn new(event: Event) -> Self {
        Self {
            encoded_len: event.encoded_len(),
            event,
            offset: 0,
            wire: Mutex::new(Weak::new()),
        }
    }

    /// The same, published after `before` bytes of events.
    pub(super) fn after(event: Event, before: u64) -> Self {
        let mut published = Self::new(event);
        published.offset = before + published.encoded_len as u64;
        published
    }

    /// The event's encoded size, measured once.
    pub fn encoded_len(&self) -> usize {
        self.encoded_len
    }

    /// Bytes of events the bus had published through this one (0 for an
    /// event the bus did not publish).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The event's encoding: the one a stream already holds, else made now.
    /// Streams taking the event at once wait for the first to encode it.
    pub fn wire(&self, memory: &Arc<SubscriberMemory>) -> Arc<Wire> {
        let mut cached = self.wire.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(wire) = cached.upgrade() {
            return wire;
        }
        let wire = Arc::new(Wire::encode(&self.event, memory));
        *cached = Arc::downgrade(&wire);
        wire
    }
}

impl Deref for Published {
    type Target = Event;

    fn deref(&self) -> &Event {
        &self.event
    }
}

#[cfg(test)]
mod tests {
    use stepd_proto::v1::{Notification, SubscribeResponse, event::Payload};

    use super::*;

    fn event(bytes: usize) -> Event {
        Event {
            seq: 7,
            session_id: "s".into(),
            time: None,
            payload: Some(Payload::Notification(Notification {
                message: "x".repeat(bytes),
                ..Default::default()
            })),
        }
    }

    #[test]
    fn a_wire_is_a_grpc_message_of_the_response() {
        let memory = SubscriberMemory::new(usize::MAX);
        let event = event(100_000);
        let wire = Wire::encode(&event, &memory);
        let bytes = wire.bytes();
        assert_eq!(bytes[0], 0, "not compressed");
        let len = u32::from_be_bytes(bytes[1..5].try_into().unwrap()) as usize;
        assert_eq!(len, bytes.len() - 5);
        assert_eq!(wire.message_len(), len);
        let response = SubscribeResponse::decode(&bytes[5..]).unwrap();
        assert_eq!(response.event.as_ref(), Some(&event));
    }

    #[test]
    fn streams_share_one_encoding_while_any_holds_it() {
        let memory = SubscriberMemory::new(usize::MAX);
        let published = Published::new(event(1_000));
        let first = published.wire(&memory);
        let second = published.wire(&memory);
        assert!(Arc::ptr_eq(&first, &second), "encoded once");
        assert_eq!(memory.held(), first.len(), "counted once");
        drop((first, second));
        assert_eq!(memory.held(), 0, "let go with the last stream");
        let again = published.wire(&memory);
        assert_eq!(memory.held(), again.len());
    }
}
