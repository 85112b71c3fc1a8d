//! The data directory: private to the daemon's user (0700, its database
//! files 0600) and locked for the daemon's life, so two daemons never share
//! one database even when they listen on different addresses.

use std::{
    fs::{File, OpenOptions},
    io::{Read, Seek, Write},
    os::{
        fd::AsRawFd,
        unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt},
    },
    path::{Path, PathBuf},
};

use anyhow::{Context, bail};

/// The lock file's name inside the data directory; it holds the owner's pid.
pub const LOCK_FILE: &str = "stepd.lock";

/// Holds the data directory's lock until dropped (or the process ends).
#[derive(Debug)]
pub struct DataDirLock {
    _file: File,
    path: PathBuf,
}

impl DataDirLock {
    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// Creates `dir` (0700) if needed, tightens it when it is open to others, and
/// locks it; fails naming the directory and the other daemon's pid when
/// another stepd holds it.
pub fn lock(dir: &Path) -> anyhow::Result<DataDirLock> {
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => {}
        Err(err) => {
            return Err(err).with_context(|| format!("creating data directory {}", dir.display()));
        }
    }
    tighten(dir, 0o700);
    let path = dir.join(LOCK_FILE);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(&path)
        .with_context(|| format!("opening lock file {}", path.display()))?;
    // SAFETY: flock(2) on a descriptor this function owns.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
    if !locked {
        let err = std::io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(err).with_context(|| format!("locking {}", path.display()));
        }
        let mut pid = String::new();
        let _ = file.read_to_string(&mut pid);
        let pid = pid.trim();
        let who = if pid.is_empty() {
            "another stepd".to_owned()
        } else {
            format!("another stepd (pid {pid})")
        };
        bail!(
            "data directory {} is in use by {who}; stop it or pass another --data-dir",
            dir.display()
        );
    }
    file.set_len(0)
        .and_then(|()| file.rewind())
        .with_context(|| format!("truncating {}", path.display()))?;
    writeln!(file, "{}", std::process::id())
        .with_context(|| format!("writing {}", path.display()))?;
    Ok(DataDirLock { _file: file, path })
}

/// Removes group and other permission bits from `path` when it has any, and
/// says so: the daemon's files let whoever reads them see and change what
/// it debugs. A file that cannot be changed (another owner) is only reported.
pub fn tighten(path: &Path, mode: u32) {
    let Ok(meta) = std::fs::metadata(path) else {
        return;
    };
    let current = meta.permissions().mode() & 0o777;
    if current & 0o077 == 0 {
        return;
    }
    match std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)) {
        // Info, not a warning: a directory made by hand with the usual umask
        // is open to others, and tightening it is the expected outcome.
        Ok(()) => tracing::info!(
            path = %path.display(),
            was = format!("{current:o}"),
            now = format!("{mode:o}"),
            "tightened permissions of a stepd file"
        ),
        Err(err) => tracing::warn!(
            path = %path.display(),
            mode = format!("{current:o}"),
            %err,
            "a stepd file is open to other users and could not be tightened"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_names_the_directory_and_the_pid() {
        let dir = std::env::temp_dir().join(format!("stepd-lock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let held = lock(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        let err = lock(&dir).unwrap_err().to_string();
        assert!(err.contains(&dir.display().to_string()), "{err}");
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        drop(held);
        // Another test of this process that spawns a program may have
        // forked with the lock's descriptor and not yet exec'd (which closes
        // it): the lock is free once that child execs.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let again = loop {
            match lock(&dir) {
                Ok(again) => break again,
                Err(_) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(err) => panic!("not free again once the holder is gone: {err}"),
            }
        };
        drop(again);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
