//! Breakpoints by number in `stepctl debug`: which sessions `b` applies to,
//! `tbreak`'s deletion on its hit, `condition`, `ignore`, `enable`,
//! `disable` and `delete`.

use std::{
    collections::{HashMap, HashSet},
    hash::{BuildHasher, Hasher},
};

use prost_types::FieldMask;
use stepd_proto::v1::{
    Breakpoint, BreakpointSpec, ListBreakpointsRequest, RemoveBreakpointRequest,
    UpdateBreakpointRequest, breakpoint_service_client::BreakpointServiceClient,
};

use super::Debugger;
use crate::connect::client;

/// The session label a launching `stepctl debug` sets; its breakpoints select it.
pub const LABEL: &str = "stepctl-debug";

/// Which sessions this loop's breakpoints apply to.
#[derive(Default)]
pub struct Scope {
    /// This loop's value of [`LABEL`]; `None` when the session has none (it
    /// was started elsewhere), and breakpoints then apply to every session.
    token: Option<String>,
    /// The session's labels, which select the breakpoints that apply to it.
    labels: HashMap<String, String>,
    /// `tbreak`s not hit yet.
    pub temporary: HashSet<String>,
    /// Breakpoints added by this loop.
    pub own: HashSet<String>,
    /// `tbreak`s hit, to delete.
    spent: Vec<String>,
}

impl Scope {
    /// A scope with a fresh label value, for a session this loop launches.
    pub fn new_label() -> Self {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        Self {
            token: Some(format!("{:016x}", hasher.finish())),
            ..Self::default()
        }
    }

    /// The scope of a session with these labels.
    pub fn of(labels: &HashMap<String, String>) -> Self {
        Self {
            token: labels.get(LABEL).cloned(),
            labels: labels.clone(),
            ..Self::default()
        }
    }

    /// Adds the label to a launch's labels and keeps them.
    pub fn label(&mut self, labels: &mut HashMap<String, String>) {
        if let Some(token) = &self.token {
            labels.insert(LABEL.to_owned(), token.clone());
        }
        self.labels = labels.clone();
    }

    /// The label selector of this loop's breakpoints; empty = every session.
    pub fn selector(&self) -> String {
        self.token
            .as_ref()
            .map(|t| format!("{LABEL}={t}"))
            .unwrap_or_default()
    }

    /// Which sessions a new breakpoint applies to, in words.
    pub fn whose(&self, global: bool) -> &'static str {
        match (global, &self.token) {
            (true, _) => "every session",
            (false, Some(_)) => "this session",
            (false, None) => "every session: this one was not launched by stepctl debug",
        }
    }

    /// A stop hit these breakpoints: the `tbreak`s among them are spent.
    pub fn hit(&mut self, ids: &[String]) {
        for id in ids {
            if self.temporary.remove(id) {
                self.spent.push(id.clone());
            }
        }
    }
}

fn mask(path: &str) -> Option<FieldMask> {
    Some(FieldMask {
        paths: vec![path.to_owned()],
    })
}

impl Debugger {
    /// Deletes the `tbreak`s the last stop hit.
    pub(super) async fn delete_spent(&mut self) {
        for id in std::mem::take(&mut self.scope.spent) {
            match self.remove(&id).await {
                Ok(()) => self.print(format!("deleted temporary breakpoint {id}")),
                Err(message) => self.error(&format!("error: {message}")),
            }
        }
    }

    async fn remove(&mut self, id: &str) -> Result<(), String> {
        client!(BreakpointServiceClient, self.channel.clone())
            .remove_breakpoint(RemoveBreakpointRequest { id: id.to_owned() })
            .await
            .map_err(|s| s.message().to_owned())?;
        self.scope.own.remove(id);
        self.scope.temporary.remove(id);
        Ok(())
    }

    async fn update(
        &mut self,
        id: &str,
        spec: BreakpointSpec,
        path: &str,
    ) -> Result<Breakpoint, String> {
        client!(BreakpointServiceClient, self.channel.clone())
            .update_breakpoint(UpdateBreakpointRequest {
                id: id.to_owned(),
                spec: Some(spec),
                update_mask: mask(path),
            })
            .await
            .map(|r| r.into_inner().breakpoint.unwrap_or_default())
            .map_err(|s| s.message().to_owned())
    }

    /// The breakpoints that apply to this session (all when it has no labels).
    pub(super) async fn session_breakpoints(&mut self) -> Option<Vec<Breakpoint>> {
        let mut client = client!(BreakpointServiceClient, self.channel.clone());
        let mut request = ListBreakpointsRequest {
            for_labels: self.scope.labels.clone(),
            ..Default::default()
        };
        let mut all = Vec::new();
        loop {
            match client.list_breakpoints(request.clone()).await {
                Ok(page) => {
                    let page = page.into_inner();
                    all.extend(page.breakpoints);
                    if page.next_page_token.is_empty() {
                        return Some(all);
                    }
                    request.page_token = page.next_page_token;
                }
                Err(status) => {
                    self.error(&format!("error: {}", status.message()));
                    return None;
                }
            }
        }
    }

    /// `condition N [COND]`.
    pub(super) async fn set_condition(&mut self, id: &str, condition: String) {
        let spec = BreakpointSpec {
            condition: condition.clone(),
            ..Default::default()
        };
        match self.update(id, spec, "condition").await {
            Ok(_) if condition.is_empty() => {
                self.print(format!("breakpoint {id} is now unconditional"))
            }
            Ok(_) => self.print(format!("breakpoint {id} stops only if {condition}")),
            Err(message) => self.error(&format!("error: {message}")),
        }
    }

    /// `ignore N COUNT`: a hit condition past the hits counted so far.
    pub(super) async fn ignore(&mut self, id: &str, count: u64) {
        let Some(all) = self.all_breakpoints().await else {
            return;
        };
        let Some(bp) = all.iter().find(|b| b.id == id) else {
            return self.error(&format!("no breakpoint {id} (info breakpoints lists them)"));
        };
        let hit_condition = if count == 0 {
            String::new()
        } else {
            format!(">{}", bp.hit_count + count)
        };
        let spec = BreakpointSpec {
            hit_condition,
            ..Default::default()
        };
        match self.update(id, spec, "hit_condition").await {
            Ok(_) if count == 0 => self.print(format!("breakpoint {id} stops at every hit")),
            Ok(_) => self.print(format!(
                "will ignore the next {count} hits of breakpoint {id}"
            )),
            Err(message) => self.error(&format!("error: {message}")),
        }
    }

    /// `enable`/`disable [N…]`; alone, every breakpoint that applies here.
    pub(super) async fn enable(&mut self, mut ids: Vec<String>, on: bool) {
        if ids.is_empty() {
            let Some(all) = self.session_breakpoints().await else {
                return;
            };
            ids = all.into_iter().map(|b| b.id).collect();
            if ids.is_empty() {
                return self.print("no breakpoints".into());
            }
        }
        for id in ids {
            let spec = BreakpointSpec {
                enabled: Some(on),
                ..Default::default()
            };
            match self.update(&id, spec, "enabled").await {
                Ok(_) => self.print(format!(
                    "breakpoint {id} {}",
                    if on { "enabled" } else { "disabled" }
                )),
                Err(message) => self.error(&format!("error: {message}")),
            }
        }
    }

    /// `delete [N…]`; alone, the breakpoints of this session's own (added
    /// here or selecting its label), never the global ones.
    pub(super) async fn delete(&mut self, mut ids: Vec<String>) {
        if ids.is_empty() {
            let Some(all) = self.session_breakpoints().await else {
                return;
            };
            let selector = self.scope.selector();
            ids = all
                .into_iter()
                .filter(|b| {
                    self.scope.own.contains(&b.id)
                        || (!selector.is_empty()
                            && b.spec
                                .as_ref()
                                .is_some_and(|s| s.label_selector == selector))
                })
                .map(|b| b.id)
                .collect();
            if ids.is_empty() {
                return self.print(
                    "no breakpoints of this session to delete (delete N deletes any)".into(),
                );
            }
        }
        for id in ids {
            match self.remove(&id).await {
                Ok(()) => self.print(format!("deleted {id}")),
                Err(message) => self.error(&format!("error: {message}")),
            }
        }
    }
}
