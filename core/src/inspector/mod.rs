//! The server-side inspector (design §7): navigation over one value, kept on
//! the server so a client never downloads more than a page.
//!
//! - `value`: the [`value::Node`] abstraction every value implements; the
//!   sessions build nodes over their values (DAP variables in
//!   `dap_session`), so the inspector never reaches back into them;
//! - `json_source`: `google.protobuf.Value` trees (probe values);
//! - `state`: one inspector's stack of levels and its navigation;
//! - `render`, `analytics`, `settings`: what an answer shows.
//!
//! [`Inspectors`] is the daemon's registry: ids, expiry after inactivity, a
//! cap, and the values emitted by Tap (kept so a later Inspect can open them).

pub mod analytics;
pub mod json_source;
mod redacted;
pub mod render;
pub mod settings;
pub mod state;
pub mod value;

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use stepd_proto::v1::{DisplayValue, ErrorReason, InspectorConfig, Rendering, Tap, event::Payload};
use tokio::sync::Mutex as AsyncMutex;

use state::Inspector;
use value::Node;

use crate::{
    error::{ApiError, ApiResult},
    events::EventBus,
};

/// Tapped values kept for `InspectSource.tap_seq`.
const TAPS_KEPT: usize = 256;
/// Longest printed value in a `tap` event.
const TAP_DISPLAY_LIMIT: usize = 200;

struct Slot {
    inspector: Arc<AsyncMutex<Inspector>>,
    last_used: Instant,
    /// What the opener holds while the inspector lives (its share of a
    /// per-identity cap); dropped with the slot.
    _held: Option<Held>,
}

/// A guard kept as long as an inspector lives.
pub type Held = Box<dyn std::any::Any + Send + Sync>;

struct Tapped {
    seq: u64,
    session_id: String,
    node: Arc<dyn Node>,
}

#[derive(Default)]
struct Inner {
    slots: HashMap<String, Slot>,
    taps: VecDeque<Tapped>,
}

/// Every inspector of the daemon.
pub struct Inspectors {
    idle: Duration,
    max: usize,
    bus: Arc<EventBus>,
    /// Masks secrets in everything an inspector shows.
    redactor: Arc<crate::redact::Redactor>,
    inner: Mutex<Inner>,
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(
        ErrorReason::InspectorNotFound,
        format!(
            "no inspector {}: it never existed, was cleared, or expired after inactivity",
            crate::error::quote(id)
        ),
    )
    .with("inspector_id", crate::error::clip(id))
}

impl Inspectors {
    /// A registry whose inspectors expire after `idle` without calls, at most
    /// `max` at once.
    pub fn new(bus: Arc<EventBus>, idle: Duration, max: usize) -> Self {
        Self {
            idle,
            max,
            bus,
            redactor: Arc::default(),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// The same registry, masking what `redactor` masks.
    pub fn with_redactor(mut self, redactor: Arc<crate::redact::Redactor>) -> Self {
        self.redactor = redactor;
        self
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn sweep(&self, inner: &mut Inner, now: Instant) {
        let idle = self.idle;
        inner
            .slots
            .retain(|_, s| now.saturating_duration_since(s.last_used) < idle);
    }

    fn check_room(&self, inner: &mut Inner, now: Instant) -> ApiResult<()> {
        self.sweep(inner, now);
        if inner.slots.len() >= self.max {
            return Err(ApiError::new(
                ErrorReason::LimitExceeded,
                format!(
                    "{} inspectors are open, the configured maximum; Clear some or let them expire",
                    self.max
                ),
            )
            .with("limit", "max_inspectors")
            .with("max", self.max.to_string()));
        }
        Ok(())
    }

    /// Live inspectors.
    pub fn count(&self) -> usize {
        let mut inner = self.lock();
        self.sweep(&mut inner, Instant::now());
        inner.slots.len()
    }

    /// Opens a new inspector over `root` and renders it.
    pub async fn open(
        &self,
        session_id: String,
        root: Arc<dyn Node>,
        config: Option<&InspectorConfig>,
    ) -> ApiResult<Rendering> {
        self.open_at(session_id, root, config, Instant::now(), None)
            .await
    }

    /// As [`Inspectors::open`], keeping `held` until the inspector is
    /// cleared or expires.
    pub async fn open_held<H: Send + Sync + 'static>(
        &self,
        session_id: String,
        root: Arc<dyn Node>,
        config: Option<&InspectorConfig>,
        held: Option<H>,
    ) -> ApiResult<Rendering> {
        let held = held.map(|h| Box::new(h) as Held);
        self.open_at(session_id, root, config, Instant::now(), held)
            .await
    }

    async fn open_at(
        &self,
        session_id: String,
        root: Arc<dyn Node>,
        config: Option<&InspectorConfig>,
        now: Instant,
        held: Option<Held>,
    ) -> ApiResult<Rendering> {
        self.check_room(&mut self.lock(), now)?;
        let mut settings = settings::Settings::default();
        let view = match config {
            Some(c) => settings.apply(c)?,
            None => None,
        };
        let id = new_id(self.bus.instance_id());
        let root = redacted::wrap(root, &self.redactor);
        let mut inspector = Inspector::new(id.clone(), session_id, root, settings);
        if let Some(view) = view {
            inspector.set_view(view)?;
        }
        let rendering = inspector.render().await?;
        let mut inner = self.lock();
        self.check_room(&mut inner, now)?;
        inner.slots.insert(
            id,
            Slot {
                inspector: Arc::new(AsyncMutex::new(inspector)),
                last_used: now,
                _held: held,
            },
        );
        Ok(rendering)
    }

    /// An inspector by id; the call counts as activity.
    pub fn get(&self, id: &str) -> ApiResult<Arc<AsyncMutex<Inspector>>> {
        self.get_at(id, Instant::now())
    }

    fn get_at(&self, id: &str, now: Instant) -> ApiResult<Arc<AsyncMutex<Inspector>>> {
        if id.is_empty() {
            return Err(ApiError::invalid_field(
                "inspector_id",
                "an inspector id is required",
            ));
        }
        let mut inner = self.lock();
        self.sweep(&mut inner, now);
        let slot = inner.slots.get_mut(id).ok_or_else(|| not_found(id))?;
        slot.last_used = now;
        Ok(slot.inspector.clone())
    }

    /// Drops an inspector.
    pub fn clear(&self, id: &str) -> ApiResult<()> {
        let mut inner = self.lock();
        self.sweep(&mut inner, Instant::now());
        inner
            .slots
            .remove(id)
            .map(|_| ())
            .ok_or_else(|| not_found(id))
    }

    /// Emits a `tap` event for `node` and keeps it for `InspectSource.tap_seq`.
    pub fn tap(&self, inspector: &Inspector, node: Arc<dyn Node>, path: String) -> u64 {
        let text = node.repr(&inspector.settings().limits());
        let shown = render::cut(&text, TAP_DISPLAY_LIMIT as u32);
        let event = self.bus.publish(
            &inspector.session_id,
            Payload::Tap(Tap {
                inspector_id: inspector.id.clone(),
                path,
                value: Some(DisplayValue {
                    truncated: shown != text,
                    text: shown,
                    r#type: node.type_name(),
                }),
            }),
        );
        let mut inner = self.lock();
        if inner.taps.len() >= TAPS_KEPT {
            inner.taps.pop_front();
        }
        inner.taps.push_back(Tapped {
            seq: event.seq,
            session_id: inspector.session_id.clone(),
            node,
        });
        event.seq
    }

    /// A tapped value by the seq of its `tap` event.
    pub fn tapped(&self, seq: u64) -> ApiResult<(String, Arc<dyn Node>)> {
        self.lock()
            .taps
            .iter()
            .find(|t| t.seq == seq)
            .map(|t| (t.session_id.clone(), t.node.clone()))
            .ok_or_else(|| {
                ApiError::invalid_field(
                    "source.tap_seq",
                    format!("no tapped value with seq {seq} (the last {TAPS_KEPT} taps are kept)"),
                )
            })
    }
}

/// Splits printed text into chunks of at most `size` bytes, on character
/// boundaries; always at least one chunk.
pub fn chunks(text: &str, size: usize) -> Vec<String> {
    let size = size.max(4);
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = size.min(rest.len());
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        out.push(rest[..end].to_owned());
        rest = &rest[end..];
    }
    if out.is_empty() {
        out.push(String::new());
    }
    out
}

/// A fresh inspector id, `i-<daemon>.<unique>`: it names the daemon (the
/// replica, in a cluster) that holds the inspector, so a call about it
/// reaching another replica can be sent there without a lookup.
fn new_id(instance_id: &str) -> String {
    format!(
        "i-{}.{}",
        instance_id.replace('-', ""),
        uuid::Uuid::now_v7().simple()
    )
}

/// The daemon an inspector id names (its instance id without dashes).
pub fn holder_of(inspector_id: &str) -> Option<&str> {
    inspector_id
        .strip_prefix("i-")?
        .split_once('.')
        .map(|(holder, _)| holder)
}

#[cfg(test)]
mod tests {
    use super::*;
    use json_source::JsonNode;

    fn registry(idle: Duration, max: usize) -> Inspectors {
        Inspectors::new(Arc::new(EventBus::new("test".into(), 1, 16, 16)), idle, max)
    }

    fn node() -> Arc<dyn Node> {
        Arc::new(JsonNode::new(crate::json::to_value(&serde_json::json!([
            1, 2, 3
        ]))))
    }

    #[tokio::test]
    async fn inspectors_expire_after_inactivity() {
        let r = registry(Duration::from_secs(60), 8);
        let t0 = Instant::now();
        let id = r
            .open_at(String::new(), node(), None, t0, None)
            .await
            .unwrap()
            .inspector_id;
        // Activity keeps it alive past the first minute.
        r.get_at(&id, t0 + Duration::from_secs(50)).unwrap();
        r.get_at(&id, t0 + Duration::from_secs(100)).unwrap();
        let err = r.get_at(&id, t0 + Duration::from_secs(161)).unwrap_err();
        assert_eq!(err.reason(), ErrorReason::InspectorNotFound);
        assert_eq!(
            r.get("i-nonexistent").unwrap_err().reason(),
            ErrorReason::InspectorNotFound
        );
    }

    #[tokio::test]
    async fn the_cap_counts_live_inspectors_only() {
        let r = registry(Duration::from_secs(60), 2);
        let t0 = Instant::now();
        let first = r
            .open_at(String::new(), node(), None, t0, None)
            .await
            .unwrap();
        r.open_at(String::new(), node(), None, t0, None)
            .await
            .unwrap();
        let err = r
            .open_at(String::new(), node(), None, t0, None)
            .await
            .unwrap_err();
        assert_eq!(err.reason(), ErrorReason::LimitExceeded);
        r.clear(&first.inspector_id).unwrap();
        r.open_at(String::new(), node(), None, t0, None)
            .await
            .unwrap();
        // Once the others expire there is room again.
        r.open_at(
            String::new(),
            node(),
            None,
            t0 + Duration::from_secs(61),
            None,
        )
        .await
        .unwrap();
        assert_eq!(
            r.clear(&first.inspector_id).unwrap_err().reason(),
            ErrorReason::InspectorNotFound
        );
    }

    #[tokio::test]
    async fn taps_are_events_and_can_be_inspected() {
        let r = registry(Duration::from_secs(60), 8);
        let id = r
            .open(String::new(), node(), None)
            .await
            .unwrap()
            .inspector_id;
        let inspector = r.get(&id).unwrap();
        let guard = inspector.lock().await;
        let seq = r.tap(&guard, guard.current(), String::new());
        let (_, tapped) = r.tapped(seq).unwrap();
        assert_eq!(tapped.type_name(), "list");
        assert_eq!(
            r.tapped(seq + 100).unwrap_err().reason(),
            ErrorReason::InvalidArgument
        );
    }

    #[test]
    fn chunks_split_on_character_boundaries() {
        assert_eq!(chunks("", 16), vec![String::new()]);
        let parts = chunks("ééééé", 5);
        assert_eq!(parts.concat(), "ééééé");
        assert!(parts.iter().all(|p| p.len() <= 5));
    }
}
