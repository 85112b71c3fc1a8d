//! A real Jaeger for the OpenTelemetry tests (v2 all-in-one, in memory,
//! every port on loopback; `.tools/bin/jaeger`, installed by `scripts/tools`:
//! without it the test fails, naming it), its query API polled until a trace
//! holds what a test waits for, and daemons that export to it.

use std::{
    io::{Read as _, Write as _},
    net::{TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::Stdio,
    time::{Duration, Instant},
};

use serde_json::Value as Json;
use tokio::process::Child;

use crate::{DEADLINE, Daemon, TempDir, repo_root};

/// A Jaeger all-in-one for one test, killed when dropped.
pub struct Jaeger {
    child: Child,
    _dir: TempDir,
    /// The OTLP gRPC port.
    pub otlp: u16,
    query: u16,
}

/// A loopback port free when asked.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

/// `.tools/bin/jaeger`, or a `jaeger` on PATH (`scripts/tools --env` puts
/// a shared checkout's tools there); neither fails the test, naming it.
fn jaeger_bin() -> PathBuf {
    let local = repo_root().join(".tools/bin/jaeger");
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .map(|dir| dir.join("jaeger"));
    std::iter::once(local.clone())
        .chain(on_path)
        .find(|path| path.is_file())
        .unwrap_or_else(|| {
            panic!(
                "jaeger is missing: not at {} nor on PATH; run scripts/tools, which installs it",
                local.display()
            )
        })
}

impl Jaeger {
    /// Starts Jaeger; a missing Jaeger fails the test. The ports are free
    /// when asked but may be taken before Jaeger binds them (other tests
    /// start daemons meanwhile): a Jaeger that exits is started again on
    /// other ports, a few times.
    pub async fn start() -> Self {
        for _ in 0..4 {
            if let Some(jaeger) = Self::start_once().await {
                return jaeger;
            }
        }
        panic!("Jaeger exited at start four times (its ports taken?)");
    }

    /// One start: None when Jaeger exited before it was ready.
    async fn start_once() -> Option<Self> {
        let bin = jaeger_bin();
        let template =
            std::fs::read_to_string(repo_root().join("tests/fixtures/jaeger/config.yaml.in"))
                .expect("the Jaeger config template");
        let (otlp, query, query_grpc) = (free_port(), free_port(), free_port());
        let config = template
            .replace("@OTLP@", &otlp.to_string())
            .replace("@QUERY@", &query.to_string())
            .replace("@QUERYGRPC@", &query_grpc.to_string());
        let dir = TempDir::new("jaeger");
        let path = dir.path().join("config.yaml");
        std::fs::write(&path, config).unwrap();
        let child = tokio::process::Command::new(bin)
            .arg(format!("--config=file:{}", path.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start jaeger");
        let mut jaeger = Self {
            child,
            _dir: dir,
            otlp,
            query,
        };
        let deadline = Instant::now() + DEADLINE;
        loop {
            let ready = TcpStream::connect(("127.0.0.1", otlp)).is_ok()
                && jaeger
                    .get("/api/services")
                    .is_some_and(|(code, _)| code == 200);
            if ready {
                return Some(jaeger);
            }
            if jaeger.child.try_wait().ok().flatten().is_some() {
                return None;
            }
            assert!(
                Instant::now() < deadline,
                "Jaeger did not get ready in time"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// One HTTP/1.1 GET of the query API: status code and body.
    pub fn get(&self, path: &str) -> Option<(u16, String)> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.query)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
        write!(
            stream,
            "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        .ok()?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).ok()?;
        let response = String::from_utf8_lossy(&response).into_owned();
        let (head, body) = response.split_once("\r\n\r\n")?;
        let code = head.split_whitespace().nth(1)?.parse().ok()?;
        let body = if head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked")
        {
            dechunk(body)
        } else {
            body.to_owned()
        };
        Some((code, body))
    }

    /// The spans of trace `trace_id` once `ready` holds for them, polled
    /// until the deadline.
    pub async fn spans_of(&self, trace_id: &str, ready: impl Fn(&[Json]) -> bool) -> Vec<Json> {
        let trace = self.trace(trace_id, ready).await;
        trace["spans"].as_array().cloned().unwrap_or_default()
    }

    /// Trace `trace_id` as Jaeger answers it (`spans`, and the `processes`
    /// their `processID`s name in this answer) once `ready` holds for its
    /// spans, polled until the deadline.
    pub async fn trace(&self, trace_id: &str, ready: impl Fn(&[Json]) -> bool) -> Json {
        let deadline = Instant::now() + DEADLINE;
        let mut last = Json::Null;
        loop {
            if let Some((200, body)) = self.get(&format!("/api/traces/{trace_id}")) {
                let json: Json = serde_json::from_str(&body).expect("Jaeger answers JSON");
                last = json["data"][0].clone();
                let spans = last["spans"]
                    .as_array()
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                if ready(spans) {
                    return last;
                }
            }
            assert!(
                Instant::now() < deadline,
                "trace {trace_id} did not reach Jaeger in time; last seen: {last:#}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// A W3C `traceparent` of a caller's own (sampled) span, and its trace and
/// span ids; `tag` keeps the traces of one test apart.
pub fn caller_context(tag: u8) -> (String, String, String) {
    let trace = format!("{tag:02x}5eed5eed5eed5eed5eed5eed5eedbe");
    let span = format!("{tag:02x}c0ffee00000001");
    (format!("00-{trace}-{span}-01"), trace, span)
}

/// The service that exported `span`, as the answer `trace` (of
/// [`Jaeger::trace`]) that holds it names it.
pub fn service_of<'a>(trace: &'a Json, span: &Json) -> &'a str {
    let process = span["processID"].as_str().unwrap_or_default();
    trace["processes"][process]["serviceName"]
        .as_str()
        .unwrap_or_default()
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if size == 0 || tail.len() < size {
            break;
        }
        out.push_str(&tail[..size]);
        rest = tail[size..].trim_start_matches("\r\n");
    }
    out
}

/// A Jaeger span's operation (its name).
pub fn operation(span: &Json) -> &str {
    span["operationName"].as_str().unwrap_or_default()
}

/// A Jaeger span's id, hex.
pub fn span_id(span: &Json) -> &str {
    span["spanID"].as_str().unwrap_or_default()
}

/// The id of the span a Jaeger span is a child of.
pub fn parent_of(span: &Json) -> Option<&str> {
    span["references"]
        .as_array()?
        .iter()
        .find(|r| r["refType"] == "CHILD_OF")
        .and_then(|r| r["spanID"].as_str())
}

/// A Jaeger span's (or process's) tag value.
pub fn tag<'a>(span: &'a Json, key: &str) -> Option<&'a Json> {
    span["tags"]
        .as_array()?
        .iter()
        .find(|t| t["key"] == key)
        .map(|t| &t["value"])
}

/// The first span `what` picks.
pub fn find(spans: &[Json], what: impl Fn(&Json) -> bool) -> Option<&Json> {
    spans.iter().find(|s| what(s))
}

// ----- the daemon -----------------------------------------------------------

/// The daemon's command with no `OTEL_*` variable of the test's own.
pub fn command_without_otel(dir: &Path) -> tokio::process::Command {
    let mut command = Daemon::command(dir, &[]);
    for (name, _) in std::env::vars() {
        if name.starts_with("OTEL_") {
            command.env_remove(name);
        }
    }
    command
}

/// A daemon exporting to `jaeger` as `service` (unset if empty), in
/// batches of at most 100 ms.
pub async fn traced_daemon(dir: &TempDir, jaeger: &Jaeger, service: &str) -> Daemon {
    Daemon::spawn(traced_command(dir, jaeger, service), dir.path()).await
}

/// The command of [`traced_daemon`], to add to.
pub fn traced_command(dir: &TempDir, jaeger: &Jaeger, service: &str) -> tokio::process::Command {
    let mut command = command_without_otel(dir.path());
    command
        .env(
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            format!("http://127.0.0.1:{}", jaeger.otlp),
        )
        .env("OTEL_BSP_SCHEDULE_DELAY", "100");
    if !service.is_empty() {
        command.env("OTEL_SERVICE_NAME", service);
    }
    command
}
