//! The same debuggee driven through stepd's API.

use std::{
    path::Path,
    time::{Duration, Instant, SystemTime},
};

use anyhow::{Context as _, bail};
use stepd_e2e::{Daemon, Subscription, dap, source_spec};
use stepd_proto::v1::{
    DisconnectMode, DisconnectRequest, LaunchRequest, PauseReason, StepKind, StepRequest, Watch,
    session_service_client::SessionServiceClient,
};
use tonic::transport::Channel;

use crate::direct::AdapterCmd;

/// The launch request stepd gets for an adapter: the adapter kind only, so
/// that stepd resolves the adapter as it would for any client.
pub fn launch_request(adapter: &AdapterCmd, program: &Path) -> LaunchRequest {
    LaunchRequest {
        adapter: adapter.kind.name().into(),
        adapter_command: if adapter.kind.name() == "lldb" {
            // Pin lldb-dap 19 whatever else is installed.
            adapter.command.clone()
        } else {
            Vec::new()
        },
        program: program.display().to_string(),
        ..Default::default()
    }
}

/// Adds a line breakpoint to the daemon (it applies to every session).
pub async fn add_breakpoint(daemon: &Daemon, source: &Path, line: u32) -> anyhow::Result<()> {
    dap::add_breakpoint(
        daemon,
        source_spec(source.to_str().context("UTF-8 path")?, line),
    )
    .await;
    Ok(())
}

/// A session stopped at its first breakpoint, through stepd.
pub struct ViaStepd {
    sessions: SessionServiceClient<Channel>,
    /// The session.
    pub session_id: String,
}

/// One stop reached through stepd.
pub struct Launched {
    /// The session.
    pub session: ViaStepd,
    /// Launch called → Launch answered (the session is configured).
    pub configured: Duration,
    /// Launch called → its `stopped` event received.
    pub first_stop: Duration,
}

impl ViaStepd {
    /// Launches and waits for the first stop (seen on a subscription opened
    /// before, dropped once the stop arrived), at a breakpoint added with
    /// [`add_breakpoint`].
    pub async fn launch(
        daemon: &Daemon,
        adapter: &AdapterCmd,
        program: &Path,
    ) -> anyhow::Result<Launched> {
        let channel = daemon.channel().await;
        let mut sub = Subscription::open(channel.clone(), Watch::default()).await;
        sub.next().await; // the snapshot
        let mut sessions = SessionServiceClient::new(channel.clone());
        let started = Instant::now();
        let launched = sessions
            .launch(launch_request(adapter, program))
            .await?
            .into_inner();
        let configured = started.elapsed();
        let session_id = launched.session.context("no session")?.id;
        let pause = dap::next_pause(&mut sub, &session_id).await;
        let first_stop = started.elapsed();
        drop(sub);
        if pause.reason != PauseReason::Breakpoint as i32 {
            bail!("expected a breakpoint stop, got {pause:?}");
        }
        Ok(Launched {
            session: Self {
                sessions,
                session_id,
            },
            configured,
            first_stop,
        })
    }

    /// One `Step{OVER}` with the default wait; returns its round trip and
    /// the wall-clock instants it was sent and answered (for the profile).
    pub async fn step(&mut self) -> anyhow::Result<(Duration, SystemTime, SystemTime)> {
        let sent = SystemTime::now();
        let started = Instant::now();
        let state = self
            .sessions
            .step(StepRequest {
                session_id: self.session_id.clone(),
                kind: StepKind::Over.into(),
                ..Default::default()
            })
            .await?
            .into_inner()
            .state
            .context("no state")?;
        let elapsed = started.elapsed();
        let answered = SystemTime::now();
        if state.timed_out || state.stop_reason != PauseReason::Step as i32 {
            bail!("expected a step stop, got {state:?}");
        }
        if state.pause.as_ref().is_none_or(|p| p.locals.is_empty()) {
            bail!("the step's pause has no locals: {state:?}");
        }
        Ok((elapsed, sent, answered))
    }

    /// Ends the session (terminating the debuggee).
    pub async fn stop(mut self) {
        let _ = self
            .sessions
            .disconnect(DisconnectRequest {
                session_id: self.session_id.clone(),
                mode: DisconnectMode::Terminate.into(),
            })
            .await;
    }
}
