//! Events as the bus publishes them: numbered, kept in the rings, handed to
//! every live receiver, and encoded for Subscribe streams once, on first
//! need (see `memory::Wire`).

use std::{
    ops::Deref,
    sync::{Arc, Mutex, Weak},
};

use prost::Message as _;
use stepd_proto::v1::Event;

use super::memory::{SubscriberMemory, Wire};

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
    use stepd_proto::v1::{Notification, event::Payload};

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
