//! Which session a command means, as git and docker pick objects: a whole
//! id, the name given at launch, or any prefix of an id that only one
//! session has. What matches nothing goes to the daemon as given, so its
//! typed NOT_FOUND answers it.

use stepd_proto::v1::{ListSessionsRequest, Session, session_service_client::SessionServiceClient};

use crate::{
    connect::{Channel, client},
    exit::Failure,
};

/// Every session the daemon remembers (ended ones too), oldest first.
pub async fn all_sessions(channel: Channel) -> Result<Vec<Session>, Failure> {
    let mut client = client!(SessionServiceClient, channel);
    let mut sessions = Vec::new();
    let mut request = ListSessionsRequest {
        include_ended: true,
        ..Default::default()
    };
    loop {
        let page = client.list_sessions(request.clone()).await?.into_inner();
        sessions.extend(page.sessions);
        if page.next_page_token.is_empty() {
            return Ok(sessions);
        }
        request.page_token = page.next_page_token;
    }
}

/// Whether `text` is a whole session id (a UUID): no lookup is needed.
fn whole_id(text: &str) -> bool {
    text.len() == 36
        && text.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

/// The id `given` selects among `sessions`: an id, a name, a unique id
/// prefix; `given` itself when nothing matches; an error naming the
/// candidates when several do.
pub fn pick(sessions: &[Session], given: &str) -> Result<String, Failure> {
    if given.is_empty() || sessions.iter().any(|s| s.id == given) {
        return Ok(given.to_owned());
    }
    let ambiguous = |what: &str, matches: &[&Session]| {
        let list: Vec<String> = matches
            .iter()
            .map(|s| {
                if s.name.is_empty() {
                    s.id.clone()
                } else {
                    format!("{} ({})", s.id, s.name)
                }
            })
            .collect();
        Failure::Usage(format!(
            "{what} {given:?} matches {} sessions: {}; give more of the id",
            matches.len(),
            list.join(", ")
        ))
    };
    // A live session wins over ended ones of the same name.
    let named: Vec<&Session> = sessions.iter().filter(|s| s.name == given).collect();
    let live: Vec<&Session> = named
        .iter()
        .copied()
        .filter(|s| s.state != stepd_proto::v1::SessionState::Ended as i32)
        .collect();
    match (live.as_slice(), named.as_slice()) {
        ([one], _) | ([], [one]) => return Ok(one.id.clone()),
        ([], []) => {}
        ([], many) | (many, _) => return Err(ambiguous("the name", many)),
    }
    let prefixed: Vec<&Session> = sessions
        .iter()
        .filter(|s| s.id.starts_with(given))
        .collect();
    match prefixed.as_slice() {
        [] => Ok(given.to_owned()),
        [one] => Ok(one.id.clone()),
        many => Err(ambiguous("the prefix", many)),
    }
}

/// The id `given` selects (see [`pick`]).
pub async fn session(channel: &Channel, given: &str) -> Result<String, Failure> {
    if given.is_empty() || whole_id(given) {
        return Ok(given.to_owned());
    }
    pick(&all_sessions(channel.clone()).await?, given)
}

/// Replaces `given` in place by the id it selects.
pub async fn resolve(channel: &Channel, given: &mut String) -> Result<(), Failure> {
    *given = session(channel, given).await?;
    Ok(())
}

/// [`resolve`] for an optional session.
pub async fn resolve_opt(channel: &Channel, given: &mut Option<String>) -> Result<(), Failure> {
    if let Some(given) = given {
        resolve(channel, given).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use stepd_proto::v1::SessionState;

    fn session(id: &str, name: &str, state: SessionState) -> Session {
        Session {
            id: id.into(),
            name: name.into(),
            state: state as i32,
            ..Default::default()
        }
    }

    #[test]
    fn ids_names_and_unique_prefixes_select_a_session() {
        let sessions = [
            session("01a2-aaaa", "web", SessionState::Running),
            session("01a2-abbb", "worker", SessionState::Stopped),
            session("01b3-cccc", "web", SessionState::Ended),
        ];
        assert_eq!(pick(&sessions, "01a2-abbb").unwrap(), "01a2-abbb");
        assert_eq!(pick(&sessions, "01b").unwrap(), "01b3-cccc");
        assert_eq!(pick(&sessions, "01a2-ab").unwrap(), "01a2-abbb");
        assert_eq!(pick(&sessions, "worker").unwrap(), "01a2-abbb");
        // The live one of two of the same name.
        assert_eq!(pick(&sessions, "web").unwrap(), "01a2-aaaa");
        // Nothing matches: the daemon answers it.
        assert_eq!(pick(&sessions, "zz").unwrap(), "zz");
        let Err(Failure::Usage(message)) = pick(&sessions, "01a2") else {
            panic!("an ambiguous prefix is a usage error");
        };
        assert!(
            message.contains("01a2-aaaa (web)") && message.contains("01a2-abbb (worker)"),
            "{message}"
        );
    }

    #[test]
    fn whole_ids_need_no_lookup() {
        assert!(whole_id("01a252ef-3447-7202-8131-dd15a6a33bde"));
        assert!(!whole_id("01a252ef"));
        assert!(!whole_id("01a252ef-3447-7202-8131-dd15a6a33bdz"));
    }
}
