//! The top frame's locals, fetched for every pause: `scopes` of the frame,
//! then `variables` of its first inexpensive scope. While a program is stepped
//! within one function, adapters hand out the same frame id and locals
//! reference at stop after stop, so those two requests are sent for the last
//! stop's handles together with `stackTrace`, and their answers are used when
//! the stack trace and the scopes show the handles still name the top frame.
//! A wrong guess costs the adapter two small requests; the locals then come
//! from requests made one after the other, as without a guess. Only adapters
//! that answer a stale handle quietly get guesses
//! (`adapters::quiet_on_stale_handles`).

use serde_json::{Value, json};
use tokio::sync::oneshot;

use crate::{
    client::{DapClient, DapError},
    messages::{ScopesResponse, VariablesResponse},
};

/// The handles that led to the locals at a stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TopHandles {
    thread_id: i64,
    frame_id: i64,
    locals_ref: i64,
}

/// `scopes` and `variables` sent ahead for the handles of the last stop.
pub struct Guess {
    handles: TopHandles,
    scopes: oneshot::Receiver<Value>,
    variables: oneshot::Receiver<Value>,
}

impl Guess {
    /// Sends the guess for a stop of `thread_id`, when the last stop was on
    /// the same thread.
    pub fn send(client: &DapClient, last: Option<TopHandles>, thread_id: i64) -> Option<Self> {
        let handles = last.filter(|h| h.thread_id == thread_id)?;
        Some(Self {
            handles,
            scopes: client.send("scopes", json!({"frameId": handles.frame_id})),
            variables: client.send(
                "variables",
                json!({"variablesReference": handles.locals_ref}),
            ),
        })
    }
}

/// The `variables` answer for `frame_id`'s first inexpensive scope, and the
/// handles to guess with at the next stop; `None` when the frame has no such
/// scope. A guess the adapter refuses is asked again without guessing.
pub async fn fetch(
    client: &DapClient,
    thread_id: i64,
    frame_id: i64,
    guess: Option<Guess>,
) -> Result<Option<(VariablesResponse, TopHandles)>, DapError> {
    let (guessed_scopes, guessed_variables) = match guess {
        Some(g) if g.handles.frame_id == frame_id => (
            refused_as_none(client.answer_as("scopes", g.scopes).await)?,
            Some((g.handles.locals_ref, g.variables)),
        ),
        _ => (None, None),
    };
    let scopes: ScopesResponse = match guessed_scopes {
        Some(scopes) => scopes,
        None => client.call("scopes", json!({"frameId": frame_id})).await?,
    };
    let Some(locals_ref) = locals_scope(&scopes) else {
        return Ok(None);
    };
    let guessed = match guessed_variables {
        Some((reference, rx)) if reference == locals_ref => {
            refused_as_none(client.answer_as("variables", rx).await)?
        }
        _ => None,
    };
    let variables = match guessed {
        Some(variables) => variables,
        None => {
            client
                .call("variables", json!({"variablesReference": locals_ref}))
                .await?
        }
    };
    Ok(Some((
        variables,
        TopHandles {
            thread_id,
            frame_id,
            locals_ref,
        },
    )))
}

/// A guessed request's answer: a refusal only means the guess was wrong.
fn refused_as_none<T>(answer: Result<T, DapError>) -> Result<Option<T>, DapError> {
    match answer {
        Ok(body) => Ok(Some(body)),
        Err(DapError::Failed(_)) => Ok(None),
        Err(other) => Err(other),
    }
}

/// The `variablesReference` of the locals in a `scopes` answer: its first
/// scope that is not marked expensive.
pub fn locals_scope(scopes: &ScopesResponse) -> Option<i64> {
    scopes
        .scopes
        .iter()
        .find(|s| !s.expensive)
        .map(|s| s.variables_reference)
}
