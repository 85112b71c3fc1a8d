//! Harness for end-to-end tests: starts the real `stepd` binary on a free
//! loopback port with a private data directory, and helps read events with
//! deadlines (never sleeps).

pub mod haproxy;
pub mod held;
pub mod jaeger;
pub mod otlp;
pub mod piped;
pub mod postgres;
pub mod probe;
pub mod tmux;

use std::{
    path::{Path, PathBuf},
    process::Stdio,
    sync::atomic::{AtomicU64, Ordering},
    time::Duration,
};

use stepd_proto::v1::{
    Event, SubscribeRequest, SubscribeResponse, Watch, event_service_client::EventServiceClient,
    subscribe_request::Message,
};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::{Child, Command},
    sync::mpsc,
};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Streaming, transport::Channel};

/// How long any single wait in a test may take.
pub const DEADLINE: Duration = Duration::from_secs(40);

/// The workspace's target directory holding the built binaries.
fn target_dir() -> PathBuf {
    // Test executables live in target/<profile>/deps/.
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent()?.parent().map(Path::to_path_buf))
        .unwrap_or_else(|| PathBuf::from("target/debug"))
}

fn binary(env: &str, name: &str) -> PathBuf {
    let path = std::env::var_os(env)
        .map(PathBuf::from)
        .unwrap_or_else(|| target_dir().join(name));
    assert!(
        path.is_file(),
        "{} not found; run `cargo build --workspace --bins` first (or set {env})",
        path.display()
    );
    path
}

/// Path of the `stepd` binary under test.
pub fn stepd_bin() -> PathBuf {
    binary("STEPD_BIN", "stepd")
}

/// Path of the `stepctl` binary under test.
pub fn stepctl_bin() -> PathBuf {
    binary("STEPCTL_BIN", "stepctl")
}

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}

/// A directory removed when dropped.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    /// A fresh, empty directory.
    pub fn new(tag: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        // Short names: Unix socket paths are limited to about 100 bytes.
        let path = std::env::temp_dir().join(format!("sd-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create temp dir");
        Self(path)
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A running `stepd`.
pub struct Daemon {
    /// The process.
    pub child: Child,
    /// Its TCP address.
    pub addr: String,
    /// Its Unix socket, when it has one.
    pub unix: Option<PathBuf>,
    /// Its plaintext health-only address (`--health-listen`), when it has one.
    pub health: Option<String>,
    /// Its data directory (kept for restarts).
    pub data_dir: PathBuf,
    /// The data directory this daemon owns (removed when dropped).
    pub owned_dir: Option<TempDir>,
}

impl Daemon {
    /// Starts a daemon with its own data directory and extra flags.
    pub async fn start(args: &[&str]) -> Self {
        let dir = TempDir::new("d");
        let data_dir = dir.path().to_path_buf();
        let mut daemon = Self::start_in(&data_dir, args).await;
        daemon.owned_dir = Some(dir);
        daemon
    }

    /// Starts a daemon on an existing data directory (to test restarts).
    pub async fn start_in(data_dir: &Path, args: &[&str]) -> Self {
        Self::spawn(Self::command(data_dir, args), data_dir).await
    }

    /// Starts a daemon from a prepared command (see [`Daemon::command`]) and
    /// waits for its ready line.
    pub async fn spawn(mut command: Command, data_dir: &Path) -> Self {
        let mut child = command.spawn().expect("spawn stepd");
        let stdout = child.stdout.take().expect("stdout is piped");
        let mut lines = BufReader::new(stdout).lines();
        let ready = tokio::time::timeout(DEADLINE, async {
            while let Some(line) = lines.next_line().await.ok().flatten() {
                if let Some(rest) = line.strip_prefix("stepd ready ") {
                    return Some(rest.to_owned());
                }
            }
            None
        })
        .await
        .expect("stepd did not get ready in time")
        .expect("stepd exited before it was ready");
        let mut addr = String::new();
        let mut unix = None;
        let mut health = None;
        for part in ready.split_whitespace() {
            if let Some(a) = part.strip_prefix("tcp=") {
                addr = a.to_owned();
            } else if let Some(u) = part.strip_prefix("unix=").filter(|u| !u.is_empty()) {
                unix = Some(PathBuf::from(u));
            } else if let Some(h) = part.strip_prefix("health=") {
                health = Some(h.to_owned());
            }
        }
        Self {
            child,
            addr,
            unix,
            health,
            data_dir: data_dir.to_path_buf(),
            owned_dir: None,
        }
    }

    /// The command that starts stepd (stdout piped for the ready line).
    pub fn command(data_dir: &Path, args: &[&str]) -> Command {
        Self::command_on(data_dir, "127.0.0.1:0", args)
    }

    /// [`Daemon::command`] on a given TCP address (a restart on the same one).
    pub fn command_on(data_dir: &Path, listen: &str, args: &[&str]) -> Command {
        Self::command_of(&stepd_bin(), data_dir, listen, args)
    }

    /// [`Daemon::command_on`] of another stepd binary (a benchmark's older build).
    pub fn command_of(bin: &Path, data_dir: &Path, listen: &str, args: &[&str]) -> Command {
        let mut command = Command::new(bin);
        Self::daemon_args(&mut command, data_dir, listen, args);
        command
    }

    /// [`Daemon::command`] run as another Unix user through `setpriv`, so
    /// that the test's own user is a peer that is not the daemon's.
    pub fn command_as(uid: u32, gid: u32, data_dir: &Path, args: &[&str]) -> Command {
        let mut command = Command::new("setpriv");
        command
            .arg(format!("--reuid={uid}"))
            .arg(format!("--regid={gid}"))
            .arg("--clear-groups")
            .arg(stepd_bin());
        Self::daemon_args(&mut command, data_dir, "127.0.0.1:0", args);
        command
    }

    /// What every daemon a test starts is given: its data directory and
    /// address, the test's log level and tools, and its output piped.
    fn daemon_args(command: &mut Command, data_dir: &Path, listen: &str, args: &[&str]) {
        command
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--listen", listen])
            .args(args)
            .env(
                "RUST_LOG",
                std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .env("PATH", tools_path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true);
    }

    /// A new connection to the daemon.
    pub async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .expect("valid uri")
            .connect()
            .await
            .expect("connect to stepd")
    }

    /// A connection whose receive windows are HTTP/2's smallest, so a
    /// client on it that does not read soon leaves the daemon holding what
    /// it cannot send.
    pub async fn small_window_channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.addr))
            .expect("valid uri")
            .initial_stream_window_size(Some(65_535))
            .initial_connection_window_size(Some(65_535))
            .connect()
            .await
            .expect("connect to stepd")
    }

    /// Waits for the process to exit, at most `within`.
    pub async fn wait_exit(&mut self, within: Duration) -> std::process::ExitStatus {
        tokio::time::timeout(within, self.child.wait())
            .await
            .expect("stepd did not exit in time")
            .expect("wait for stepd")
    }

    /// Stops the daemon with SIGTERM and waits for it.
    pub async fn stop(mut self) {
        self.signal("TERM");
        self.wait_exit(DEADLINE).await;
    }

    /// Sends the process a signal by name ("TERM", "KILL").
    pub fn signal(&self, name: &str) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args([&format!("-{name}"), &pid.to_string()])
                .status();
        }
    }
}

/// An open Subscribe stream.
pub struct Subscription {
    /// Sends client messages (Watch, DebugInput, Heartbeat).
    pub tx: mpsc::Sender<SubscribeRequest>,
    /// The server's events.
    pub rx: Streaming<SubscribeResponse>,
}

impl Subscription {
    /// Opens a stream on `channel` and sends `watch`.
    pub async fn open(channel: Channel, watch: Watch) -> Self {
        let (tx, rx) = mpsc::channel(16);
        tx.send(SubscribeRequest {
            message: Some(Message::Watch(watch)),
        })
        .await
        .expect("queue watch");
        let rx = EventServiceClient::new(channel)
            .subscribe(ReceiverStream::new(rx))
            .await
            .expect("subscribe")
            .into_inner();
        Self { tx, rx }
    }

    /// The next event, failing the test after the deadline.
    pub async fn next(&mut self) -> Event {
        self.try_next()
            .await
            .expect("the stream ended while an event was expected")
    }

    /// The next event, or None when the stream ended.
    pub async fn try_next(&mut self) -> Option<Event> {
        self.next_or_error().await.expect("stream error")
    }

    /// The next event, None when the stream ended, or how it failed.
    pub async fn next_or_error(&mut self) -> Result<Option<Event>, tonic::Status> {
        tokio::time::timeout(DEADLINE, self.rx.message())
            .await
            .expect("no event before the deadline")
            .map(|r| r.map(|r| r.event.expect("response carries an event")))
    }

    /// Sends a client message.
    pub async fn send(&self, message: Message) {
        self.tx
            .send(SubscribeRequest {
                message: Some(message),
            })
            .await
            .expect("send on subscription");
    }
}

/// The stepd reason of an error status ("" when it has none).
pub fn reason(status: &tonic::Status) -> String {
    use tonic_types::StatusExt;
    status
        .get_details_error_info()
        .map(|info| {
            assert_eq!(info.domain, stepd_proto::ERROR_DOMAIN);
            info.reason
        })
        .unwrap_or_default()
}

/// The fields named by a status's BadRequest detail.
pub fn violated_fields(status: &tonic::Status) -> Vec<String> {
    use tonic_types::StatusExt;
    status
        .get_details_bad_request()
        .map(|b| b.field_violations.into_iter().map(|v| v.field).collect())
        .unwrap_or_default()
}

/// A source breakpoint spec.
pub fn source_spec(path: &str, line: u32) -> stepd_proto::v1::BreakpointSpec {
    stepd_proto::v1::BreakpointSpec {
        location: Some(stepd_proto::v1::breakpoint_spec::Location::Source(
            stepd_proto::v1::SourceLocation {
                path: path.into(),
                line,
                column: 0,
            },
        )),
        ..Default::default()
    }
}

/// PATH with the project's tool directories first (debugpy's Python, dlv,
/// lldb-vscode), as `scripts/tools --env` sets it.
pub fn tools_path() -> String {
    let root = repo_root();
    format!(
        "{}:{}:{}",
        root.join(".tools/venv/bin").display(),
        root.join(".tools/bin").display(),
        std::env::var("PATH").unwrap_or_default()
    )
}

/// A fixture program's path.
pub fn fixture(relative: &str) -> PathBuf {
    repo_root().join("tests/fixtures").join(relative)
}

/// The line carrying `LINE: <marker>` in a fixture.
pub fn line_of(path: &Path, marker: &str) -> u32 {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    text.lines()
        .position(|l| {
            l.split("LINE: ")
                .nth(1)
                .is_some_and(|rest| rest.split_whitespace().next() == Some(marker))
        })
        .map(|i| i as u32 + 1)
        .unwrap_or_else(|| panic!("no marker {marker:?} in {}", path.display()))
}

/// A daemon and a subscription to all its events, past the first snapshot.
pub async fn watched() -> (Daemon, Subscription) {
    let daemon = Daemon::start(&[]).await;
    let mut sub = Subscription::open(daemon.channel().await, Watch::default()).await;
    sub.next().await;
    (daemon, sub)
}

impl Subscription {
    /// Skips events until one matches, failing after the deadline.
    /// The failure names the last events skipped, so a test that waited in
    /// vain says what came instead.
    pub async fn wait_for(&mut self, what: &str, mut matches: impl FnMut(&Event) -> bool) -> Event {
        let mut skipped = std::collections::VecDeque::new();
        let found = tokio::time::timeout(DEADLINE, async {
            loop {
                let Some(response) = self.rx.message().await.expect("stream error") else {
                    panic!("the stream ended while waiting for {what}; last skipped: {skipped:#?}");
                };
                let event = response.event.expect("an event");
                if matches(&event) {
                    return event;
                }
                if skipped.len() == 12 {
                    skipped.pop_front();
                }
                skipped.push_back(format!("{event:?}").chars().take(400).collect::<String>());
            }
        })
        .await;
        found
            .unwrap_or_else(|_| panic!("no {what} before the deadline; last skipped: {skipped:#?}"))
    }
}

/// Resident memory of a process, in bytes.
pub fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS");
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

impl Subscription {
    /// Opens a stream that keeps everything the daemon sends on it as text,
    /// for tests that look for a value anywhere in what left the daemon.
    pub async fn record_everything(
        channel: Channel,
    ) -> (
        std::sync::Arc<std::sync::Mutex<String>>,
        tokio::task::JoinHandle<()>,
    ) {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let mut everything = Subscription::open(channel, Watch::default()).await;
        let kept = seen.clone();
        let recorder = tokio::spawn(async move {
            while let Ok(Some(message)) = everything.rx.message().await {
                kept.lock().unwrap().push_str(&format!("{message:?}\n"));
            }
        });
        (seen, recorder)
    }
}

/// Helpers for DAP session tests.
pub mod dap {
    use stepd_proto::v1::{
        AddBreakpointRequest, BreakpointSpec, ContinueRequest, DebugCommand, DebugInput, Event,
        LaunchRequest, LaunchResponse, ListPausesRequest, Pause, ReadOutputRequest,
        SendDebugInputRequest, SendDebugInputResponse, Session, StableState, StepKind, StepRequest,
        breakpoint_service_client::BreakpointServiceClient, debug_command::Command, event::Payload,
        session_service_client::SessionServiceClient,
    };
    use tonic::transport::Channel;

    use super::{Daemon, Subscription};

    /// Session RPCs.
    pub async fn sessions(daemon: &Daemon) -> SessionServiceClient<Channel> {
        SessionServiceClient::new(daemon.channel().await)
    }

    /// Answers the pause `key` with `command` (SendDebugInput, as client "test").
    pub async fn answer(
        daemon: &Daemon,
        key: &str,
        command: Command,
    ) -> Result<SendDebugInputResponse, tonic::Status> {
        sessions(daemon)
            .await
            .send_debug_input(SendDebugInputRequest {
                input: Some(DebugInput {
                    key: key.into(),
                    command: Some(DebugCommand {
                        command: Some(command),
                    }),
                    client_name: "test".into(),
                }),
            })
            .await
            .map(|r| r.into_inner())
    }

    /// One `Step` of `kind` with the default wait; the stable state it answers.
    pub async fn step(
        sessions: &mut SessionServiceClient<Channel>,
        session_id: &str,
        kind: StepKind,
    ) -> StableState {
        sessions
            .step(StepRequest {
                session_id: session_id.into(),
                kind: kind.into(),
                ..Default::default()
            })
            .await
            .expect("step")
            .into_inner()
            .state
            .expect("a stable state")
    }

    /// The whole output of a session so far, as one text.
    pub async fn output_text(daemon: &Daemon, session_id: &str) -> String {
        sessions(daemon)
            .await
            .read_output(ReadOutputRequest {
                session_id: session_id.into(),
                ..Default::default()
            })
            .await
            .expect("read output")
            .into_inner()
            .chunks
            .iter()
            .map(|c| c.text.as_str())
            .collect()
    }

    /// `Continue` with the default wait; the stable state it answers.
    pub async fn resume(
        sessions: &mut SessionServiceClient<Channel>,
        session_id: &str,
    ) -> StableState {
        sessions
            .r#continue(ContinueRequest {
                session_id: session_id.into(),
                ..Default::default()
            })
            .await
            .expect("continue")
            .into_inner()
            .state
            .expect("a stable state")
    }

    /// Adds a breakpoint and returns its id.
    /// Keys of the pending pauses, of one session or (with "") of all.
    pub async fn pending_keys(daemon: &Daemon, session_id: &str) -> Vec<String> {
        sessions(daemon)
            .await
            .list_pauses(ListPausesRequest {
                session_id: session_id.into(),
            })
            .await
            .expect("list pauses")
            .into_inner()
            .pauses
            .into_iter()
            .map(|p| p.key)
            .collect()
    }

    pub async fn add_breakpoint(daemon: &Daemon, spec: BreakpointSpec) -> String {
        BreakpointServiceClient::new(daemon.channel().await)
            .add_breakpoint(AddBreakpointRequest { spec: Some(spec) })
            .await
            .expect("add breakpoint")
            .into_inner()
            .breakpoint
            .expect("a breakpoint")
            .id
    }

    /// Launches a program.
    pub async fn launch(
        daemon: &Daemon,
        adapter: &str,
        program: &str,
        args: &[&str],
    ) -> LaunchResponse {
        launch_with(
            daemon,
            LaunchRequest {
                adapter: adapter.into(),
                program: program.into(),
                args: args.iter().map(|a| a.to_string()).collect(),
                ..Default::default()
            },
        )
        .await
    }

    /// Launches the C fixture (`tests/fixtures/c/hello.c`, built by
    /// scripts/build-fixtures) under lldb; its session.
    pub async fn launch_c_hello(daemon: &Daemon) -> Session {
        let program = super::fixture("build/hello");
        assert!(
            program.is_file(),
            "{} is missing; run scripts/build-fixtures",
            program.display()
        );
        launch_with(
            daemon,
            LaunchRequest {
                adapter: "lldb".into(),
                program: program.to_str().unwrap().into(),
                ..Default::default()
            },
        )
        .await
        .session
        .expect("a session")
    }

    /// Launches with a full request.
    pub async fn launch_with(daemon: &Daemon, request: LaunchRequest) -> LaunchResponse {
        tokio::time::timeout(super::DEADLINE, sessions(daemon).await.launch(request))
            .await
            .expect("launch answered in time")
            .expect("launch")
            .into_inner()
    }

    /// The pause of the next `stopped` event of a session.
    pub async fn next_pause(sub: &mut Subscription, session_id: &str) -> Pause {
        let event = sub
            .wait_for("a stopped event", |e| {
                e.session_id == session_id && matches!(e.payload, Some(Payload::Stopped(_)))
            })
            .await;
        match event.payload {
            Some(Payload::Stopped(s)) => s.pause.expect("a pause"),
            _ => unreachable!(),
        }
    }

    /// Answers every pause of `session_id` with CONTINUE until the session
    /// ends; the pauses, in order, the end, and the program's output.
    pub async fn continue_to_the_end(
        daemon: &Daemon,
        sub: &mut Subscription,
        session_id: &str,
    ) -> (Vec<Pause>, stepd_proto::v1::SessionEnded, String) {
        let mut pauses = Vec::new();
        let end = loop {
            let event = sub
                .wait_for("a pause or the end", |e| {
                    e.session_id == session_id
                        && matches!(
                            e.payload,
                            Some(Payload::Stopped(_) | Payload::SessionEnded(_))
                        )
                })
                .await;
            match event.payload {
                Some(Payload::Stopped(stopped)) => {
                    let pause = stopped.pause.expect("a pause");
                    answer(daemon, &pause.key, Command::Resume(Default::default()))
                        .await
                        .expect("continue");
                    pauses.push(pause);
                }
                Some(Payload::SessionEnded(end)) => break end,
                _ => unreachable!(),
            }
        };
        let output = output_text(daemon, session_id).await;
        (pauses, end, output)
    }

    /// The session_ended event of a session. Should the event fall into a
    /// gap (a slow test machine), the snapshot that follows the gap tells the
    /// same story, and an equivalent event is made from it.
    pub async fn ended(sub: &mut Subscription, session_id: &str) -> Event {
        let ended_in_snapshot = |e: &Event| match &e.payload {
            Some(Payload::Snapshot(s)) => s
                .sessions
                .iter()
                .find(|s| {
                    s.id == session_id && s.state == stepd_proto::v1::SessionState::Ended as i32
                })
                .cloned(),
            _ => None,
        };
        let event = sub
            .wait_for("session_ended", |e| {
                (e.session_id == session_id && matches!(e.payload, Some(Payload::SessionEnded(_))))
                    || ended_in_snapshot(e).is_some()
            })
            .await;
        match ended_in_snapshot(&event) {
            Some(session) => Event {
                session_id: session_id.to_owned(),
                payload: Some(Payload::SessionEnded(stepd_proto::v1::SessionEnded {
                    reason: session.end_reason,
                    detail: session.end_detail,
                    exit_code: session.exit_code,
                    signal: session.signal,
                })),
                ..event
            },
            None => event,
        }
    }

    /// The debuggee's pid as the session record shows it in both GetSession
    /// and ListSessions, once known: at once when the launch answer had it,
    /// else after the session_updated event that publishes it.
    pub async fn published_pid(daemon: &Daemon, sub: &mut Subscription, session: &Session) -> i64 {
        if session.pid == 0 {
            sub.wait_for("a session_updated event with the pid", |e| {
                e.session_id == session.id
                    && matches!(&e.payload, Some(Payload::SessionUpdated(u))
                        if u.session.as_ref().is_some_and(|s| s.pid > 0))
            })
            .await;
        }
        let mut client = sessions(daemon).await;
        let got = client
            .get_session(stepd_proto::v1::GetSessionRequest {
                session_id: session.id.clone(),
            })
            .await
            .expect("get session")
            .into_inner()
            .session
            .expect("a session");
        let listed = client
            .list_sessions(stepd_proto::v1::ListSessionsRequest {
                include_ended: true,
                ..Default::default()
            })
            .await
            .expect("list sessions")
            .into_inner()
            .sessions
            .into_iter()
            .find(|s| s.id == session.id)
            .expect("the session is listed");
        assert_eq!(got.pid, listed.pid, "GetSession and ListSessions agree");
        got.pid
    }

    /// The value of a local in a pause.
    pub fn local<'a>(pause: &'a Pause, name: &str) -> &'a str {
        pause
            .locals
            .iter()
            .find(|l| l.name == name)
            .and_then(|l| l.value.as_ref())
            .map(|v| v.text.as_str())
            .unwrap_or_else(|| panic!("no local {name} in {:?}", pause.locals))
    }
}

/// A gRPC codec that sends and receives raw message bytes, so a test can
/// send what no generated client would.
#[derive(Clone, Copy, Debug, Default)]
pub struct Raw;

impl tonic::codec::Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Raw;
    type Decoder = Raw;

    fn encoder(&mut self) -> Raw {
        Raw
    }

    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl tonic::codec::Encoder for Raw {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        bytes::BufMut::put_slice(dst, &item);
        Ok(())
    }
}

impl tonic::codec::Decoder for Raw {
    type Item = Vec<u8>;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        let mut out = vec![0; bytes::Buf::remaining(src)];
        bytes::Buf::copy_to_slice(src, &mut out);
        Ok(Some(out))
    }
}

/// A second Unix user for tests that need a peer that is not the daemon's
/// user (the tests run as root, the daemon's user).
pub const OTHER_USER: &str = "stepd-test-other";

/// The second user's uid and gid, creating the user when missing.
pub fn other_user() -> (u32, u32) {
    let id = |flag: &str| {
        std::process::Command::new("id")
            .args([flag, OTHER_USER])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
    };
    if id("-u").is_none() {
        // Tests run in parallel: another may create it first.
        let _ = std::process::Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                OTHER_USER,
            ])
            .stderr(Stdio::null())
            .status();
    }
    (
        id("-u").expect("the second test user exists"),
        id("-g").expect("the second test user has a group"),
    )
}

/// `stepd token add NAME ROLE --file FILE`, returning the printed token.
pub fn add_token(file: &Path, name: &str, role: &str) -> String {
    add_token_with(file, name, role, &[])
}

/// `stepd token add NAME ROLE EXTRA… --file FILE`, returning the printed token.
pub fn add_token_with(file: &Path, name: &str, role: &str, extra: &[&str]) -> String {
    let out = std::process::Command::new(stepd_bin())
        .args(["token", "add", name, role])
        .args(extra)
        .arg("--file")
        .arg(file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// `message` as a request carrying `authorization: Bearer TOKEN`.
pub fn with_token<T>(message: T, token: &str) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    request
        .metadata_mut()
        .insert("authorization", format!("Bearer {token}").parse().unwrap());
    request
}

/// A program the test runs, read line by line from its stdout.
pub struct Program {
    /// The process (killed when dropped).
    pub child: Child,
    lines: tokio::io::Lines<BufReader<tokio::process::ChildStdout>>,
}

impl Program {
    /// Starts `command` with stdout piped.
    pub fn spawn(mut command: Command) -> Self {
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("the program starts");
        let lines = BufReader::new(child.stdout.take().expect("stdout is piped")).lines();
        Self { child, lines }
    }

    /// A Python program from the repository's sources, run with the tools' venv.
    pub fn python(script: &Path, args: &[&str]) -> Command {
        let root = repo_root();
        let mut command = Command::new(root.join(".tools/venv/bin/python"));
        command
            .arg(script)
            .args(args)
            .env("PYTHONPATH", root.join("clients/python/src"));
        command
    }

    /// The next line, within `within`.
    pub async fn line_within(&mut self, within: Duration) -> String {
        tokio::time::timeout(within, self.lines.next_line())
            .await
            .expect("a line from the program in time")
            .expect("stdout readable")
            .expect("the program still runs")
    }

    /// The next line, within the deadline.
    pub async fn line(&mut self) -> String {
        self.line_within(DEADLINE).await
    }
}
