//! Why a write was not made: nothing of it was kept, except where
//! `Unconfirmed` says the outcome is not known.

use std::{sync::Arc, time::Duration};

use super::health::Down;

/// Why a write failed.
#[derive(Clone, Debug)]
pub enum Failure {
    /// The database answered with an error (a constraint, a full disk), or
    /// the store is closing.
    Refused(Arc<sqlx::Error>),
    /// The database could not be reached: a connection refused or dropped,
    /// or none to be had in time.
    Unreachable(Arc<sqlx::Error>),
    /// The database did not answer within `waited` while the writer waited
    /// for `what` (a connection, `BEGIN`).
    NoAnswer {
        what: &'static str,
        waited: Duration,
    },
    /// The write's time ran out before its commit began.
    TooLate,
    /// Its caller went away before its commit began.
    CallerGone,
    /// The commit was sent and not answered before the write's deadline:
    /// whether the database kept it is not known.
    Unconfirmed,
    /// The store is known to be down: the write was not tried.
    Down(Down),
}

impl Failure {
    /// An error of the driver, sorted: one that says the database cannot
    /// be reached, or one it answered with.
    pub(super) fn of(err: sqlx::Error) -> Self {
        if unreachable(&err) {
            Self::Unreachable(Arc::new(err))
        } else {
            Self::Refused(Arc::new(err))
        }
    }

    /// Whether this failure says the database is down (rather than that it
    /// refused this write, or that the write ran out of time).
    pub(super) fn is_outage(&self) -> bool {
        matches!(self, Self::Unreachable(_) | Self::NoAnswer { .. })
    }

    /// Whether the write was refused because the store is known to be down.
    pub fn is_store_down(&self) -> bool {
        matches!(self, Self::Down(_))
    }
}

/// Whether a driver error means the database cannot be reached: the
/// connection failed or broke, or the server is shutting down or starting.
fn unreachable(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::WorkerCrashed => true,
        // PostgreSQL's connection exceptions (class 08), and its
        // administrator or crash shutdown and start-up (57P01-57P03).
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|code| code.starts_with("08") || code.starts_with("57P0")),
        _ => false,
    }
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Refused(err) => write!(f, "{err}"),
            Self::Unreachable(err) => write!(f, "the database is unreachable: {err}"),
            Self::NoAnswer { what, waited } => write!(
                f,
                "no answer from the database within {} s (waiting for {what})",
                waited.as_secs_f32()
            ),
            Self::TooLate => f.write_str(
                "the request's deadline came before the database could commit it; nothing was kept",
            ),
            Self::CallerGone => {
                f.write_str("the caller went away before it was committed; nothing was kept")
            }
            Self::Unconfirmed => f.write_str(
                "the database did not confirm the commit before the request's deadline; \
                 it may have been kept",
            ),
            Self::Down(down) => write!(f, "{down}"),
        }
    }
}

impl std::error::Error for Failure {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Refused(err) | Self::Unreachable(err) => Some(&**err),
            _ => None,
        }
    }
}
