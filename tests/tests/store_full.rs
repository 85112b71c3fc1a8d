//! A full data directory: every breakpoint write that cannot be made durable
//! is refused with `STORE_UNAVAILABLE`, changes nothing in memory or on the
//! event stream, is logged with the data directory, and after a restart the
//! store holds exactly what was acknowledged.
//!
//! The data directory is a small tmpfs filled up with a file. Mounting it
//! needs root (CAP_SYS_ADMIN), as the test command runs in CI; without it
//! the test fails saying so, rather than pass having checked nothing.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::Stdio,
};

use prost_types::FieldMask;
use stepd_e2e::{DEADLINE, Daemon, Subscription, TempDir, reason, source_spec};
use stepd_proto::v1::{
    AddBreakpointRequest, Breakpoint, BreakpointChange, BreakpointSpec, EventChannel,
    ListBreakpointsRequest, RemoveBreakpointRequest, UpdateBreakpointRequest, Watch,
    breakpoint_service_client::BreakpointServiceClient, event::Payload,
};
use tokio::io::{AsyncBufReadExt, BufReader};
use tonic::{Code, transport::Channel};

/// A tmpfs mounted on a fresh directory, unmounted when dropped (also when
/// the test panics).
struct Tmpfs {
    dir: TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` on a new directory, or says why it cannot.
    fn mount(size: &str) -> Result<Self, String> {
        let dir = TempDir::new("full");
        let out = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0700")])
            .arg("tmpfs")
            .arg(dir.path())
            .output()
            .map_err(|err| format!("cannot run mount: {err}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs refused ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Self { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let unmounted = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !unmounted {
            // Still busy (a daemon not reaped yet): detach it now, freed when
            // the last user goes.
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(self.dir.path())
                .status();
        }
    }
}

/// Fills the filesystem holding `path` with one file until it is full;
/// returns the file, to be removed to free the space.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut file = std::fs::File::create(&path).expect("create filler");
    for chunk in [1 << 16, 4096, 1] {
        let block = vec![0xa5u8; chunk];
        loop {
            match file.write_all(&block) {
                Ok(()) => {}
                Err(err) if err.raw_os_error() == Some(libc::ENOSPC) => break,
                Err(err) => panic!("filling {}: {err}", path.display()),
            }
        }
    }
    path
}

/// Starts stepd on `dir` with its stderr (the log) sent to a channel.
async fn start(dir: &Path) -> (Daemon, tokio::sync::mpsc::UnboundedReceiver<String>) {
    let mut command = Daemon::command(dir, &[]);
    command.env("RUST_LOG", "warn").stderr(Stdio::piped());
    let mut daemon = Daemon::spawn(command, dir).await;
    let stderr = daemon.child.stderr.take().expect("stderr is piped");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        let mut lines = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            eprintln!("{line}");
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (daemon, rx)
}

async fn list(client: &mut BreakpointServiceClient<Channel>) -> Vec<Breakpoint> {
    client
        .list_breakpoints(ListBreakpointsRequest::default())
        .await
        .expect("list")
        .into_inner()
        .breakpoints
}

/// What a restart must give back: id, line and whether it is enabled.
fn essentials(list: &[Breakpoint]) -> Vec<(String, u32, Option<bool>)> {
    list.iter()
        .map(|b| {
            let spec = b.spec.clone().unwrap_or_default();
            let line = match spec.location {
                Some(stepd_proto::v1::breakpoint_spec::Location::Source(s)) => s.line,
                _ => 0,
            };
            (b.id.clone(), line, spec.enabled)
        })
        .collect()
}

async fn add(
    client: &mut BreakpointServiceClient<Channel>,
    line: u32,
) -> Result<Breakpoint, tonic::Status> {
    client
        .add_breakpoint(AddBreakpointRequest {
            spec: Some(source_spec("/full.py", line)),
        })
        .await
        .map(|r| r.into_inner().breakpoint.expect("a breakpoint"))
}

async fn disable(
    client: &mut BreakpointServiceClient<Channel>,
    id: &str,
) -> Result<Breakpoint, tonic::Status> {
    client
        .update_breakpoint(UpdateBreakpointRequest {
            id: id.into(),
            spec: Some(BreakpointSpec {
                enabled: Some(false),
                ..Default::default()
            }),
            update_mask: Some(FieldMask {
                paths: vec!["enabled".into()],
            }),
        })
        .await
        .map(|r| r.into_inner().breakpoint.expect("a breakpoint"))
}

async fn remove(
    client: &mut BreakpointServiceClient<Channel>,
    id: &str,
) -> Result<Breakpoint, tonic::Status> {
    client
        .remove_breakpoint(RemoveBreakpointRequest { id: id.into() })
        .await
        .map(|r| r.into_inner().breakpoint.expect("a breakpoint"))
}

fn assert_store_unavailable(what: &str, result: Result<Breakpoint, tonic::Status>) {
    match result {
        Ok(bp) => panic!("{what} on a full disk was acknowledged: {bp:?}"),
        Err(status) => {
            assert_eq!(status.code(), Code::Unavailable, "{what}: {status:?}");
            assert_eq!(reason(&status), "STORE_UNAVAILABLE", "{what}: {status:?}");
        }
    }
}

#[tokio::test]
async fn writes_on_a_full_disk_are_refused_and_change_nothing() {
    let tmpfs = Tmpfs::mount("3m").unwrap_or_else(|why| {
        panic!("a small tmpfs for the data directory is needed (run as root): {why}")
    });
    let dir = tmpfs.path().join("data");
    let (daemon, mut log) = start(&dir).await;
    let mut client = BreakpointServiceClient::new(daemon.channel().await);
    let kept = add(&mut client, 1).await.unwrap();
    let to_remove = add(&mut client, 2).await.unwrap();
    let to_disable = add(&mut client, 3).await.unwrap();
    let acknowledged = essentials(&list(&mut client).await);

    let mut sub = Subscription::open(
        daemon.channel().await,
        Watch {
            channels: vec![EventChannel::Breakpoints.into()],
            ..Default::default()
        },
    )
    .await;
    assert!(matches!(
        sub.next().await.payload,
        Some(Payload::Snapshot(_))
    ));

    let filler = fill(tmpfs.path());
    for n in 0..5 {
        assert_store_unavailable(&format!("add #{n}"), add(&mut client, 10 + n).await);
    }
    assert_store_unavailable("disable", disable(&mut client, &to_disable.id).await);
    assert_store_unavailable("remove", remove(&mut client, &to_remove.id).await);
    assert_eq!(
        essentials(&list(&mut client).await),
        acknowledged,
        "a refused write changes nothing in memory"
    );

    // Each failure is logged, naming the data directory.
    let dir_name = dir.display().to_string();
    tokio::time::timeout(DEADLINE, async {
        while let Some(line) = log.recv().await {
            if line.contains("WARN") && line.contains(&dir_name) {
                return;
            }
        }
        panic!("stepd's log ended without a warning naming {dir_name}");
    })
    .await
    .expect("a failed write is logged at warn with the data directory");

    // With space again, writes go through; the first breakpoint event after
    // the refused ones is this add's, so none of them was published.
    std::fs::remove_file(&filler).expect("free the space");
    let after = add(&mut client, 20).await.expect("add once there is room");
    assert!(
        !acknowledged.iter().any(|(id, ..)| *id == after.id),
        "a fresh id, not one handed out by a refused add"
    );
    let event = sub
        .wait_for("a breakpoint event", |e| {
            matches!(e.payload, Some(Payload::BreakpointUpdated(_)))
        })
        .await;
    match event.payload {
        Some(Payload::BreakpointUpdated(u)) => {
            assert_eq!(u.change, BreakpointChange::Added as i32, "{u:?}");
            assert_eq!(u.breakpoint.unwrap().id, after.id);
        }
        other => panic!("expected breakpoint_updated, got {other:?}"),
    }
    let mut acknowledged = acknowledged;
    acknowledged.extend(essentials(std::slice::from_ref(&after)));
    assert_eq!(essentials(&list(&mut client).await), acknowledged);
    let _ = kept;
    drop(sub);
    daemon.stop().await;

    // After a restart the store holds exactly what was acknowledged.
    let (again, _log) = start(&dir).await;
    let mut client = BreakpointServiceClient::new(again.channel().await);
    assert_eq!(essentials(&list(&mut client).await), acknowledged);
    again.stop().await;
    drop(tmpfs);
}
