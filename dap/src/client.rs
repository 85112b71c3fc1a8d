//! A DAP client over any byte stream: requests correlated with responses by
//! sequence number, events and reverse requests handed to the session.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, OnceLock,
        atomic::{AtomicI64, Ordering},
    },
    time::{Duration, Instant},
};

use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tokio::{
    io::{AsyncBufRead, AsyncWrite},
    sync::{mpsc, oneshot},
};

use super::codec::{FrameError, read_frame, write_frame};
use stepd_core::trace;

/// What the adapter sends that is not a response.
#[derive(Debug)]
pub enum Incoming {
    /// A DAP event.
    Event {
        /// Event name.
        event: String,
        /// Event body (`null` when absent).
        body: Value,
    },
    /// A reverse request (e.g. `startDebugging`, `runInTerminal`).
    Request {
        /// Its sequence number, for the response.
        seq: i64,
        /// The command.
        command: String,
        /// Its arguments.
        arguments: Value,
    },
    /// Output events dropped because the session fell behind the adapter.
    OutputDropped(u64),
    /// The adapter's output ended; `Some` when it broke the protocol.
    Closed(Option<String>),
}

/// Messages from the adapter waiting for the session. Beyond it, output
/// events are dropped and counted; any other message waits for room, for at
/// most the request timeout, after which the adapter is taken to be flooding.
pub const INCOMING_QUEUE: usize = 4096;

/// Why a request failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum DapError {
    /// The adapter is gone.
    #[error("the debug adapter is gone")]
    Closed,
    /// The adapter answered `success: false`.
    #[error("{0}")]
    Failed(String),
    /// The adapter answered with a body the protocol does not allow.
    #[error("{0}")]
    Malformed(String),
    /// No answer in time.
    #[error("the debug adapter did not answer {0} within {1:?}")]
    Timeout(String, Duration),
    /// The adapter broke the protocol (framing, JSON, flooding), so stepd
    /// stopped reading it; the text says how.
    #[error("the debug adapter broke the protocol: {0}")]
    Protocol(String),
}

/// Requests waiting for their response, by seq; `None` once the adapter's
/// output ended, so that a request sent after that fails at once instead of
/// waiting out its timeout.
type Pending = Arc<Mutex<Option<HashMap<i64, Waiter>>>>;

/// The tracing target of each DAP request's log line and span: off unless
/// `RUST_LOG` turns it on at debug (docs/observability.md).
pub const REQUESTS_TARGET: &str = "stepd::dap::requests";

/// The target of every DAP message logged whole, at trace (as documented:
/// `RUST_LOG=stepd::dap::client=trace`).
pub const CLIENT_TARGET: &str = "stepd::dap::client";

/// A request waiting for its response.
#[derive(Debug)]
struct Waiter {
    reply: oneshot::Sender<Value>,
    /// Kept only when the request is measured (metrics, its span, its log line).
    timing: Option<Box<Timing>>,
}

/// What is measured of one request.
#[derive(Debug)]
struct Timing {
    command: String,
    sent: Instant,
    /// Its span, a child of the session's (DAP request spans on).
    span: trace::Span,
}

/// How a client's requests are measured: the adapter they go to and the
/// session's span their spans are children of.
#[derive(Debug)]
struct Measure {
    adapter: &'static str,
    session_span: OnceLock<trace::Span>,
}

/// Why the reader stopped, when the adapter broke the protocol.
type Fault = Arc<std::sync::OnceLock<String>>;

/// The client half: send requests, answer reverse requests.
#[derive(Debug)]
pub struct DapClient {
    out: mpsc::UnboundedSender<Value>,
    pending: Pending,
    fault: Fault,
    next_seq: AtomicI64,
    timeout: Duration,
    measure: Arc<Measure>,
}

impl DapClient {
    /// How long a request waits for its answer.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Starts the reader and writer tasks over the streams of an adapter
    /// (`adapter` names it in metrics and spans).
    pub fn start<R, W>(
        reader: R,
        writer: W,
        max_frame: usize,
        timeout: Duration,
        adapter: &'static str,
    ) -> (Arc<Self>, mpsc::Receiver<Incoming>)
    where
        R: AsyncBufRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
        let (out, mut out_rx) = mpsc::unbounded_channel::<Value>();
        let (in_tx, in_rx) = mpsc::channel(INCOMING_QUEUE);
        let pending: Pending = Arc::new(Mutex::new(Some(HashMap::new())));
        let fault: Fault = Arc::default();
        let measure = Arc::new(Measure {
            adapter,
            session_span: OnceLock::new(),
        });
        tokio::spawn(async move {
            let mut writer = writer;
            while let Some(message) = out_rx.recv().await {
                if write_frame(&mut writer, &message).await.is_err() {
                    break;
                }
            }
        });
        tokio::spawn(read_loop(
            reader,
            max_frame,
            timeout,
            pending.clone(),
            fault.clone(),
            in_tx,
            measure.clone(),
        ));
        let client = Arc::new(Self {
            out,
            pending,
            fault,
            next_seq: AtomicI64::new(1),
            timeout,
            measure,
        });
        (client, in_rx)
    }

    /// The session's span, parent of the spans of its DAP requests (set
    /// once: a child session sharing its parent's adapter keeps the
    /// parent's).
    pub fn set_session_span(&self, span: &trace::Span) {
        let _ = self.measure.session_span.set(span.clone());
    }

    /// What to measure of a request about to be sent; nothing unless
    /// metrics, DAP request spans or their log lines are on.
    fn timing(&self, command: &str, seq: i64) -> Option<Box<Timing>> {
        let logged = tracing::enabled!(target: REQUESTS_TARGET, tracing::Level::DEBUG);
        if !(stepd_core::metrics::enabled() || logged) {
            return None;
        }
        let span = match self.measure.session_span.get() {
            Some(parent) if logged && trace::enabled() => {
                trace::Span::start(format!("dap {command}"), parent, || {
                    use opentelemetry::KeyValue;
                    vec![
                        KeyValue::new("stepd.adapter", self.measure.adapter),
                        KeyValue::new("stepd.dap.command", command.to_owned()),
                        KeyValue::new("stepd.dap.seq", seq),
                    ]
                })
            }
            _ => trace::Span::none(),
        };
        Some(Box::new(Timing {
            command: command.to_owned(),
            sent: Instant::now(),
            span,
        }))
    }

    /// Sends a request and returns a receiver for its whole response message.
    pub fn send(&self, command: &str, arguments: Value) -> oneshot::Receiver<Value> {
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        let waiter = Waiter {
            reply: tx,
            timing: self.timing(command, seq),
        };
        match self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
        {
            Some(waiting) => waiting.insert(seq, waiter),
            // The adapter is gone: dropping the sender fails the request now.
            None => return rx,
        };
        let message =
            json!({"seq": seq, "type": "request", "command": command, "arguments": arguments});
        tracing::trace!(target: CLIENT_TARGET, message = %loggable(&message), "to adapter");
        if self.out.send(message).is_err()
            && let Some(waiting) = self
                .pending
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_mut()
        {
            waiting.remove(&seq);
        }
        rx
    }

    /// Sends a request and waits for its body.
    pub async fn request(&self, command: &str, arguments: Value) -> Result<Value, DapError> {
        let rx = self.send(command, arguments);
        self.answer(command, rx).await
    }

    /// Sends a request and waits for its body, typed.
    pub async fn call<T: DeserializeOwned>(
        &self,
        command: &str,
        arguments: Value,
    ) -> Result<T, DapError> {
        let rx = self.send(command, arguments);
        self.answer_as(command, rx).await
    }

    /// The typed body of the answer to a request made with `send`.
    pub async fn answer_as<T: DeserializeOwned>(
        &self,
        command: &str,
        rx: oneshot::Receiver<Value>,
    ) -> Result<T, DapError> {
        let body = self.answer(command, rx).await?;
        super::messages::parse(&format!("{command} response"), body).map_err(DapError::Malformed)
    }

    /// The body of the answer to a request made with `send`, within the
    /// request timeout.
    pub async fn answer(
        &self,
        command: &str,
        rx: oneshot::Receiver<Value>,
    ) -> Result<Value, DapError> {
        let response = tokio::time::timeout(self.timeout, rx)
            .await
            .map_err(|_| DapError::Timeout(command.to_owned(), self.timeout))?
            .map_err(|_| self.gone())?;
        body_of(response)
    }

    /// Why the adapter's output ended, when it broke the protocol.
    pub fn fault(&self) -> Option<String> {
        self.fault.get().cloned()
    }

    /// The error of a request the adapter will never answer: a protocol
    /// error when stepd stopped reading because of one, else `Closed`.
    pub fn gone(&self) -> DapError {
        match self.fault() {
            Some(fault) => DapError::Protocol(fault),
            None => DapError::Closed,
        }
    }

    /// Answers a reverse request.
    pub fn respond(&self, request_seq: i64, command: &str, result: Result<Value, String>) {
        let seq = self.next_seq.fetch_add(1, Ordering::Relaxed);
        let (success, message, body) = match result {
            Ok(body) => (true, Value::Null, body),
            Err(message) => (false, Value::String(message), Value::Null),
        };
        let _ = self.out.send(json!({
            "seq": seq, "type": "response", "request_seq": request_seq,
            "command": command, "success": success, "message": message, "body": body,
        }));
    }
}

/// The body of a response, or its error message.
pub fn body_of(response: Value) -> Result<Value, DapError> {
    if response["success"].as_bool() == Some(true) {
        Ok(response.get("body").cloned().unwrap_or(Value::Null))
    } else {
        let message = response["body"]["error"]["format"]
            .as_str()
            .or_else(|| response["message"].as_str())
            .unwrap_or("the adapter refused the request");
        Err(DapError::Failed(crate::traceback::without_debugger_frames(
            message,
        )))
    }
}

/// A DAP message as it may be logged: the environment, arguments and
/// command line of a launch (and of `runInTerminal`, and a child's
/// `startDebugging` configuration) carry secrets, so the log shows the
/// environment's names and how many arguments, never their values.
pub fn loggable(message: &Value) -> Value {
    fn scrub(args: &mut Value) {
        let Some(obj) = args.as_object_mut() else {
            return;
        };
        for key in ["env", "environment"] {
            if let Some(env) = obj.get_mut(key) {
                let names: Vec<Value> = match env {
                    Value::Object(map) => map.keys().map(|k| json!(k)).collect(),
                    // dlv and lldb also take ["NAME=value", …].
                    Value::Array(items) => items
                        .iter()
                        .map(|i| {
                            let text = i.as_str().unwrap_or_default();
                            json!(text.split_once('=').map_or(text, |(name, _)| name))
                        })
                        .collect(),
                    _ => Vec::new(),
                };
                *env = json!({ "names": names });
            }
        }
        for key in ["args", "arguments"] {
            if let Some(Value::Array(items)) = obj.get(key) {
                let count = items.len();
                obj.insert(key.into(), json!({ "count": count }));
            }
        }
        if let Some(configuration) = obj.get_mut("configuration") {
            scrub(configuration);
        }
    }
    let mut message = message.clone();
    if let Some(arguments) = message.get_mut("arguments") {
        scrub(arguments);
    }
    message
}

/// Hands adapter messages to the session, never letting the adapter grow
/// the queue without bound (see [`INCOMING_QUEUE`]).
struct Handoff {
    incoming: mpsc::Sender<Incoming>,
    patience: Duration,
    dropped: u64,
}

impl Handoff {
    /// Queues an output event, or counts it when the queue is full.
    fn output(&mut self, message: Incoming) {
        self.report_dropped();
        match self.incoming.try_send(message) {
            Err(mpsc::error::TrySendError::Full(_)) => self.dropped += 1,
            Ok(()) | Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }

    /// Queues any other message, waiting for room; an error when the
    /// session has not taken anything for the whole patience.
    async fn other(&mut self, message: Incoming) -> Result<(), String> {
        self.report_dropped();
        match self.incoming.send_timeout(message, self.patience).await {
            Err(mpsc::error::SendTimeoutError::Timeout(_)) => Err(format!(
                "the adapter sent more than {INCOMING_QUEUE} messages that stepd could not take \
                 within {:?}",
                self.patience
            )),
            Ok(()) | Err(mpsc::error::SendTimeoutError::Closed(_)) => Ok(()),
        }
    }

    fn report_dropped(&mut self) {
        if self.dropped > 0
            && self
                .incoming
                .try_send(Incoming::OutputDropped(self.dropped))
                .is_ok()
        {
            self.dropped = 0;
        }
    }
}

/// A measured request's response came: its duration goes to the metrics,
/// its span ends, its log line is written.
fn answered(measure: &Measure, timing: Timing, seq: i64, response: &Value) {
    let Timing {
        command,
        sent,
        mut span,
    } = timing;
    let took = sent.elapsed();
    let success = response["success"].as_bool() == Some(true);
    stepd_core::metrics::dap_request(measure.adapter, &command, took);
    tracing::debug!(target: REQUESTS_TARGET, adapter = measure.adapter, command, seq, success, ?took, "DAP request answered");
    if !success {
        span.fail(
            response["message"]
                .as_str()
                .unwrap_or("the adapter refused the request")
                .to_owned(),
        );
    }
    span.end(|| vec![opentelemetry::KeyValue::new("stepd.dap.success", success)]);
}

async fn read_loop<R: AsyncBufRead + Unpin>(
    mut reader: R,
    max_frame: usize,
    patience: Duration,
    pending: Pending,
    fault: Fault,
    incoming: mpsc::Sender<Incoming>,
    measure: Arc<Measure>,
) {
    let mut handoff = Handoff {
        incoming,
        patience,
        dropped: 0,
    };
    let closed = loop {
        let message = match read_frame(&mut reader, max_frame).await {
            Ok(m) => m,
            Err(FrameError::Closed) => break None,
            Err(FrameError::Io(err)) => break Some(format!("reading from the adapter: {err}")),
            Err(FrameError::Protocol(err)) => break Some(err),
        };
        tracing::trace!(target: CLIENT_TARGET, message = %loggable(&message), "from adapter");
        match message["type"].as_str() {
            Some("response") => {
                let Some(seq) = message["request_seq"].as_i64() else {
                    break Some("response without request_seq".into());
                };
                let waiter = pending
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .as_mut()
                    .and_then(|waiting| waiting.remove(&seq));
                if let Some(waiter) = waiter {
                    if let Some(timing) = waiter.timing {
                        answered(&measure, *timing, seq, &message);
                    }
                    let _ = waiter.reply.send(message);
                }
            }
            Some("event") => {
                let event = message["event"].as_str().unwrap_or_default().to_owned();
                let body = message.get("body").cloned().unwrap_or(Value::Null);
                let output = event == "output";
                let message = Incoming::Event { event, body };
                if output {
                    handoff.output(message);
                } else if let Err(flooded) = handoff.other(message).await {
                    break Some(flooded);
                }
            }
            Some("request") => {
                let request = Incoming::Request {
                    seq: message["seq"].as_i64().unwrap_or(0),
                    command: message["command"].as_str().unwrap_or_default().to_owned(),
                    arguments: message.get("arguments").cloned().unwrap_or(Value::Null),
                };
                if let Err(flooded) = handoff.other(request).await {
                    break Some(flooded);
                }
            }
            other => break Some(format!("message of unknown type {other:?}")),
        }
    };
    // Dropping the waiters fails every request still in flight, and every
    // one sent from now on; they learn why from the fault, set first.
    if let Some(why) = &closed {
        let _ = fault.set(why.clone());
    }
    *pending.lock().unwrap_or_else(|e| e.into_inner()) = None;
    let _ = handoff.other(Incoming::Closed(closed)).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn output() -> Incoming {
        Incoming::Event {
            event: "output".into(),
            body: Value::Null,
        }
    }

    #[tokio::test]
    async fn a_flooding_adapter_loses_output_counted_and_nothing_else_silently() {
        let (tx, mut rx) = mpsc::channel(4);
        let mut handoff = Handoff {
            incoming: tx,
            patience: Duration::from_millis(20),
            dropped: 0,
        };
        for _ in 0..10 {
            handoff.output(output());
        }
        assert_eq!(handoff.dropped, 6);
        // Room again: the count goes first, so the loss is reported in order.
        assert!(matches!(rx.recv().await, Some(Incoming::Event { .. })));
        handoff.output(output());
        assert_eq!(handoff.dropped, 1);
        let mut seen = Vec::new();
        while let Ok(m) = rx.try_recv() {
            seen.push(m);
        }
        assert!(matches!(seen.last(), Some(Incoming::OutputDropped(6))));
        // Anything else waits for room (the pending count of 1 takes the
        // first slot); a session that never makes room means a flood.
        for _ in 0..3 {
            handoff.other(output()).await.unwrap();
        }
        assert!(matches!(rx.try_recv(), Ok(Incoming::OutputDropped(1))));
        handoff.other(output()).await.unwrap();
        let flooded = handoff.other(Incoming::Closed(None)).await.unwrap_err();
        assert!(flooded.contains("could not take"), "{flooded}");
    }

    #[tokio::test]
    async fn requests_fail_at_once_after_the_adapter_output_ended() {
        // An adapter whose output is already over, and whose input is ignored.
        let (client, mut incoming) = DapClient::start(
            tokio::io::BufReader::new(tokio::io::empty()),
            tokio::io::sink(),
            1 << 20,
            Duration::from_secs(30),
            "custom",
        );
        assert!(matches!(
            incoming.recv().await,
            Some(Incoming::Closed(None))
        ));
        let started = std::time::Instant::now();
        let answer = client.request("stackTrace", json!({"threadId": 1})).await;
        assert!(matches!(answer, Err(DapError::Closed)), "{answer:?}");
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "not the 30 s timeout"
        );
    }
}
