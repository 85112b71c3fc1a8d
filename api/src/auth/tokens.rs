//! Bearer tokens: the `--auth-tokens` file (`NAME ROLE sha256:HEX
//! [expires=TIME]` a line, only hashes stored), the local token in the data
//! directory, creating and removing tokens (`stepd token add|remove`), and
//! checking a presented token: one SHA-256 and a constant-time comparison
//! against every hash.

use std::{
    io::Write as _,
    os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    sync::{Arc, RwLock},
    time::{Duration, SystemTime},
};

use anyhow::{Context as _, bail};
use sha2::{Digest as _, Sha256};

use super::{How, Identity, roles::Role};

/// A token's hash.
pub type Hash = [u8; 32];

/// What a raw token starts with, so one is recognisable in a leak scanner.
pub const PREFIX: &str = "stepd_";

/// How often the daemon looks at the tokens file for changes (one `stat`),
/// so an edit reaches the streams its tokens hold open even when no request
/// presents a token (see [`super::lease`]).
pub const REFRESH: Duration = Duration::from_secs(1);

/// The file of the local token in the data directory.
pub const LOCAL_FILE: &str = "token";

/// A new random token: the prefix and 64 hex digits (256 bits).
pub fn generate() -> anyhow::Result<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| anyhow::anyhow!("no randomness for a token: {e}"))?;
    Ok(format!("{PREFIX}{}", hex::encode(bytes)))
}

/// The SHA-256 of a raw token.
pub fn hash(token: &str) -> Hash {
    Sha256::digest(token.as_bytes()).into()
}

/// Compares two hashes in time independent of where they differ.
pub fn same(a: &Hash, b: &Hash) -> bool {
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

/// One line of the tokens file.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The token's name.
    pub name: String,
    /// Its role.
    pub role: Role,
    /// SHA-256 of the raw token.
    pub hash: Hash,
    /// The identity it authenticates as.
    pub identity: Arc<Identity>,
    /// When it stops being accepted, if ever (`expires=` on its line).
    pub expires: Option<SystemTime>,
}

impl Entry {
    /// Whether it has expired by `now`.
    pub fn expired(&self, now: SystemTime) -> bool {
        self.expires.is_some_and(|at| at <= now)
    }
}

/// The prefix of the optional fourth field of a line.
const EXPIRES: &str = "expires=";

/// A time as the tokens file and messages write it: RFC 3339, UTC, seconds.
pub fn format_time(at: SystemTime) -> String {
    humantime::format_rfc3339_seconds(at).to_string()
}

/// When a token given `--expires WHEN` expires: an RFC 3339 time in UTC
/// (`2030-01-31T00:00:00Z`) or a duration from now (`30d`, `12h`, `90s`).
pub fn parse_expiry(when: &str, now: SystemTime) -> anyhow::Result<SystemTime> {
    if let Ok(at) = humantime::parse_rfc3339(when) {
        return Ok(at);
    }
    let after: Duration = humantime::parse_duration(when).map_err(|_| {
        anyhow::anyhow!(
            "expiry {when:?}: give an RFC 3339 time in UTC (2030-01-31T00:00:00Z) or a duration (30d, 12h)"
        )
    })?;
    now.checked_add(after)
        .with_context(|| format!("expiry {when:?} is too far away"))
}

/// Token names: letters, digits, `.`, `_`, `-`, `@`; at most 64.
fn check_name(name: &str) -> anyhow::Result<()> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'))
    {
        bail!("token name {name:?}: use 1 to 64 letters, digits, '.', '_', '-' or '@'");
    }
    Ok(())
}

/// The identity a file token authenticates as.
pub fn token_identity(name: &str, role: Role) -> Arc<Identity> {
    Arc::new(Identity {
        name: format!("token:{name}"),
        role,
        how: How::Token,
    })
}

/// Parses the tokens file; an error names the line.
pub fn parse(text: &str) -> anyhow::Result<Vec<Entry>> {
    let mut entries: Vec<Entry> = Vec::new();
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let entry = parse_line(line).with_context(|| format!("line {}", n + 1))?;
        if entries.iter().any(|e| e.name == entry.name) {
            bail!("line {}: a second token named {:?}", n + 1, entry.name);
        }
        entries.push(entry);
    }
    Ok(entries)
}

fn parse_line(line: &str) -> anyhow::Result<Entry> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let (name, role, hashed, expires) = match fields[..] {
        [name, role, hashed] => (name, role, hashed, None),
        [name, role, hashed, expires] => (name, role, hashed, Some(expires)),
        _ => bail!(
            "expected NAME ROLE sha256:HEX [expires=TIME], found {} fields",
            fields.len()
        ),
    };
    check_name(name)?;
    let role: Role = role.parse().map_err(anyhow::Error::msg)?;
    let hex_part = hashed
        .strip_prefix("sha256:")
        .context("the hash must be written sha256:HEX")?;
    let mut hash = [0u8; 32];
    hex::decode_to_slice(hex_part, &mut hash)
        .context("sha256: needs 64 hex digits (the SHA-256 of the token)")?;
    let expires = expires
        .map(|field| {
            let at = field
                .strip_prefix(EXPIRES)
                .context("the fourth field must be written expires=TIME")?;
            humantime::parse_rfc3339(at).map_err(|_| {
                anyhow::anyhow!(
                    "expires={at}: write an RFC 3339 time in UTC, e.g. expires=2030-01-31T00:00:00Z"
                )
            })
        })
        .transpose()?;
    Ok(Entry {
        name: name.to_owned(),
        role,
        hash,
        identity: token_identity(name, role),
        expires,
    })
}

/// The tokens file, re-read when it changes (checked when a token is
/// presented, and every [`REFRESH`] by the daemon's watcher) or on SIGHUP.
pub struct TokenFile {
    path: PathBuf,
    state: RwLock<Loaded>,
}

#[derive(Default)]
struct Loaded {
    /// What identifies the file's version: inode, size, mtime.
    stamp: Option<(u64, u64, SystemTime)>,
    /// The tokens; empty while the file is missing or unreadable (fail closed).
    entries: Vec<Entry>,
}

fn stamp(path: &Path) -> Option<(u64, u64, SystemTime)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.ino(), meta.len(), meta.modified().ok()?))
}

impl TokenFile {
    /// Reads `path`; at start an unreadable or invalid file is an error.
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        let file = Self {
            path: path.to_path_buf(),
            state: RwLock::new(Loaded::default()),
        };
        let loaded = read(path)?;
        tracing::info!(path = %path.display(), tokens = loaded.entries.len(), "auth tokens loaded");
        *file.state.write().unwrap_or_else(|e| e.into_inner()) = loaded;
        Ok(file)
    }

    /// Re-reads the file when it changed since it was read (or always with
    /// `force`). A file that cannot be read or parsed now admits no token
    /// until it can: revoking must never fail open.
    pub fn refresh(&self, force: bool) {
        let now = stamp(&self.path);
        {
            let state = self.state.read().unwrap_or_else(|e| e.into_inner());
            if !force && now.is_some() && state.stamp == now {
                return;
            }
        }
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        if !force && now.is_some() && state.stamp == now {
            return;
        }
        match read(&self.path) {
            Ok(loaded) => {
                tracing::info!(path = %self.path.display(), tokens = loaded.entries.len(), "auth tokens reloaded");
                *state = loaded;
            }
            Err(err) => {
                if state.stamp.is_some() || !state.entries.is_empty() || force {
                    tracing::error!(path = %self.path.display(), "{err:#}; no token from this file is accepted until it is fixed");
                }
                *state = Loaded {
                    stamp: now,
                    entries: Vec::new(),
                };
            }
        }
    }

    /// The entry of the token hashing to `presented`, after checking the
    /// file for changes.
    pub fn find(&self, presented: &Hash) -> Option<Entry> {
        self.refresh(false);
        self.lookup(presented)
    }

    /// The entry of the token hashing to `presented` as last read,
    /// comparing against every entry so the time taken does not depend on
    /// which one matches.
    pub fn lookup(&self, presented: &Hash) -> Option<Entry> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        let mut found = None;
        for entry in &state.entries {
            if same(&entry.hash, presented) {
                found = Some(entry.clone());
            }
        }
        found
    }

    /// The path read.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

fn read(path: &Path) -> anyhow::Result<Loaded> {
    let before = stamp(path);
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the tokens file {}", path.display()))?;
    let entries = parse(&text).with_context(|| format!("in the tokens file {}", path.display()))?;
    Ok(Loaded {
        stamp: before,
        entries,
    })
}

/// The local token: read from `<data-dir>/token`, created (0600, one line)
/// when absent. Returns its hash.
pub fn local_token(data_dir: &Path) -> anyhow::Result<Hash> {
    let path = data_dir.join(LOCAL_FILE);
    std::fs::create_dir_all(data_dir)
        .with_context(|| format!("creating data directory {}", data_dir.display()))?;
    match std::fs::read_to_string(&path) {
        Ok(text) => {
            let token = text.trim();
            if token.is_empty() {
                bail!(
                    "the local token file {} is empty; remove it and a new one is made at start",
                    path.display()
                );
            }
            let mode = std::fs::metadata(&path)
                .map(|m| m.mode() & 0o777)
                .unwrap_or(0);
            if mode & 0o077 != 0 {
                std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
                    .with_context(|| format!("making {} private (0600)", path.display()))?;
                tracing::info!(path = %path.display(), from = format!("{mode:o}"), to = "600", "tightened the local token file");
            }
            Ok(hash(token))
        }
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            let token = generate()?;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path)
                .with_context(|| format!("creating the local token file {}", path.display()))?;
            writeln!(file, "{token}")
                .and_then(|()| file.sync_all())
                .with_context(|| format!("writing the local token file {}", path.display()))?;
            tracing::info!(path = %path.display(), "created the local token");
            Ok(hash(&token))
        }
        Err(err) => {
            Err(err).with_context(|| format!("reading the local token file {}", path.display()))
        }
    }
}

/// `stepd token add NAME ROLE --file FILE [--expires WHEN]`: appends a new
/// token's line (creating the file 0600) and returns the raw token, which
/// is shown once.
pub fn add(
    file: &Path,
    name: &str,
    role: &str,
    expires: Option<SystemTime>,
) -> anyhow::Result<String> {
    check_name(name)?;
    let role: Role = role.parse().map_err(anyhow::Error::msg)?;
    let existing = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => String::new(),
        Err(err) => return Err(err).with_context(|| format!("reading {}", file.display())),
    };
    let entries = parse(&existing).with_context(|| format!("in {}", file.display()))?;
    if entries.iter().any(|e| e.name == name) {
        bail!(
            "{} already has a token named {name:?}; remove it first (stepd token remove {name} --file {})",
            file.display(),
            file.display()
        );
    }
    let token = generate()?;
    let mut line = String::new();
    if !existing.is_empty() && !existing.ends_with('\n') {
        line.push('\n');
    }
    line.push_str(&format!(
        "{name} {role} sha256:{}",
        hex::encode(hash(&token))
    ));
    if let Some(at) = expires {
        line.push_str(&format!(" {EXPIRES}{}", format_time(at)));
    }
    line.push('\n');
    let mut out = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(file)
        .with_context(|| format!("opening {}", file.display()))?;
    out.write_all(line.as_bytes())
        .and_then(|()| out.sync_all())
        .with_context(|| format!("writing {}", file.display()))?;
    Ok(token)
}

/// `stepd token remove NAME --file FILE`: drops the token's line (an atomic
/// rename), which revokes it at the daemon's next check.
pub fn remove(file: &Path, name: &str) -> anyhow::Result<()> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let mut found = false;
    let kept: String = text
        .lines()
        .filter(|line| {
            let drop =
                line.split_whitespace().next() == Some(name) && !line.trim_start().starts_with('#');
            found |= drop;
            !drop
        })
        .map(|line| format!("{line}\n"))
        .collect();
    if !found {
        bail!("{} has no token named {name:?}", file.display());
    }
    let tmp = file.with_extension("tmp");
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| f.write_all(kept.as_bytes()).and_then(|()| f.sync_all()))
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, file).with_context(|| format!("replacing {}", file.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_parse_and_bad_ones_name_their_line() {
        let token = generate().unwrap();
        assert!(token.starts_with(PREFIX) && token.len() == PREFIX.len() + 64);
        let text = format!(
            "# comment\n\nci controller sha256:{}\n",
            hex::encode(hash(&token))
        );
        let entries = parse(&text).unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].identity.name, "token:ci");
        assert_eq!(entries[0].role, Role::Controller);
        assert!(same(&entries[0].hash, &hash(&token)));
        assert!(!same(&entries[0].hash, &hash("stepd_other")));
        for bad in [
            "ci controller",
            "ci boss sha256:00",
            "c/i viewer sha256:0000000000000000000000000000000000000000000000000000000000000000",
            "ci viewer md5:00",
        ] {
            let err = format!("{:#}", parse(&format!("\n{bad}\n")).unwrap_err());
            assert!(err.contains("line 2"), "{bad}: {err}");
        }
        let twice = format!("{}\n{}", text.trim(), text.trim());
        assert!(format!("{:#}", parse(&twice).unwrap_err()).contains("second token"));
    }

    #[test]
    fn an_expiry_is_optional_and_kept_to_the_second() {
        let old = format!("ci viewer sha256:{}\n", "0".repeat(64));
        assert_eq!(
            parse(&old).unwrap()[0].expires,
            None,
            "old files stay valid"
        );
        let at = humantime::parse_rfc3339("2030-01-31T12:00:00Z").unwrap();
        let line = format!(
            "ci viewer sha256:{} expires=2030-01-31T12:00:00Z",
            "0".repeat(64)
        );
        let entry = &parse(&line).unwrap()[0];
        assert_eq!(entry.expires, Some(at));
        assert!(!entry.expired(at - Duration::from_secs(1)));
        assert!(entry.expired(at));
        for bad in [
            "expires=tomorrow",
            "until=2030-01-31T12:00:00Z",
            "expires=2030-01-31",
        ] {
            let text = format!("ci viewer sha256:{} {bad}", "0".repeat(64));
            let err = format!("{:#}", parse(&text).unwrap_err());
            assert!(err.contains("line 1"), "{bad}: {err}");
        }
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        assert_eq!(
            parse_expiry("30d", now).unwrap(),
            now + Duration::from_secs(30 * 86_400)
        );
        assert_eq!(parse_expiry("2030-01-31T12:00:00Z", now).unwrap(), at);
        assert!(parse_expiry("soon", now).is_err());

        let dir = std::env::temp_dir().join(format!("stepd-expiring-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tokens");
        let _ = std::fs::remove_file(&path);
        let token = add(&path, "ci", "viewer", Some(at)).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.trim_end().ends_with(" expires=2030-01-31T12:00:00Z"),
            "{text}"
        );
        let found = TokenFile::open(&path).unwrap().find(&hash(&token)).unwrap();
        assert_eq!(found.expires, Some(at));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn add_find_remove() {
        let dir = std::env::temp_dir().join(format!("stepd-tokens-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("tokens");
        let _ = std::fs::remove_file(&path);
        let a = add(&path, "alice", "viewer", None).unwrap();
        let b = add(&path, "bob", "admin", None).unwrap();
        assert!(add(&path, "alice", "viewer", None).is_err());
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        let file = TokenFile::open(&path).unwrap();
        assert_eq!(file.find(&hash(&a)).unwrap().identity.name, "token:alice");
        assert_eq!(file.find(&hash(&b)).unwrap().role, Role::Admin);
        remove(&path, "alice").unwrap();
        assert!(file.find(&hash(&a)).is_none(), "revoked at the next check");
        assert!(file.find(&hash(&b)).is_some());
        std::fs::write(&path, "garbage\n").unwrap();
        assert!(
            file.find(&hash(&b)).is_none(),
            "a broken file admits nobody"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_local_token_is_made_once_and_private() {
        let dir = std::env::temp_dir().join(format!("stepd-local-token-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let first = local_token(&dir).unwrap();
        let path = dir.join(LOCAL_FILE);
        assert_eq!(std::fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 1);
        assert!(same(&first, &hash(text.trim())));
        assert!(
            same(&first, &local_token(&dir).unwrap()),
            "kept across starts"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
