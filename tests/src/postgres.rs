//! Databases on the throwaway PostgreSQL server of the test command
//! (`scripts/postgres`, named by `STEPD_TEST_POSTGRES`).

use std::process::Command;

/// A fresh, empty database named after `test`, and its URL.
pub fn database(test: &str) -> String {
    let server = std::env::var("STEPD_TEST_POSTGRES").expect(
        "STEPD_TEST_POSTGRES names no PostgreSQL server: run the tests with scripts/test, \
         or start one with `scripts/postgres start DIR` and export the URL it prints",
    );
    let name = format!("{test}_{}", std::process::id());
    for sql in [
        format!("DROP DATABASE IF EXISTS {name}"),
        format!("CREATE DATABASE {name}"),
    ] {
        let out = Command::new("psql")
            .args([server.as_str(), "-qAtc", &sql])
            .output()
            .expect("run psql");
        assert!(
            out.status.success(),
            "{sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let base = server.rsplit_once('/').map_or(&*server, |(base, _)| base);
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
