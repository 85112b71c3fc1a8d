//! What Subscribe streams hold for their clients, bounded per stream
//! (`--subscriber-buffer-bytes`, checked by the stream itself) and for the
//! daemon (`--subscriber-bytes-total`, here).
//!
//! The daemon counts the encoded messages alive on the streams' way out,
//! each once however many streams hold it (an event is encoded once and
//! shared), and an entry per queued message. Each stream counts what it
//! holds, shared or not: its queue, and what it handed to its HTTP/2 stream
//! that has not been written out yet (each handed message carries a guard
//! that gives its bytes back when HTTP/2 lets go of it). Over the daemon's
//! bound, the stream holding the most that is still queued is told to end.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, Weak,
        atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering},
    },
    time::Duration,
};

use bytes::Bytes;
use stepd_proto::v1::Event;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::slots::Slot;

/// What one queued message costs beside its encoding: its slot in the
/// queue and the counters it carries.
pub const QUEUE_ENTRY: usize = 64;

/// A drop of the daemon's count by this much (or to half its peak) after a
/// rise asks the allocator to give freed memory back.
const TRIM_STEP: usize = 1 << 20;

/// So many streams open, then half of them closed, also asks for a trim.
const TRIM_STREAMS: usize = 16;

/// Waited after such a drop before trimming, so a burst of streams closing
/// is trimmed once.
const TRIM_DELAY: Duration = Duration::from_millis(250);

/// One trim at a time in the process.
static TRIMMING: AtomicBool = AtomicBool::new(false);

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

    /// Never true: a framed message holds at least its 5-byte prefix.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
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

/// The daemon's account of what its Subscribe streams hold.
#[derive(Debug)]
pub struct SubscriberMemory {
    limit: usize,
    held: AtomicUsize,
    /// Most `held` since the allocator was last trimmed.
    peak: AtomicUsize,
    /// What the streams told to end are expected to let go of: counted as
    /// gone, so one overflow does not end a stream per message until then.
    releasing: AtomicUsize,
    /// After a scan that found no stream to end, the next waits until
    /// `held` passes this.
    next_scan: AtomicUsize,
    streams: Mutex<HashMap<u64, Weak<StreamMemory>>>,
    /// Most streams open at once since the allocator was last trimmed: their
    /// connections' buffers are memory this account does not count.
    streams_peak: AtomicUsize,
    next_id: AtomicU64,
}

impl SubscriberMemory {
    /// An account bounded at `limit` bytes.
    pub fn new(limit: usize) -> Arc<Self> {
        Arc::new(Self {
            limit,
            held: AtomicUsize::new(0),
            peak: AtomicUsize::new(0),
            releasing: AtomicUsize::new(0),
            next_scan: AtomicUsize::new(0),
            streams: Mutex::default(),
            streams_peak: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
        })
    }

    /// The bound, in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    pub(super) fn charge(&self, bytes: usize) {
        let now = self.held.fetch_add(bytes, Ordering::Relaxed) + bytes;
        self.peak.fetch_max(now, Ordering::Relaxed);
    }

    pub(super) fn release(self: &Arc<Self>, bytes: usize) {
        let now = self.held.fetch_sub(bytes, Ordering::Relaxed) - bytes;
        let peak = self.peak.load(Ordering::Relaxed);
        let fallen = peak.saturating_sub(now);
        if fallen >= TRIM_STEP && (now <= peak / 2 || fallen >= 8 * TRIM_STEP) {
            self.trim();
        }
    }

    /// Asks the allocator to return freed memory to the system, once the
    /// burst of releases that set it off is over. glibc keeps in its arenas
    /// what a burst of large messages freed: before, 100 streams that had
    /// held 1.6 GB left the daemon at that size after they closed.
    fn trim(self: &Arc<Self>) {
        if TRIMMING.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            TRIMMING.store(false, Ordering::Release);
            return;
        };
        let memory = self.clone();
        runtime.spawn(async move {
            tokio::time::sleep(TRIM_DELAY).await;
            let _ = tokio::task::spawn_blocking(|| {
                #[cfg(all(target_os = "linux", target_env = "gnu"))]
                // SAFETY: malloc_trim only gives free pages of the heap back.
                unsafe {
                    libc::malloc_trim(0);
                }
            })
            .await;
            // The next trim waits for another rise and fall from here.
            memory.peak.store(memory.held(), Ordering::Relaxed);
            let open = memory.lock().len();
            memory.streams_peak.store(open, Ordering::Relaxed);
            TRIMMING.store(false, Ordering::Release);
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Weak<StreamMemory>>> {
        self.streams.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The account of a new stream, which holds `slot` until the stream and
    /// everything it handed to HTTP/2 are gone.
    pub fn stream(self: &Arc<Self>, slot: Slot) -> Arc<StreamMemory> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let stream = Arc::new(StreamMemory {
            id,
            daemon: self.clone(),
            queued: AtomicUsize::new(0),
            transport: AtomicUsize::new(0),
            releasing: AtomicUsize::new(0),
            evicted: CancellationToken::new(),
            drained: Notify::new(),
            _slot: slot,
        });
        let open = {
            let mut streams = self.lock();
            streams.insert(id, Arc::downgrade(&stream));
            streams.len()
        };
        self.streams_peak.fetch_max(open, Ordering::Relaxed);
        stream
    }

    /// Over the bound: tells the stream holding the most that is still
    /// queued (so ending it frees something) to end.
    pub fn enforce(&self) {
        let held = self.held();
        if held.saturating_sub(self.releasing.load(Ordering::Relaxed)) <= self.limit
            || held < self.next_scan.load(Ordering::Relaxed)
        {
            return;
        }
        // Taken out of the lock: a stream dropped here unregisters itself.
        let streams: Vec<Arc<StreamMemory>> =
            self.lock().values().filter_map(Weak::upgrade).collect();
        let victim = streams
            .iter()
            .filter(|s| !s.evicted.is_cancelled() && s.queued() > 0)
            .max_by_key(|s| s.held());
        match victim {
            Some(stream) => {
                let freeing = stream.queued();
                stream.releasing.store(freeing, Ordering::Relaxed);
                self.releasing.fetch_add(freeing, Ordering::Relaxed);
                self.next_scan.store(0, Ordering::Relaxed);
                stream.evicted.cancel();
            }
            None => self
                .next_scan
                .store(held + self.limit / 16 + 1, Ordering::Relaxed),
        }
    }
}

/// What one Subscribe stream holds for its client.
#[derive(Debug)]
pub struct StreamMemory {
    id: u64,
    daemon: Arc<SubscriberMemory>,
    /// Bytes of the messages in its queue, [`QUEUE_ENTRY`] each included.
    queued: AtomicUsize,
    /// Bytes of the messages handed to its HTTP/2 stream and not yet
    /// written out.
    transport: AtomicUsize,
    /// Counted by the daemon as about to be let go of.
    releasing: AtomicUsize,
    evicted: CancellationToken,
    /// Told when HTTP/2 lets go of a message.
    drained: Notify,
    _slot: Slot,
}

impl StreamMemory {
    /// The daemon's account.
    pub fn daemon(&self) -> &Arc<SubscriberMemory> {
        &self.daemon
    }

    /// Bytes queued.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Bytes handed to HTTP/2 and not yet written out.
    pub fn transport(&self) -> usize {
        self.transport.load(Ordering::Acquire)
    }

    /// Everything held.
    pub fn held(&self) -> usize {
        self.queued() + self.transport()
    }

    /// Counts a message of `bytes` put in the queue, until the charge is
    /// dropped.
    pub fn queue(self: &Arc<Self>, bytes: usize) -> Charge {
        let bytes = bytes + QUEUE_ENTRY;
        self.queued.fetch_add(bytes, Ordering::Relaxed);
        self.daemon.charge(QUEUE_ENTRY);
        Charge {
            stream: self.clone(),
            bytes,
        }
    }

    /// The message as a body chunk for HTTP/2, counted until it lets go.
    pub fn hand(self: &Arc<Self>, wire: Arc<Wire>) -> Bytes {
        self.transport.fetch_add(wire.len(), Ordering::AcqRel);
        Bytes::from_owner(Handed {
            wire,
            stream: self.clone(),
        })
    }

    /// Waits until less than `window` bytes are in the HTTP/2 stream.
    pub async fn room(&self, window: usize) {
        loop {
            let drained = self.drained.notified();
            if self.transport() < window {
                return;
            }
            drained.await;
        }
    }

    /// Completes when the daemon's bound tells this stream to end.
    pub async fn evicted(&self) {
        self.evicted.cancelled().await;
    }

    /// The stream no longer queues anything: what the daemon counted as
    /// about to go is gone. When it was told to end, what it let go of may
    /// not be enough (streams share messages), so the daemon looks again
    /// at once rather than when a stream next has something to do.
    pub fn let_go(&self) {
        let releasing = self.releasing.swap(0, Ordering::Relaxed);
        if releasing > 0 {
            self.daemon
                .releasing
                .fetch_sub(releasing, Ordering::Relaxed);
            self.daemon.enforce();
        }
    }
}

impl Drop for StreamMemory {
    fn drop(&mut self) {
        self.let_go();
        let open = {
            let mut streams = self.daemon.lock();
            streams.remove(&self.id);
            streams.len()
        };
        // Many streams closing free their connections' buffers too.
        let peak = self.daemon.streams_peak.load(Ordering::Relaxed);
        if peak >= TRIM_STREAMS && open <= peak / 2 {
            self.daemon.trim();
        }
    }
}

/// A queued message's share of its stream's and the daemon's counts.
#[derive(Debug)]
pub struct Charge {
    stream: Arc<StreamMemory>,
    bytes: usize,
}

impl Charge {
    /// Bytes counted for the stream.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.stream.queued.fetch_sub(self.bytes, Ordering::Relaxed);
        self.stream.daemon.release(QUEUE_ENTRY);
    }
}

/// A message in HTTP/2's hands: the shared encoding, and the stream whose
/// transport count it gives back when HTTP/2 drops it.
struct Handed {
    wire: Arc<Wire>,
    stream: Arc<StreamMemory>,
}

impl AsRef<[u8]> for Handed {
    fn as_ref(&self) -> &[u8] {
        self.wire.bytes()
    }
}

impl Drop for Handed {
    fn drop(&mut self) {
        self.stream
            .transport
            .fetch_sub(self.wire.len(), Ordering::AcqRel);
        self.stream.drained.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use stepd_proto::v1::{Event, Notification, event::Payload};

    use super::*;
    use crate::slots::Slots;

    fn wire(memory: &Arc<SubscriberMemory>, bytes: usize) -> Arc<Wire> {
        Arc::new(Wire::encode(
            &Event {
                payload: Some(Payload::Notification(Notification {
                    message: "x".repeat(bytes),
                    ..Default::default()
                })),
                ..Default::default()
            },
            memory,
        ))
    }

    fn stream(memory: &Arc<SubscriberMemory>) -> Arc<StreamMemory> {
        memory.stream(Slots::unlimited("test").take("t").unwrap())
    }

    fn notification(bytes: usize) -> Event {
        Event {
            seq: 7,
            session_id: "s".into(),
            time: None,
            payload: Some(stepd_proto::v1::event::Payload::Notification(
                stepd_proto::v1::Notification {
                    message: "x".repeat(bytes),
                    ..Default::default()
                },
            )),
        }
    }

    #[test]
    fn a_wire_is_a_grpc_message_of_the_response() {
        let memory = SubscriberMemory::new(usize::MAX);
        let event = notification(100_000);
        let wire = Wire::encode(&event, &memory);
        let bytes = wire.bytes();
        assert_eq!(bytes[0], 0, "not compressed");
        let len = u32::from_be_bytes(bytes[1..5].try_into().unwrap()) as usize;
        assert_eq!(len, bytes.len() - 5);
        assert_eq!(wire.message_len(), len);
        let response =
            <stepd_proto::v1::SubscribeResponse as prost::Message>::decode(&bytes[5..]).unwrap();
        assert_eq!(response.event.as_ref(), Some(&event));
    }

    #[test]
    fn a_handed_message_counts_until_http2_drops_it() {
        let memory = SubscriberMemory::new(usize::MAX);
        let stream = stream(&memory);
        let message = wire(&memory, 1_000);
        let len = message.len();
        let charge = stream.queue(len);
        assert_eq!(stream.queued(), len + QUEUE_ENTRY);
        assert_eq!(memory.held(), len + QUEUE_ENTRY);
        let chunk = stream.hand(message);
        drop(charge);
        assert_eq!((stream.queued(), stream.transport()), (0, len));
        assert_eq!(memory.held(), len, "the encoding lives in the chunk");
        let part = chunk.slice(10..);
        drop(chunk);
        assert_eq!(stream.transport(), len, "a slice still holds it");
        drop(part);
        assert_eq!((stream.transport(), memory.held()), (0, 0));
    }

    #[test]
    fn over_the_bound_the_stream_holding_the_most_queued_is_told_to_end() {
        let memory = SubscriberMemory::new(10_000);
        let (small, large, sending) = (stream(&memory), stream(&memory), stream(&memory));
        let shared = wire(&memory, 4_000);
        let _a = small.queue(shared.len());
        let b = large.queue(shared.len());
        let own = wire(&memory, 4_000);
        let c = large.queue(own.len());
        // Much handed to HTTP/2 and nothing queued: ending it frees nothing.
        let _chunk = sending.hand(wire(&memory, 4_000));
        assert!(memory.held() < 14_000, "the shared message counts once");
        memory.enforce();
        assert!(large.evicted.is_cancelled());
        assert!(!small.evicted.is_cancelled() && !sending.evicted.is_cancelled());
        // Until the ended stream lets go, its queue counts as gone.
        memory.enforce();
        assert!(!small.evicted.is_cancelled());
        drop((b, c, own));
        large.let_go();
        assert_eq!(memory.releasing.load(Ordering::Relaxed), 0);
        assert!(!small.evicted.is_cancelled(), "back under the bound");
    }

    #[test]
    fn a_message_shared_over_the_bound_ends_every_stream_holding_it() {
        let memory = SubscriberMemory::new(5_000);
        let (a, b) = (stream(&memory), stream(&memory));
        let shared = wire(&memory, 6_000);
        // Each queue holds the message (here: `shared`) and its charge.
        let mut charges = vec![Some(a.queue(shared.len())), Some(b.queue(shared.len()))];
        memory.enforce();
        let first = usize::from(!a.evicted.is_cancelled());
        assert!([&a, &b][first].evicted.is_cancelled());
        assert!(!([&a, &b][1 - first]).evicted.is_cancelled());
        // The first lets go, but the other still holds the message: it is
        // ended in turn, without waiting for anything else to happen.
        charges[first] = None;
        [&a, &b][first].let_go();
        assert!([&a, &b][1 - first].evicted.is_cancelled());
        charges.clear();
        drop(shared);
        [&a, &b][1 - first].let_go();
        assert_eq!(memory.held(), 0);
    }

    #[test]
    fn a_stream_holds_its_slot_until_http2_let_go_of_it() {
        let memory = SubscriberMemory::new(usize::MAX);
        let slots = Slots::unlimited("test");
        let stream = memory.stream(slots.take("t").unwrap());
        let chunk = stream.hand(wire(&memory, 10));
        drop(stream);
        assert_eq!(slots.total(), 1);
        assert_eq!(memory.lock().len(), 1);
        drop(chunk);
        assert_eq!(slots.total(), 0);
        assert!(memory.lock().is_empty());
    }
}
