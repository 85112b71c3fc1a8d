//! `ping`, `status`, `doctor`, `version`, `shutdown`.

use crate::connect::{self, Channel, client};
use crate::{caller, handshake};
use stepd_proto::v1::{
    CheckStatus, DoctorRequest, GetStatusRequest, GetStatusResponse, GetVersionRequest,
    ListSessionsRequest, PingRequest, Session, SessionKind, SessionState, ShutdownRequest,
    daemon_service_client::DaemonServiceClient, session_service_client::SessionServiceClient,
};

use crate::{
    exit::Failure,
    render::{self, print_json, sessions::labels_text},
};

/// `stepctl ping`.
pub async fn ping(channel: Channel, json: bool) -> Result<(), Failure> {
    let started = std::time::Instant::now();
    let r = client!(DaemonServiceClient, channel)
        .ping(PingRequest {})
        .await?
        .into_inner();
    if json {
        print_json(&r);
    } else {
        println!(
            "stepd {} ({}) instance {} up {} — answered in {:.1} ms",
            r.version,
            r.protocol_version,
            r.instance_id,
            render::duration(r.uptime.as_ref()),
            started.elapsed().as_secs_f64() * 1000.0
        );
    }
    Ok(())
}

/// `stepctl status`: the daemon's counts, then the probes connected, by
/// their labels.
pub async fn status(channel: Channel, json: bool) -> Result<(), Failure> {
    let r = client!(DaemonServiceClient, channel.clone())
        .get_status(GetStatusRequest {})
        .await?
        .into_inner();
    if json {
        print_json(&r);
        return Ok(());
    }
    let rows = [
        ("version", r.version.clone()),
        ("instance", r.instance_id.clone()),
        ("uptime", render::duration(r.uptime.as_ref())),
        ("listen", r.listen.join(", ")),
        ("data dir", r.data_dir.clone()),
        ("sessions", sessions_text(&r)),
        ("probes", r.probes.to_string()),
        ("pending pauses", r.pending_pauses.to_string()),
        ("breakpoints", r.breakpoints.to_string()),
        ("subscribers", r.subscribers.to_string()),
        (
            "events",
            format!(
                "{} published, {} dropped, {} gaps sent",
                r.events_published, r.events_dropped, r.gaps_sent
            ),
        ),
        ("last event seq", r.last_seq.to_string()),
    ];
    for (k, v) in rows {
        println!("{k:<15} {v}");
    }
    // A replica of a cluster: each replica, the one answering marked.
    for replica in &r.replicas {
        let plural = if replica.sessions == 1 { "" } else { "s" };
        println!(
            "{:<15} {} {} ({} session{plural}){}",
            "replica",
            replica.address,
            replica.id,
            replica.sessions,
            if replica.answering { ", answering" } else { "" }
        );
    }
    if r.probes > 0 {
        let mut probes = probe_sessions(channel).await?;
        probes.sort_by_cached_key(|s| (labels_text(&s.labels), s.name.clone(), s.id.clone()));
        let rows: Vec<Vec<String>> = probes
            .iter()
            .map(|s| {
                vec![
                    labels_text(&s.labels),
                    s.name.clone(),
                    s.adapter.clone(),
                    if s.pid > 0 {
                        s.pid.to_string()
                    } else {
                        "-".into()
                    },
                    s.id.clone(),
                ]
            })
            .collect();
        println!();
        println!(
            "{}",
            render::table(&["LABELS", "PROBE", "LANGUAGE", "PID", "SESSION"], &rows)
        );
    }
    Ok(())
}

/// `3 (DAP 1 STOPPED, PROBE 2 RUNNING)`.
fn sessions_text(r: &GetStatusResponse) -> String {
    if r.sessions.is_empty() {
        return r.active_sessions.to_string();
    }
    let parts: Vec<String> = r
        .sessions
        .iter()
        .map(|c| {
            let kind = SessionKind::try_from(c.kind)
                .map(|k| render::enum_name(k.as_str_name(), "SESSION_KIND_"))
                .unwrap_or_else(|_| c.kind.to_string());
            let state = SessionState::try_from(c.state)
                .map(|s| render::enum_name(s.as_str_name(), "SESSION_STATE_"))
                .unwrap_or_else(|_| c.state.to_string());
            format!("{kind} {} {state}", c.count)
        })
        .collect();
    format!("{} ({})", r.active_sessions, parts.join(", "))
}

/// The probe sessions not ended, every page of them.
async fn probe_sessions(channel: Channel) -> Result<Vec<Session>, Failure> {
    let mut client = client!(SessionServiceClient, channel);
    let mut request = ListSessionsRequest::default();
    let mut probes = Vec::new();
    loop {
        let page = client.list_sessions(request.clone()).await?.into_inner();
        probes.extend(
            page.sessions
                .into_iter()
                .filter(|s| s.kind == SessionKind::Probe as i32),
        );
        if page.next_page_token.is_empty() {
            return Ok(probes);
        }
        request.page_token = page.next_page_token;
    }
}

fn check_name(status: i32) -> String {
    CheckStatus::try_from(status)
        .map(|s| render::enum_name(s.as_str_name(), "CHECK_STATUS_"))
        .unwrap_or_else(|_| status.to_string())
}

/// `stepctl doctor`: exits 1 when the store is broken (adapters may be
/// missing). Given a TCP address, it first shakes hands with the daemon
/// itself when TLS is wanted, and reports why a handshake fails (exit 3);
/// when the daemon cannot be reached in plaintext, whether it speaks TLS.
pub async fn doctor(options: &connect::Options, json: bool) -> Result<(), Failure> {
    let addr = options.addr.as_deref().unwrap_or_default();
    let target = options.addr.as_deref().and_then(handshake::target);
    let tls_wanted = options.wants_tls(addr);
    let mut tls = None;
    if let Some((host, port)) = target.as_ref().filter(|_| tls_wanted) {
        let diagnosis = handshake::diagnose(options, host, *port).await?;
        if !diagnosis.ok() {
            return Err(report(&diagnosis, json));
        }
        tls = Some(diagnosis);
    }
    let answer = match connect::channel(options).await {
        Ok(channel) => client!(DaemonServiceClient, channel)
            .doctor(DoctorRequest::default())
            .await
            .map(tonic::Response::into_inner)
            .map_err(Failure::from),
        Err(failure) => Err(failure),
    };
    let r = match answer {
        Ok(r) => r,
        Err(failure) => {
            // A plaintext client at a TLS port: say so.
            if let Some((host, port)) = target.as_ref().filter(|_| !tls_wanted)
                && let Some(diagnosis) = handshake::speaks_tls(host, *port).await
            {
                return Err(report(&diagnosis, json));
            }
            return Err(failure);
        }
    };
    // Launches from this shell look for adapters on its PATH when the daemon
    // runs here as this user: show that side too, and say which is which.
    let mine = match std::env::var("PATH") {
        Ok(path) if caller::local_same_user(options) => {
            let channel = connect::channel(options).await?;
            let asked = DoctorRequest { path };
            Some(
                client!(DaemonServiceClient, channel)
                    .doctor(asked)
                    .await?
                    .into_inner(),
            )
        }
        _ => None,
    };
    if json {
        let mut value: serde_json::Value =
            serde_json::from_str(&render::json(&r)).unwrap_or_default();
        if let Some(mine) = &mine {
            value["client"] = serde_json::json!({
                "path": mine.path,
                "adapters": serde_json::from_str::<serde_json::Value>(&render::json(mine))
                    .unwrap_or_default()["adapters"],
            });
        }
        if let Some(tls) = &tls {
            value["tls"] = tls.json();
        }
        println!("{value}");
    } else {
        match &mine {
            Some(mine) => {
                println!(
                    "adapters on your PATH (launches from this shell look here first, \
                     then on the daemon's; --daemon-context uses only the daemon's):"
                );
                print_adapters(&mine.adapters);
                println!(
                    "\nadapters on the daemon's PATH (kept from its start; restart it to change):"
                );
            }
            None => println!("adapters on the daemon's PATH (launches look here):"),
        }
        print_adapters(&r.adapters);
        if let Some(store) = &r.store {
            println!(
                "\nstore: {} at {} (schema {}) {}",
                check_name(store.status),
                store.path,
                store.schema_version,
                store.message
            );
        }
        if let Some(config) = &r.config {
            let file = if config.file.is_empty() {
                "no file"
            } else {
                &config.file
            };
            println!("config: {} ({file})", check_name(config.status));
            for w in &config.warnings {
                println!("  warning: {w}");
            }
        }
        if let Some(tls) = &tls {
            tls.print();
        }
    }
    let store_ok = r
        .store
        .as_ref()
        .is_some_and(|s| s.status == CheckStatus::Ok as i32);
    if store_ok {
        Ok(())
    } else {
        Err(Failure::Other(anyhow::anyhow!("the store is not healthy")))
    }
}

/// The adapters table, and for each adapter not found where it was looked for.
fn print_adapters(adapters: &[stepd_proto::v1::AdapterCheck]) {
    let rows: Vec<Vec<String>> = adapters
        .iter()
        .map(|a| {
            vec![
                a.adapter.clone(),
                check_name(a.status),
                if a.version.is_empty() {
                    "-".into()
                } else {
                    a.version.clone()
                },
                if a.command.is_empty() {
                    a.message.clone()
                } else {
                    a.command.join(" ")
                },
            ]
        })
        .collect();
    println!(
        "{}",
        render::table(&["ADAPTER", "STATUS", "VERSION", "COMMAND"], &rows)
    );
    for a in adapters {
        if a.status != CheckStatus::Ok as i32 {
            println!("\n{} ({}): {}", a.adapter, check_name(a.status), a.message);
            println!("  searched:");
            for s in &a.searched {
                println!("    {s}");
            }
        }
    }
}

/// Prints a failed handshake's diagnosis (`{"tls": …}` with --json); the
/// failure to exit with.
fn report(diagnosis: &handshake::Diagnosis, json: bool) -> Failure {
    if json {
        println!("{}", serde_json::json!({ "tls": diagnosis.json() }));
    } else {
        diagnosis.print();
    }
    Failure::Unreachable(format!(
        "TLS with {}: {}",
        diagnosis.address, diagnosis.message
    ))
}

/// `stepctl version`: this client's version and the daemon's.
pub async fn version(channel: Channel, json: bool) -> Result<(), Failure> {
    let r = client!(DaemonServiceClient, channel)
        .get_version(GetVersionRequest {})
        .await?
        .into_inner();
    if json {
        print_json(&r);
    } else {
        println!("stepctl {}", env!("CARGO_PKG_VERSION"));
        println!(
            "stepd   {} (protocol {}, {} build, {})",
            r.version, r.protocol_version, r.build_profile, r.target
        );
    }
    Ok(())
}

/// `stepctl shutdown`.
pub async fn shutdown(channel: Channel, json: bool) -> Result<(), Failure> {
    let r = client!(DaemonServiceClient, channel)
        .shutdown(ShutdownRequest {})
        .await?
        .into_inner();
    if json {
        print_json(&r);
    } else {
        println!("stepd is shutting down");
    }
    Ok(())
}
