//! Databases on the throwaway PostgreSQL server of the test command
//! (`scripts/postgres`, named by `STEPD_TEST_POSTGRES`).

use std::{path::PathBuf, process::Command};

use crate::TempDir;

/// A fresh, empty database named after `test`, and its URL.
pub fn database(test: &str) -> String {
    let server = std::env::var("STEPD_TEST_POSTGRES").expect(
        "STEPD_TEST_POSTGRES names no PostgreSQL server: run the tests with scripts/test, \
         or start one with `scripts/postgres start DIR` and export the URL it prints",
    );
    database_on(&server, test)
}

/// A fresh, empty database named after `test` on the server at `server`,
/// and its URL.
pub fn database_on(server: &str, test: &str) -> String {
    let name = format!("{test}_{}", std::process::id());
    for sql in [
        format!("DROP DATABASE IF EXISTS {name}"),
        format!("CREATE DATABASE {name}"),
    ] {
        let out = Command::new("psql")
            .args([server, "-qAtc", &sql])
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let base = server.rsplit_once('/').map_or(server, |(base, _)| base);
    format!("{base}/{name}")
}

/// The rows `sql` reads from the database at `url`, one line each, columns
/// separated by `|`.
pub fn query(url: &str, sql: &str) -> String {
    let out = Command::new("psql")
        .args([url, "-qAtc", sql])
        .output()
        .expect("run psql");
    assert!(
        out.status.success(),
        "{sql}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A PostgreSQL cluster of one test's own (`scripts/postgres`), which it may
/// stop, start again, freeze and thaw without disturbing the tests that
/// share the test command's server. Thawed and stopped when dropped.
pub struct Cluster {
    dir: TempDir,
    url: String,
    /// The processes frozen (SIGSTOP), to thaw.
    frozen: Vec<libc::pid_t>,
}

impl Cluster {
    /// Creates and starts a cluster.
    pub fn start() -> Self {
        let dir = TempDir::new("pg");
        let url = Self::script("start", &dir);
        Self {
            dir,
            url,
            frozen: Vec::new(),
        }
    }

    fn script(action: &str, dir: &TempDir) -> String {
        let out = Command::new(crate::repo_root().join("scripts/postgres"))
            .args([action])
            .arg(dir.path())
            .output()
            .expect("run scripts/postgres");
        assert!(
            out.status.success(),
            "scripts/postgres {action}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// The server's URL (its `postgres` database), for [`database_on`].
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Stops the server (a fast shutdown: its connections are ended).
    pub fn stop(&self) {
        Self::script("stop", &self.dir);
    }

    /// Starts the stopped server again, on the same port.
    pub fn restart(&self) {
        let url = Self::script("start", &self.dir);
        assert_eq!(url, self.url, "the cluster came back on another port");
    }

    /// Freezes every process of the server (SIGSTOP): the postmaster
    /// first, so that it starts no new backend, then each of its children.
    /// Connections stay open and hang, as with a server that stopped
    /// answering.
    pub fn freeze(&mut self) {
        let postmaster = self.postmaster();
        stop_or_continue(postmaster, libc::SIGSTOP);
        self.frozen.push(postmaster);
        for child in children_of(postmaster) {
            stop_or_continue(child, libc::SIGSTOP);
            self.frozen.push(child);
        }
    }

    /// Lets every frozen process go on (SIGCONT).
    pub fn thaw(&mut self) {
        for pid in self.frozen.drain(..) {
            stop_or_continue(pid, libc::SIGCONT);
        }
    }

    fn postmaster(&self) -> libc::pid_t {
        let pidfile: PathBuf = self.dir.path().join("data/postmaster.pid");
        std::fs::read_to_string(&pidfile)
            .ok()
            .and_then(|text| text.lines().next()?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no pid in {}", pidfile.display()))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.thaw();
        Self::script("stop", &self.dir);
    }
}

fn stop_or_continue(pid: libc::pid_t, signal: libc::c_int) {
    // SAFETY: kill has no memory effects; the pid is one of the cluster's.
    let sent = unsafe { libc::kill(pid, signal) };
    assert_eq!(sent, 0, "kill({pid}, {signal}) failed");
}

/// The processes whose parent is `parent`, from /proc.
fn children_of(parent: libc::pid_t) -> Vec<libc::pid_t> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| {
            let pid: libc::pid_t = entry.ok()?.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // The fields after the command name, which is in parentheses
            // and may hold spaces: state, then the parent's pid.
            let after = &stat[stat.rfind(')')? + 1..];
            let ppid: libc::pid_t = after.split_whitespace().nth(1)?.parse().ok()?;
            (ppid == parent).then_some(pid)
        })
        .collect()
}
