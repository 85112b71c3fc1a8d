//! The processes of a DAP session: the tree under an adapter, killed as
//! one, and a debuggee watched for its end when its adapter would not say.

use std::{collections::HashMap, time::Duration};

/// How often a watched debuggee is looked at: only while its session is
/// stopped, and only under adapters that need it
/// (`AdapterKind::misses_debuggee_death_while_stopped`).
const POLL: Duration = Duration::from_millis(100);

/// The parent of each process, from /proc.
fn parents() -> HashMap<u32, u32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return HashMap::new();
    };
    dir.flatten()
        .filter_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // "pid (comm) S ppid ...": the command may hold spaces and parentheses.
            let ppid = stat
                .rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()?;
            Some((pid, ppid))
        })
        .collect()
}

/// Every process descended from `root`, nearest first.
pub fn descendants(root: u32) -> Vec<u32> {
    let parents = parents();
    let mut found = vec![root];
    let mut at = 0;
    while at < found.len() {
        let parent = found[at];
        found.extend(
            parents
                .iter()
                .filter(|&(_, &ppid)| ppid == parent)
                .map(|(&pid, _)| pid),
        );
        at += 1;
    }
    found.remove(0);
    found
}

/// Sends SIGKILL to `pid`; a pid that is gone only fails.
pub fn kill(pid: u32) {
    if let Ok(pid) = i32::try_from(pid)
        && pid > 0
    {
        // SAFETY: kill(2) has no memory effects.
        unsafe {
            libc::kill(pid, libc::SIGKILL);
        }
    }
}

/// Kills an adapter and everything it started: its process group (adapters
/// are started in their own, `transport`), then each descendant found in
/// /proc, which covers debuggees an adapter puts in a group or session of
/// their own (dlv does). The tree is read before anything is killed: the
/// children of a killed process are re-parented and no longer found.
pub fn kill_tree(root: u32) {
    let below = descendants(root);
    if let Ok(group) = i32::try_from(root)
        && group > 1
    {
        // SAFETY: kill(2) has no memory effects; the group is the adapter's
        // own (never stepd's), since the adapter was started as its leader.
        unsafe {
            libc::kill(-group, libc::SIGKILL);
        }
    }
    kill(root);
    for pid in below {
        kill(pid);
    }
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// It exited with this code.
    Exited(i32),
    /// This signal killed it.
    Signaled(i32),
}

/// How a process that ended but was not reaped yet (a zombie) ended, from
/// the wait status the kernel keeps in /proc/PID/stat (field 52, Linux 3.5).
/// None while it runs, and once it is gone.
pub fn zombie_status(pid: u32) -> Option<Ended> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // fields[0] is field 3 (the state), so field 52 is fields[49].
    if fields.first() != Some(&"Z") {
        return None;
    }
    let status: i32 = fields.get(49)?.parse().ok()?;
    Some(if status & 0x7f == 0 {
        Ended::Exited((status >> 8) & 0xff)
    } else {
        Ended::Signaled(status & 0x7f)
    })
}

/// Whether `pid` has ended: gone, or a zombie.
fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| matches!(rest.trim_start().chars().next(), Some('Z' | 'X'))),
    }
}

/// Watches one process for its end, whoever its parent, by looking at
/// /proc. (A pidfd did not do: it never became readable for a dlv
/// debuggee killed at a stop, presumably because its traced threads stay
/// until dlv waits for them and a pidfd signals only an empty thread group.)
#[derive(Debug)]
pub struct ExitWatch {
    pid: u32,
}

impl ExitWatch {
    /// Watches `pid`. Its number cannot be reused while it is a zombie, so
    /// an end is never mistaken for another process's.
    pub fn new(pid: u32) -> Self {
        Self { pid }
    }

    /// The watched pid.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Resolves once the process has ended (a zombie, or gone).
    pub async fn ended(&self) {
        while !ended(self.pid) {
            tokio::time::sleep(POLL).await;
        }
    }
}

/// Resolves when the watched process ends; never without a watch.
pub async fn watch_ended(watch: Option<&ExitWatch>) {
    match watch {
        Some(watch) => watch.ended().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_killed_child_is_seen_ended_with_its_signal_and_its_tree_is_found() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 600 & wait"])
            .spawn()
            .unwrap();
        let pid = child.id();
        let watch = ExitWatch::new(pid);
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        let below = loop {
            let below = descendants(pid);
            if !below.is_empty() || std::time::Instant::now() > deadline {
                break below;
            }
            std::thread::yield_now();
        };
        assert_eq!(below.len(), 1, "the sleep under the shell");
        assert_eq!(zombie_status(pid), None, "running");
        kill_tree(pid);
        tokio::time::timeout(Duration::from_secs(10), watch.ended())
            .await
            .expect("the end is seen");
        // Not reaped yet: the kernel keeps how it ended.
        assert_eq!(zombie_status(pid), Some(Ended::Signaled(libc::SIGKILL)));
        child.wait().unwrap();
        assert_eq!(zombie_status(pid), None, "reaped");
    }
}
