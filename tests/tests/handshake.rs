//! Handshake, version, status and doctor against the real daemon.

use stepd_e2e::Daemon;
use stepd_proto::v1::{
    CheckStatus, DoctorRequest, GetStatusRequest, GetVersionRequest, PingRequest,
    daemon_service_client::DaemonServiceClient,
};

#[tokio::test]
async fn ping_reports_version_protocol_instance_and_uptime() {
    let daemon = Daemon::start(&[]).await;
    let mut client = DaemonServiceClient::new(daemon.channel().await);
    let first = client.ping(PingRequest {}).await.unwrap().into_inner();
    assert_eq!(first.version, env!("CARGO_PKG_VERSION"));
    assert_eq!(first.protocol_version, "stepd.v1");
    assert_eq!(first.instance_id.len(), 36, "a UUID: {}", first.instance_id);
    let second = client.ping(PingRequest {}).await.unwrap().into_inner();
    assert_eq!(first.instance_id, second.instance_id);
    let (a, b) = (first.uptime.unwrap(), second.uptime.unwrap());
    assert!((b.seconds, b.nanos) > (a.seconds, a.nanos), "uptime grows");

    let version = client
        .get_version(GetVersionRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(version.protocol_version, "stepd.v1");
    assert!(!version.target.is_empty());

    let status = client
        .get_status(GetStatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(status.instance_id, first.instance_id);
    assert_eq!(status.listen[0], daemon.addr);
    assert!(status.listen[1].starts_with("unix:"));
    assert_eq!(status.data_dir, daemon.data_dir.display().to_string());
    daemon.stop().await;
}

#[tokio::test]
async fn a_restarted_daemon_has_a_new_instance_id() {
    let daemon = Daemon::start(&[]).await;
    let dir = daemon.data_dir.clone();
    let first = DaemonServiceClient::new(daemon.channel().await)
        .ping(PingRequest {})
        .await
        .unwrap()
        .into_inner()
        .instance_id;
    let _keep = tempdir_guard(daemon).await;
    let again = Daemon::start_in(&dir, &[]).await;
    let second = DaemonServiceClient::new(again.channel().await)
        .ping(PingRequest {})
        .await
        .unwrap()
        .into_inner()
        .instance_id;
    assert_ne!(first, second);
    again.stop().await;
}

/// Stops a daemon but keeps its data directory alive for a restart.
async fn tempdir_guard(mut daemon: Daemon) -> Option<stepd_e2e::TempDir> {
    let dir = daemon.owned_dir.take();
    daemon.stop().await;
    dir
}

#[tokio::test]
async fn doctor_lists_every_adapter_with_the_paths_searched() {
    let daemon = Daemon::start(&[]).await;
    let report = DaemonServiceClient::new(daemon.channel().await)
        .doctor(DoctorRequest::default())
        .await
        .unwrap()
        .into_inner();
    let names: Vec<_> = report.adapters.iter().map(|a| a.adapter.as_str()).collect();
    assert_eq!(names, ["debugpy", "lldb", "dlv", "gdb"]);
    for adapter in &report.adapters {
        assert!(
            !adapter.searched.is_empty(),
            "{} lists where it looked",
            adapter.adapter
        );
        let status = CheckStatus::try_from(adapter.status).unwrap();
        match status {
            CheckStatus::Ok => {
                assert!(!adapter.command.is_empty(), "{adapter:?}");
            }
            CheckStatus::Missing => assert!(!adapter.message.is_empty(), "{adapter:?}"),
            CheckStatus::TooOld => {
                assert_eq!(adapter.adapter, "gdb");
                let major: u32 = adapter.version.split('.').next().unwrap().parse().unwrap();
                assert!(major < 14, "{adapter:?}");
            }
            other => panic!("unexpected {other:?} for {adapter:?}"),
        }
        if adapter.adapter == "gdb" && status == CheckStatus::Ok {
            let major: u32 = adapter.version.split('.').next().unwrap().parse().unwrap();
            assert!(
                major >= 14,
                "gdb below 14 must be reported too old: {adapter:?}"
            );
        }
    }
    let store = report.store.unwrap();
    assert_eq!(store.status, CheckStatus::Ok as i32);
    assert!(store.schema_version >= 1);
    assert!(
        store
            .path
            .starts_with(&daemon.data_dir.display().to_string())
    );
    daemon.stop().await;
}
