//! A minimal DAP client session straight to an adapter, without stepd: the
//! baseline the stepd paths are measured against. It uses stepd's own
//! framing, transport and `DapClient`, and the same `initialize` and
//! `launch` arguments stepd sends, so that the only difference is stepd.

use std::{
    path::Path,
    sync::Arc,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};
use stepd_dap::{
    adapters::{self, Adapter, AdapterKind, LaunchSpec},
    capability::InitializeArguments,
    client::{DapClient, Incoming, body_of},
    transport,
};
use tokio::{
    io::{AsyncBufReadExt, BufReader},
    process::Child,
    sync::mpsc::Receiver,
};

/// How long any wait on the adapter may take.
const DEADLINE: Duration = Duration::from_secs(30);
/// Largest DAP frame accepted (stepd's default is of this order).
const MAX_FRAME: usize = 64 << 20;

/// An adapter kind and the command that starts it.
#[derive(Debug, Clone)]
pub struct AdapterCmd {
    /// stepd's adapter kind.
    pub kind: AdapterKind,
    /// The command line that speaks DAP on stdio.
    pub command: Vec<String>,
    /// Start `command` exactly as given, not the way stepd starts this kind
    /// of adapter (`adapters::spawn_command`).
    pub stock: bool,
}

impl AdapterCmd {
    /// debugpy, from the project's tool environment.
    pub fn debugpy() -> Self {
        let python = stepd_e2e::repo_root().join(".tools/venv/bin/python3");
        Self {
            kind: AdapterKind::Debugpy,
            command: vec![
                python.display().to_string(),
                "-m".into(),
                "debugpy.adapter".into(),
            ],
            stock: false,
        }
    }

    /// debugpy's adapter started as its documentation says,
    /// `python3 -m debugpy.adapter`, without stepd's start script.
    pub fn debugpy_stock() -> Self {
        Self {
            stock: true,
            ..Self::debugpy()
        }
    }

    /// lldb-dap 19.
    pub fn lldb() -> Self {
        Self {
            kind: AdapterKind::Lldb,
            command: vec!["lldb-dap-19".into()],
            stock: false,
        }
    }

    fn adapter(&self) -> Adapter {
        Adapter {
            kind: self.kind,
            command: self.command.clone(),
            version: String::new(),
        }
    }
}

/// What one `next` cost on the direct path.
#[derive(Debug, Clone, Copy)]
pub struct StepTiming {
    /// `next` sent → its response and the `stopped` event received.
    pub raw: Duration,
    /// The same, then `stackTrace` (1 level), `scopes` and `variables` of the
    /// top frame: the round trips stepd makes to build a pause.
    pub full: Duration,
}

/// A debuggee stopped under an adapter that this process talks to directly.
pub struct Direct {
    child: Option<Child>,
    client: Arc<DapClient>,
    incoming: Receiver<Incoming>,
    thread_id: i64,
}

impl Direct {
    /// Starts the adapter, launches `program` with one line breakpoint and
    /// waits for the first stop. Returns the session and the time from
    /// spawning the adapter to the `stopped` event.
    pub async fn launch(
        adapter: &AdapterCmd,
        program: &Path,
        source: &Path,
        line: u32,
    ) -> anyhow::Result<(Self, Duration)> {
        let started = Instant::now();
        let stock = adapter.stock;
        let adapter = adapter.adapter();
        let started_adapter = if stock {
            transport::start_command(adapter.kind, &adapter.command, "").await
        } else {
            transport::start(&adapter, "").await
        };
        let mut transport =
            started_adapter.with_context(|| format!("starting {}", adapter.command.join(" ")))?;
        if let Some(stderr) = transport.stderr.take() {
            // Drain the adapter's diagnostics as stepd does.
            tokio::spawn(async move {
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(_)) = lines.next_line().await {}
            });
        }
        let (client, incoming) = DapClient::start(
            transport.reader,
            transport.writer,
            MAX_FRAME,
            DEADLINE,
            adapter.kind.name(),
        );
        let mut direct = Self {
            child: transport.child,
            client,
            incoming,
            thread_id: 0,
        };
        // The same initialize arguments stepd sends.
        let capabilities = direct
            .client
            .request(
                "initialize",
                serde_json::to_value(InitializeArguments::stepd(adapter.name().to_owned()))?,
            )
            .await?;
        let env = Default::default();
        let arguments = adapters::launch_arguments(
            &adapter,
            &LaunchSpec {
                program: &program.display().to_string(),
                args: &[],
                cwd: "",
                env: &env,
                stop_on_entry: false,
                just_my_code: None,
                extra: None,
            },
        );
        // debugpy answers launch only after configurationDone: don't wait.
        let launched = direct.client.send("launch", arguments);
        direct.wait_event("initialized").await?;
        direct
            .client
            .request(
                "setBreakpoints",
                json!({
                    "source": {"path": source.display().to_string()},
                    "breakpoints": [{"line": line}],
                }),
            )
            .await?;
        if capabilities["supportsConfigurationDoneRequest"].as_bool() == Some(true) {
            direct
                .client
                .request("configurationDone", json!({}))
                .await?;
        }
        let answer = tokio::time::timeout(DEADLINE, launched)
            .await
            .context("no launch answer")?
            .context("the adapter is gone")?;
        body_of(answer)?;
        let stopped = direct.wait_event("stopped").await?;
        let elapsed = started.elapsed();
        direct.thread_id = stopped["threadId"].as_i64().unwrap_or(0);
        if direct.thread_id == 0 {
            let threads = direct.client.request("threads", json!({})).await?;
            direct.thread_id = threads["threads"][0]["id"].as_i64().unwrap_or(0);
        }
        Ok((direct, elapsed))
    }

    /// The body of the next event called `name`; other events are dropped,
    /// reverse requests refused.
    async fn wait_event(&mut self, name: &str) -> anyhow::Result<Value> {
        let deadline = tokio::time::Instant::now() + DEADLINE;
        loop {
            let message = tokio::time::timeout_at(deadline, self.incoming.recv())
                .await
                .with_context(|| format!("no {name} event in time"))?;
            match message {
                Some(Incoming::Event { event, body }) if event == name => return Ok(body),
                Some(Incoming::Event { .. } | Incoming::OutputDropped(_)) => {}
                Some(Incoming::Request { seq, command, .. }) => {
                    self.client
                        .respond(seq, &command, Err("not supported".into()));
                }
                Some(Incoming::Closed(reason)) => {
                    bail!(
                        "the adapter closed while waiting for {name}: {}",
                        reason.unwrap_or_default()
                    )
                }
                None => bail!("the adapter is gone while waiting for {name}"),
            }
        }
    }

    /// One `next` on the stopped thread, timed raw and with the pause's
    /// round trips.
    pub async fn step(&mut self) -> anyhow::Result<StepTiming> {
        let started = Instant::now();
        let answer = self
            .client
            .send("next", json!({"threadId": self.thread_id}));
        let stopped = self.wait_event("stopped").await?;
        let answer = tokio::time::timeout(DEADLINE, answer)
            .await
            .context("no answer to next")?
            .context("the adapter is gone")?;
        body_of(answer)?;
        let raw = started.elapsed();
        if stopped["reason"].as_str() != Some("step") {
            bail!("expected a step stop, got {stopped}");
        }
        let thread = stopped["threadId"].as_i64().unwrap_or(self.thread_id);
        let stack = self
            .client
            .request(
                "stackTrace",
                json!({"threadId": thread, "startFrame": 0, "levels": 1}),
            )
            .await?;
        let frame = stack["stackFrames"][0]["id"]
            .as_i64()
            .context("no top frame")?;
        let scopes = self
            .client
            .request("scopes", json!({"frameId": frame}))
            .await?;
        let reference = scopes["scopes"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["expensive"].as_bool() != Some(true)))
            .and_then(|s| s["variablesReference"].as_i64())
            .context("no scope")?;
        let vars = self
            .client
            .request("variables", json!({"variablesReference": reference}))
            .await?;
        if vars["variables"].as_array().is_none_or(Vec::is_empty) {
            bail!("no locals: {vars}");
        }
        Ok(StepTiming {
            raw,
            full: started.elapsed(),
        })
    }

    /// Ends the debuggee and the adapter.
    pub async fn stop(mut self) {
        let request = self.client.send(
            "disconnect",
            json!({"terminateDebuggee": true, "restart": false}),
        );
        let _ = tokio::time::timeout(Duration::from_secs(5), request).await;
        if let Some(mut child) = self.child.take()
            && tokio::time::timeout(Duration::from_secs(5), child.wait())
                .await
                .is_err()
        {
            let _ = child.kill().await;
        }
    }
}
