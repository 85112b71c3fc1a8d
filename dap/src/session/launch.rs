//! Starting a DAP session: find the adapter, start it, and hand it to a new
//! actor, which runs the configuration sequence and answers when it is done.

use std::{collections::HashMap, path::Path, sync::Arc};

use stepd_core::error::FieldViolation;
use stepd_proto::v1::{BreakpointPlacement, ErrorReason, Session, StableState};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    sync::{mpsc, oneshot},
};

use super::{
    DapPort, DapSettings, Shared,
    actor::{Actor, Connection},
};
use crate::{
    adapters::{self, AdapterKind},
    client::DapClient,
    transport,
};
use stepd_core::{
    error::{ApiError, ApiResult},
    session::{Context, Registration},
};

/// A Launch or Attach request, adapter-independent.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// Attach instead of launch.
    pub attach: bool,
    /// Adapter name ("" = guess from the program).
    pub adapter: String,
    /// Custom adapter command.
    pub adapter_command: Vec<String>,
    /// Program to launch.
    pub program: String,
    /// Program arguments.
    pub args: Vec<String>,
    /// Working directory.
    pub cwd: String,
    /// Environment additions.
    pub env: HashMap<String, String>,
    /// Stop on entry.
    pub stop_on_entry: bool,
    /// Session labels.
    pub labels: HashMap<String, String>,
    /// Display name.
    pub name: String,
    /// Adapter-specific extras.
    pub adapter_options: Option<prost_types::Struct>,
    /// Keep stepping and breakpoints to the program's own code; None = the
    /// adapter's default (`adapters::just_my_code`).
    pub just_my_code: Option<bool>,
    /// Client correlation id.
    pub request_id: String,
    /// Attach: process id.
    pub pid: i64,
    /// Attach: "host:port" of a debug server.
    pub connect: String,
    /// A child session: the session whose adapter asked for it.
    pub parent_session_id: String,
    /// A child session: the adapter's own start request, sent as is.
    pub configuration: Option<serde_json::Value>,
    /// A child session: "host:port" of the DAP server to talk to, instead of
    /// starting an adapter.
    pub dap_server: String,
    /// The authenticated identity that asked for the session (a child's is
    /// its parent's).
    pub started_by: String,
}

/// What Launch and Attach answer.
#[derive(Debug, Clone)]
pub struct LaunchOutcome {
    /// The session once configured.
    pub session: Session,
    /// Breakpoints as the adapter placed them.
    pub placements: Vec<BreakpointPlacement>,
    /// The entry stop, with stop_on_entry.
    pub entry: Option<StableState>,
}

/// The adapter a request that names none gets: for an attach to a debug
/// server, debugpy (the only adapter whose listener stepd attaches to); for
/// an attach by pid, the process's kind (a Python interpreter, a Go binary,
/// else native); for a launch, the program's.
fn guess_kind(request: &Request) -> AdapterKind {
    if request.attach && !request.connect.is_empty() {
        return AdapterKind::Debugpy;
    }
    if request.attach && request.program.is_empty() && request.pid > 0 {
        return adapters::guess_process(request.pid);
    }
    adapters::guess(&request.program)
}

/// Refuses what no adapter should be given, naming every field at fault: a
/// NUL byte in a path, an argument, the environment or the adapter command
/// (the OS would cut the string there, so lldb would launch another file),
/// a relative `cwd`, and a relative program path without a `cwd` (stepd's
/// own working directory means nothing to a client). A relative program
/// path with a `cwd` is resolved against it here, so every adapter gets
/// the same absolute path and the session names it. A bare name (no `/`)
/// stays a command name, looked up by `check_program`.
fn check_paths(request: &mut Request) -> ApiResult<()> {
    const NUL: &str = "must not contain a NUL byte";
    let nul = |text: &str| text.contains('\0');
    let mut violations = Vec::new();
    let mut bad = |field: &str, description: &str| {
        violations.push(FieldViolation::new(field, description));
    };
    if nul(&request.program) {
        bad("program", NUL);
    }
    if nul(&request.cwd) {
        bad("cwd", NUL);
    } else if !request.cwd.is_empty() && !Path::new(&request.cwd).is_absolute() {
        bad(
            "cwd",
            "must be an absolute path: stepd's own working directory means nothing to a client",
        );
    }
    if request.args.iter().any(|a| nul(a)) {
        bad("args", NUL);
    }
    if request.env.iter().any(|(k, v)| nul(k) || nul(v)) {
        bad("env", NUL);
    }
    if request.adapter_command.iter().any(|a| nul(a)) {
        bad("adapter_command", NUL);
    }
    let program = request.program.trim();
    let relative_path = !request.attach
        && request.configuration.is_none()
        && program.contains('/')
        && !Path::new(program).is_absolute()
        && !nul(program);
    if relative_path && request.cwd.is_empty() {
        bad(
            "program",
            "is a relative path: give an absolute path, or a cwd to resolve it against",
        );
    }
    if !violations.is_empty() {
        return Err(ApiError::invalid(violations));
    }
    if relative_path {
        request.program = Path::new(&request.cwd).join(program).display().to_string();
    }
    Ok(())
}

/// Refuses a launch whose program does not exist, before any adapter starts:
/// debugpy would report the session running and exited 0, lldb fails only
/// after its own start. A program path is absolute by now (`check_paths`);
/// a bare name is looked for in the launch's working directory, when it has
/// one, and on PATH. Launches whose adapter
/// options name the program or a module (debugpy's `module`) are left to
/// the adapter, and so are custom adapters' programs that are not paths.
fn check_program(request: &Request) -> ApiResult<()> {
    let options = request.adapter_options.as_ref();
    let overridden = options
        .is_some_and(|o| o.fields.contains_key("program") || o.fields.contains_key("module"));
    let program = request.program.trim();
    let bare = !program.contains('/');
    let custom = request.adapter.is_empty() && !request.adapter_command.is_empty()
        || (!request.adapter.is_empty()
            && AdapterKind::named(&request.adapter).is_none_or(|k| k == AdapterKind::Custom));
    if request.attach
        || request.configuration.is_some()
        || !request.dap_server.is_empty()
        || program.is_empty()
        || overridden
        || (custom && bare)
    {
        return Ok(());
    }
    let path = Path::new(program);
    let base = (!request.cwd.is_empty()).then(|| Path::new(&request.cwd));
    let found = (path.is_absolute() && path.exists())
        || base.is_some_and(|base| base.join(path).exists())
        || (bare
            && std::env::var_os("PATH")
                .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(path).is_file())));
    if found {
        return Ok(());
    }
    Err(ApiError::new(
        ErrorReason::LaunchFailed,
        format!(
            "the program {} does not exist (looked {})",
            stepd_core::error::quote(program),
            match (base, bare) {
                (Some(base), true) => format!("in {} and on PATH", base.display()),
                (Some(base), false) => format!("in {}", base.display()),
                (None, _) => "on PATH".to_owned(),
            }
        ),
    )
    .with("program", stepd_core::error::clip(program)))
}

/// Starts the adapter and its actor; returns once configuration is done.
/// The actor asks for child sessions on `children`.
pub async fn start(
    ctx: Context,
    settings: DapSettings,
    children: mpsc::UnboundedSender<Request>,
    request: Request,
    registration: &mut Registration,
) -> ApiResult<LaunchOutcome> {
    if !request.attach && request.program.trim().is_empty() && request.adapter_command.is_empty() {
        return Err(ApiError::invalid_field("program", "is required"));
    }
    if request.attach
        && request.pid <= 0
        && request.connect.is_empty()
        && request.configuration.is_none()
    {
        return Err(ApiError::invalid_field("pid", "give a pid or connect"));
    }
    let mut request = request;
    check_paths(&mut request)?;
    let name = match (request.adapter.as_str(), request.adapter_command.is_empty()) {
        ("", true) => guess_kind(&request).name().to_owned(),
        ("", false) => AdapterKind::Custom.name().to_owned(),
        (named, _) => named.to_owned(),
    };
    check_program(&request)?;
    let kind = AdapterKind::named(&name);
    adapters::check_just_my_code(kind.unwrap_or(AdapterKind::Custom), request.just_my_code)?;
    if request.attach
        && kind.is_some_and(AdapterKind::program_serves_dap)
        && !request.connect.is_empty()
    {
        // A program started with `debugpy --listen` serves DAP itself: talk
        // to it directly rather than through a second adapter.
        request.dap_server = request.connect.clone();
    }
    let adapter = if request.dap_server.is_empty() {
        adapters::resolve(
            &name,
            &request.adapter_command,
            request.env.get("PATH").map(String::as_str),
        )
        .await?
    } else {
        adapters::Adapter {
            kind: kind.unwrap_or(AdapterKind::Custom),
            command: Vec::new(),
            version: String::new(),
        }
    };
    let transport = if request.dap_server.is_empty() {
        transport::start(&adapter, &request.cwd).await
    } else {
        transport::connect(&request.dap_server).await
    };
    if transport.is_err() {
        adapters::forget(adapter.name());
    }
    let transport = transport.map_err(|err| {
        ApiError::new(
            ErrorReason::AdapterNotFound,
            format!("starting {}: {err}", adapter.command.join(" ")),
        )
        .with("adapter", adapter.name())
        .with("searched", adapter.command.join(" "))
    })?;
    run(
        ctx,
        settings,
        children,
        request,
        adapter,
        transport,
        registration,
    )
    .await
}

/// Runs a session over a started adapter's transport: the actor, and the
/// adapter's diagnostics kept with the session's output. The session is
/// registered before its actor runs; returns once configuration is done.
pub async fn run(
    ctx: Context,
    settings: DapSettings,
    children: mpsc::UnboundedSender<Request>,
    request: Request,
    adapter: adapters::Adapter,
    mut transport: transport::Transport,
    registration: &mut Registration,
) -> ApiResult<LaunchOutcome> {
    let (client, incoming) = DapClient::start(
        transport.reader,
        transport.writer,
        settings.max_frame_bytes,
        settings.request_timeout,
        adapter.kind.name(),
    );
    let id = uuid::Uuid::now_v7().to_string();
    let shared = Arc::new(Shared::new(id.clone(), adapter.kind, ctx.redactor.clone()));
    let _ = shared.client.set(client);
    if let Some(stderr) = transport.stderr.take() {
        // The adapter's own diagnostics are kept with the session's output.
        let shared = shared.clone();
        let bus = ctx.bus.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                tracing::debug!(session = %shared.id, "adapter: {line}");
                let chunk = shared
                    .output
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push("adapter", &format!("{line}\n"));
                bus.publish(
                    &shared.id,
                    stepd_proto::v1::event::Payload::Output(stepd_proto::v1::Output {
                        chunk: Some(chunk),
                    }),
                );
            }
        });
    }
    let mailbox = registration.register(Arc::new(DapPort(shared.clone())));
    let (ready, outcome) = oneshot::channel();
    let actor = Actor::new(
        ctx,
        shared.clone(),
        adapter,
        request,
        Connection {
            child: transport.child,
            incoming,
        },
        mailbox,
        children,
    );
    let span = stepd_core::session::log_span(&shared.id, stepd_proto::v1::SessionKind::Dap);
    tokio::spawn(tracing::Instrument::instrument(actor.run(ready), span));
    outcome
        .await
        .map_err(|_| ApiError::internal("the session ended before it was configured"))?
}
