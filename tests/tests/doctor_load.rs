//! `stepctl doctor` answers the same twice in a row on a loaded machine:
//! adapter versions are probed once per binary, with a deadline that fits a
//! busy machine, and remembered.

use std::process::{Child, Command, Stdio};

use stepd_e2e::{Daemon, stepctl_bin};

/// Busy loops on every core, killed when dropped.
struct Load(Vec<Child>);

impl Load {
    fn start() -> Self {
        let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
        Self(
            (0..cores)
                .map(|_| {
                    Command::new("sh")
                        .args(["-c", "while :; do :; done"])
                        .stdin(Stdio::null())
                        .spawn()
                        .expect("start a busy loop")
                })
                .collect(),
        )
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn doctor(addr: &str, json: bool) -> String {
    let mut command = Command::new(stepctl_bin());
    if json {
        command.arg("--json");
    }
    let out = command
        .arg("doctor")
        .env("STEPD_ADDR", addr)
        .output()
        .expect("run stepctl doctor");
    String::from_utf8(out.stdout).unwrap()
}

#[tokio::test]
async fn doctor_gives_the_same_answer_twice_under_load() {
    let daemon = Daemon::start(&[]).await;
    let addr = daemon.addr.clone();
    let load = Load::start();
    let (first, second, first_json, second_json) = tokio::task::spawn_blocking(move || {
        (
            doctor(&addr, false),
            doctor(&addr, false),
            doctor(&addr, true),
            doctor(&addr, true),
        )
    })
    .await
    .unwrap();
    drop(load);
    assert!(first.starts_with("adapters on"), "{first}");
    assert!(first.contains("\nADAPTER "), "{first}");
    assert_eq!(first, second);
    assert_eq!(first_json, second_json);
    assert!(!first.contains("did not answer"), "{first}");
    daemon.stop().await;
}
