//! Breakpoints in a DAP session: sending the project's breakpoints to the
//! adapter, and what a hit does (count, log, snapshot, pause).

use std::collections::HashMap;

use serde_json::{Value, json};
use stepd_proto::v1::{
    Breakpoint, BreakpointAction, BreakpointChange, BreakpointPlacement, BreakpointStatus,
    BreakpointUpdated, DataAccess, Notification, NotificationLevel, breakpoint_spec::Location,
    event::Payload,
};

use super::{Actor, steering::HERE_BREAKPOINT};
use crate::capability::Capability;
use crate::session::stop;
use crate::{
    client::DapError,
    messages::{
        self, BreakpointsResponse, DataBreakpointInfoResponse, EvaluateResponse, StackTraceResponse,
    },
};
use stepd_core::breakpoints::log_message;
use stepd_core::{
    breakpoints::{Action, Known, Verdict, verdict},
    time::now_us,
};

/// Frames a snapshot breakpoint captures at most.
const SNAPSHOT_FRAMES: u32 = 20;

impl Actor {
    /// Sends the session's breakpoints to the adapter, taking back what no
    /// longer applies, and returns what the adapter made of each.
    pub(super) async fn apply_breakpoints(&mut self) -> Vec<BreakpointPlacement> {
        let live = self.live_breakpoints().await;
        let mut by_file: HashMap<String, Vec<&Breakpoint>> = HashMap::new();
        let mut functions = Vec::new();
        let mut filters: Vec<(String, &Breakpoint)> = Vec::new();
        let mut data = Vec::new();
        for bp in &live {
            match bp.spec.as_ref().and_then(|s| s.location.as_ref()) {
                Some(Location::Source(src)) => {
                    by_file.entry(src.path.clone()).or_default().push(bp)
                }
                Some(Location::Function(_)) => functions.push(bp),
                Some(Location::Exception(e)) => {
                    filters.extend(e.filter_ids.iter().map(|f| (f.clone(), bp)));
                }
                Some(Location::Data(_)) => data.push(bp),
                _ => {}
            }
        }
        self.placed.retire_all();
        self.delegated.clear();
        self.exception_breakpoints.clear();
        self.clear_unused(&by_file, !functions.is_empty(), !filters.is_empty())
            .await;
        let mut placements = Vec::new();
        for (path, bps) in by_file {
            placements.extend(self.place_in_file(&path, &bps).await);
        }
        if !functions.is_empty() {
            placements.extend(self.place_functions(&functions).await);
        }
        if !filters.is_empty() {
            placements.extend(self.place_exception_filters(&filters).await);
        }
        placements.extend(self.place_data(&data).await);
        placements
    }

    /// Data breakpoints the session could not place while it ran, placed
    /// now that it stopped in a frame their expressions can be read in.
    pub(super) async fn place_pending_data(&mut self) {
        if !self.data_pending {
            return;
        }
        let live = self.live_breakpoints().await;
        let data: Vec<&Breakpoint> = live
            .iter()
            .filter(|b| {
                matches!(
                    b.spec.as_ref().and_then(|s| s.location.as_ref()),
                    Some(Location::Data(_))
                )
            })
            .collect();
        for placement in self.place_data(&data).await {
            self.publish_status(&placement);
        }
    }

    /// The data breakpoints: each expression resolved in the latest stop's
    /// top frame (`dataBreakpointInfo`), then all set at once. Without a
    /// stop they wait for the next one; an adapter without data breakpoints
    /// leaves them unbound and says so.
    async fn place_data(&mut self, data: &[&Breakpoint]) -> Vec<BreakpointPlacement> {
        self.data_pending = false;
        if data.is_empty() {
            if self.applied_data {
                let _ = self
                    .client
                    .request("setDataBreakpoints", json!({"breakpoints": []}))
                    .await;
                self.applied_data = false;
            }
            return Vec::new();
        }
        if !self.shared.supports(Capability::DataBreakpoints) {
            let error =
                DapError::Failed(format!("{} has no data breakpoints", self.adapter.name()));
            return data
                .iter()
                .map(|bp| self.placement(bp, 0, None, Some(&error)))
                .collect();
        }
        let frame = *self
            .shared
            .latest_frame
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let Some((_, frame_id)) = frame.filter(|_| !self.book.is_empty()) else {
            self.data_pending = true;
            let waiting = messages::Breakpoint {
                message: Some("placed at the session's next stop".into()),
                ..Default::default()
            };
            return data
                .iter()
                .map(|bp| self.placement(bp, 0, Some(waiting.clone()), None))
                .collect();
        };
        let mut placements = Vec::new();
        let mut resolved: Vec<(&Breakpoint, String)> = Vec::new();
        for bp in data {
            let Some(Location::Data(d)) = bp.spec.as_ref().and_then(|s| s.location.as_ref()) else {
                continue;
            };
            let info: Result<DataBreakpointInfoResponse, _> = self
                .client
                .call(
                    "dataBreakpointInfo",
                    json!({"name": d.expression, "frameId": frame_id}),
                )
                .await;
            match info {
                Ok(DataBreakpointInfoResponse {
                    data_id: Some(id), ..
                }) => resolved.push((bp, id)),
                Ok(info) => {
                    let error = DapError::Failed(format!(
                        "{} cannot watch {}: {}",
                        self.adapter.name(),
                        d.expression,
                        info.description.unwrap_or_default()
                    ));
                    placements.push(self.placement(bp, 0, None, Some(&error)));
                }
                Err(error) => placements.push(self.placement(bp, 0, None, Some(&error))),
            }
        }
        let entries: Vec<_> = resolved
            .iter()
            .map(|(bp, id)| {
                let access = match bp.spec.as_ref().and_then(|s| s.location.as_ref()) {
                    Some(Location::Data(d)) => match DataAccess::try_from(d.access) {
                        Ok(DataAccess::Read) => "read",
                        Ok(DataAccess::ReadWrite) => "readWrite",
                        _ => "write",
                    },
                    _ => "write",
                };
                json!({"dataId": id, "accessType": access})
            })
            .collect();
        let result: Result<BreakpointsResponse, _> = self
            .client
            .call("setDataBreakpoints", json!({"breakpoints": entries}))
            .await;
        self.applied_data = !entries.is_empty();
        for (i, (bp, _)) in resolved.iter().enumerate() {
            let placed = result
                .as_ref()
                .ok()
                .and_then(|b| b.breakpoints.get(i).cloned());
            placements.push(self.placement(bp, 0, placed, result.as_ref().err()));
        }
        placements
    }

    /// The breakpoints that apply to this session now, with HERE's.
    async fn live_breakpoints(&self) -> Vec<Breakpoint> {
        let breakpoints = self.ctx.breakpoints.applying_to(&self.request.labels).await;
        let mut live: Vec<_> = breakpoints
            .into_iter()
            .filter(|b| !b.spent && b.spec.as_ref().is_some_and(|s| s.enabled != Some(false)))
            .filter(|_| !self.breakpoints_off)
            .collect();
        if let Some((path, line)) = &self.temp_breakpoint {
            live.push(Breakpoint {
                id: HERE_BREAKPOINT.into(),
                spec: Some(stepd_proto::v1::BreakpointSpec {
                    location: Some(Location::Source(stepd_proto::v1::SourceLocation {
                        path: path.clone(),
                        line: *line,
                        column: 0,
                    })),
                    ..Default::default()
                }),
                ..Default::default()
            });
        }
        live
    }

    /// Clears what the adapter was sent before and no longer applies: files
    /// left without breakpoints, function and exception breakpoints.
    async fn clear_unused(
        &mut self,
        by_file: &HashMap<String, Vec<&Breakpoint>>,
        functions: bool,
        filters: bool,
    ) {
        let gone: Vec<String> = self
            .applied_files
            .iter()
            .filter(|f| !by_file.contains_key(*f))
            .cloned()
            .collect();
        for path in gone {
            let _ = self
                .client
                .request(
                    "setBreakpoints",
                    json!({"source": {"path": path}, "breakpoints": []}),
                )
                .await;
        }
        self.applied_files = by_file.keys().cloned().collect();
        if !functions && self.applied_functions {
            let _ = self
                .client
                .request("setFunctionBreakpoints", json!({"breakpoints": []}))
                .await;
        }
        self.applied_functions = functions;
        if !filters && self.applied_exceptions {
            let _ = self
                .client
                .request("setExceptionBreakpoints", json!({"filters": []}))
                .await;
        }
        self.applied_exceptions = filters;
    }

    /// The source breakpoints of one file.
    async fn place_in_file(&mut self, path: &str, bps: &[&Breakpoint]) -> Vec<BreakpointPlacement> {
        let log_points = self.shared.supports(Capability::LogPoints);
        let conditions = self.shared.supports(Capability::ConditionalBreakpoints);
        let mut placements = Vec::new();
        // Adapters keep one entry per line: breakpoints sharing a line
        // become one entry, and each keeps its own condition and action.
        let groups = group_by(bps, |bp| {
            match bp.spec.as_ref().and_then(|s| s.location.as_ref()) {
                Some(Location::Source(src)) => (src.line, src.column),
                _ => (0, 0),
            }
        });
        let mut requested = Vec::new();
        for ((line, column), members) in &groups {
            let mut entry = json!({"line": line});
            if *column > 0 {
                entry["column"] = json!(column);
            }
            self.delegate(&mut entry, members, conditions, log_points);
            requested.push(entry);
        }
        let result: Result<BreakpointsResponse, _> = self
            .client
            .call(
                "setBreakpoints",
                json!({"source": {"path": path}, "breakpoints": requested}),
            )
            .await;
        for (i, ((line, _), members)) in groups.iter().enumerate() {
            let placed = result
                .as_ref()
                .ok()
                .and_then(|b| b.breakpoints.get(i).cloned());
            for bp in members {
                placements.push(self.placement(bp, *line, placed.clone(), result.as_ref().err()));
            }
        }
        placements
    }

    /// The function breakpoints.
    async fn place_functions(&mut self, functions: &[&Breakpoint]) -> Vec<BreakpointPlacement> {
        let conditions = self.shared.supports(Capability::ConditionalBreakpoints);
        let mut placements = Vec::new();
        let groups = group_by(functions, |bp| {
            match bp.spec.as_ref().and_then(|s| s.location.as_ref()) {
                Some(Location::Function(f)) => f.name.clone(),
                _ => String::new(),
            }
        });
        let result = if self.shared.supports(Capability::FunctionBreakpoints) {
            let mut requested = Vec::new();
            for (name, members) in &groups {
                let mut entry = json!({"name": name});
                // Function breakpoints have no log messages in DAP.
                self.delegate(&mut entry, members, conditions, false);
                requested.push(entry);
            }
            self.client
                .call::<BreakpointsResponse>(
                    "setFunctionBreakpoints",
                    json!({"breakpoints": requested}),
                )
                .await
        } else {
            Err(DapError::Failed(format!(
                "{} does not support function breakpoints",
                self.adapter.name()
            )))
        };
        for (i, (_, members)) in groups.iter().enumerate() {
            let placed = result
                .as_ref()
                .ok()
                .and_then(|b| b.breakpoints.get(i).cloned());
            for bp in members {
                placements.push(self.placement(bp, 0, placed.clone(), result.as_ref().err()));
            }
        }
        placements
    }

    /// The exception breakpoints: the filters the adapter offers are set,
    /// one it does not offer fails its breakpoint.
    async fn place_exception_filters(
        &mut self,
        filters: &[(String, &Breakpoint)],
    ) -> Vec<BreakpointPlacement> {
        let mut placements = Vec::new();
        let offered: Vec<String> = self
            .session
            .exception_filters
            .iter()
            .map(|f| f.id.clone())
            .collect();
        let (known, unknown): (Vec<_>, Vec<_>) =
            filters.iter().partition(|(f, _)| offered.contains(f));
        for (filter, bp) in &known {
            match self
                .exception_breakpoints
                .iter_mut()
                .find(|(id, _)| *id == bp.id)
            {
                Some((_, caught_by)) => caught_by.push(filter.clone()),
                None => self
                    .exception_breakpoints
                    .push((bp.id.clone(), vec![filter.clone()])),
            }
        }
        let ids: Vec<&String> = known.iter().map(|(f, _)| f).collect();
        let result = self
            .client
            .request("setExceptionBreakpoints", json!({"filters": ids}))
            .await;
        let mut seen = std::collections::HashSet::new();
        for (filter, bp) in known.iter().chain(unknown.iter()) {
            if !seen.insert(bp.id.clone()) {
                continue;
            }
            let error = if unknown.iter().any(|(f, b)| f == filter && b.id == bp.id) {
                Some(DapError::Failed(format!(
                    "{} offers no exception filter {filter:?} (it offers: {})",
                    self.adapter.name(),
                    offered.join(", ")
                )))
            } else {
                result.as_ref().err().cloned()
            };
            placements.push(self.placement(
                bp,
                0,
                Some(messages::Breakpoint {
                    verified: error.is_none(),
                    ..Default::default()
                }),
                error.as_ref(),
            ));
        }
        placements
    }

    pub(super) fn placement(
        &mut self,
        bp: &Breakpoint,
        requested_line: u32,
        placed: Option<messages::Breakpoint>,
        error: Option<&DapError>,
    ) -> BreakpointPlacement {
        let placed = placed.unwrap_or_default();
        let line = match bp.spec.as_ref().and_then(|s| s.location.as_ref()) {
            Some(Location::Source(src)) => {
                Some((src.path.as_str(), placed.line.unwrap_or(src.line)))
            }
            _ => None,
        };
        self.placed.note(&bp.id, placed.id, line);
        let message = match error {
            Some(err) => err.to_string(),
            None => placed.message.clone().unwrap_or_default(),
        };
        BreakpointPlacement {
            breakpoint_id: bp.id.clone(),
            requested_line,
            status: Some(BreakpointStatus {
                session_id: self.shared.id.clone(),
                verified: error.is_none() && placed.verified,
                actual_line: placed.line.unwrap_or(0),
                message,
                breakpoint_id: bp.id.clone(),
            }),
        }
    }

    pub(super) fn publish_status(&self, placement: &BreakpointPlacement) {
        if placement.breakpoint_id == HERE_BREAKPOINT {
            return;
        }
        let breakpoint = self
            .ctx
            .bus
            .with_view(|v| v.breakpoint(&placement.breakpoint_id))
            .unwrap_or_else(|| stepd_proto::v1::Breakpoint {
                id: placement.breakpoint_id.clone(),
                ..Default::default()
            });
        self.publish(Payload::BreakpointUpdated(Box::new(BreakpointUpdated {
            change: BreakpointChange::Status.into(),
            breakpoint: Some(breakpoint),
            status: placement.status.clone(),
        })));
    }

    /// What the adapter does itself for the breakpoints of one entry, and
    /// the entry's condition and log message: a shared condition goes to the
    /// adapter, differing ones are evaluated by stepd at each hit; a log
    /// point goes to the adapter when it supports them and nothing else
    /// (another breakpoint on the line, a hit condition or `max_hits`, which
    /// stepd counts across sessions) needs the stop.
    fn delegate(
        &mut self,
        entry: &mut Value,
        members: &[&Breakpoint],
        conditions: bool,
        log_points: bool,
    ) {
        let specs: Vec<_> = members
            .iter()
            .map(|bp| bp.spec.clone().unwrap_or_default())
            .collect();
        let first = specs[0].condition.trim().to_owned();
        let shared = specs.iter().all(|s| s.condition.trim() == first);
        let adapter_condition = conditions && shared && !first.is_empty();
        if adapter_condition {
            entry["condition"] = json!(first);
        }
        let spec = &specs[0];
        let adapter_log = log_points
            && specs.len() == 1
            && spec.action == BreakpointAction::Log as i32
            && spec.hit_condition.trim().is_empty()
            && spec.max_hits == 0
            && (first.is_empty() || adapter_condition);
        if adapter_log {
            entry["logMessage"] = json!(spec.log_message);
        }
        for bp in members {
            self.delegated.insert(
                bp.id.clone(),
                Delegated {
                    condition: adapter_condition,
                    log: adapter_log,
                },
            );
        }
    }

    /// Carries out the verdict of each breakpoint a stop names: counts the
    /// hit, runs LOG and SNAPSHOT (emulated where the adapter does not do
    /// them), and returns the ids of the breakpoints that pause. HERE's
    /// temporary breakpoint is not one of the project's; its mode decides.
    /// `by_adapter`: the adapter reported the stop as these breakpoints' hit,
    /// so it evaluated the conditions it was given (not so for a step that
    /// landed on their line).
    pub(super) async fn act_on_hit(
        &mut self,
        ids: &[String],
        thread_id: i64,
        frame_id: Option<i64>,
        by_adapter: bool,
    ) -> Vec<String> {
        let mut stops = Vec::new();
        for id in ids.iter().filter(|id| *id != HERE_BREAKPOINT) {
            let delegated = self.delegated.get(id).copied().unwrap_or_default();
            let condition = self
                .ctx
                .bus
                .with_view(|v| v.breakpoint(id))
                .and_then(|b| b.spec)
                .map(|s| s.condition)
                .unwrap_or_default();
            let condition_holds = (delegated.condition && by_adapter)
                || condition.trim().is_empty()
                || self.condition_holds(id, &condition, frame_id).await;
            let labels = &self.request.labels;
            let known = Known {
                labels,
                condition_holds,
                adapter_logs: delegated.log,
            };
            let now = now_us();
            let decided = self
                .ctx
                .breakpoints
                .hit_with(id, |bp| verdict::verdict(bp, now, &known))
                .await;
            match decided {
                Verdict::Act(Action::Stop { .. }) => stops.push(id.clone()),
                Verdict::Act(Action::Log { message }) => self.emulate_log(&message, frame_id).await,
                Verdict::Act(Action::Snapshot) => self.snapshot(id, thread_id, frame_id).await,
                _ => {}
            }
        }
        stops
    }

    /// A condition stepd evaluates itself (breakpoints sharing a line with
    /// different conditions): `evaluate` in the stopped frame. One that
    /// cannot be evaluated does not hold, as for probe conditions; the first
    /// failure per breakpoint is announced.
    async fn condition_holds(&mut self, id: &str, condition: &str, frame_id: Option<i64>) -> bool {
        let mut args =
            json!({"expression": condition, "context": self.shared.default_eval_context()});
        if let Some(frame) = frame_id {
            args["frameId"] = json!(frame);
        }
        match self.client.call::<EvaluateResponse>("evaluate", args).await {
            Ok(body) => truthy(&body.value),
            Err(err) => {
                if self.condition_errors.insert(id.to_owned()) {
                    self.publish(Payload::Notification(Notification {
                        level: NotificationLevel::Warning.into(),
                        message: format!(
                            "breakpoint {id}: condition {condition:?} could not be evaluated \
                             ({err}); it does not hold"
                        ),
                    }));
                }
                false
            }
        }
    }

    /// A log point the adapter did not handle: interpolate `{expr}` in the
    /// frame and emit the line as output.
    pub(super) async fn emulate_log(&mut self, message: &str, frame_id: Option<i64>) {
        let mut text = String::new();
        for part in log_message::parse(message) {
            match part {
                log_message::Part::Text(t) => text.push_str(&t),
                log_message::Part::Expr(expr) => {
                    let mut args =
                        json!({"expression": expr, "context": self.shared.default_eval_context()});
                    if let Some(frame) = frame_id {
                        args["frameId"] = json!(frame);
                    }
                    match self.client.call::<EvaluateResponse>("evaluate", args).await {
                        Ok(body) => text.push_str(&body.value),
                        Err(err) => text.push_str(&format!("<{expr}: {err}>")),
                    }
                }
            }
        }
        text.push('\n');
        let chunk = self
            .shared
            .output
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push("console", &text);
        self.publish(Payload::Output(stepd_proto::v1::Output {
            chunk: Some(chunk),
        }));
    }

    /// A snapshot breakpoint: capture the stack and the top frame's locals.
    pub(super) async fn snapshot(&mut self, id: &str, thread_id: i64, frame_id: Option<i64>) {
        let stack = self
            .client
            .call::<StackTraceResponse>(
                "stackTrace",
                json!({"threadId": thread_id, "startFrame": 0, "levels": SNAPSHOT_FRAMES}),
            )
            .await;
        let stack = self.reported(stack);
        let frames: Vec<_> = stack
            .as_ref()
            .map(|s| {
                s.stack_frames
                    .iter()
                    .map(|f| stop::location(self.adapter.kind, f))
                    .collect()
            })
            .unwrap_or_default();
        let total = stack
            .and_then(|s| s.total_frames)
            .unwrap_or(frames.len() as u64);
        let locals = self
            .top_locals(thread_id, frame_id)
            .await
            .map(|v| stop::locals(&v))
            .unwrap_or_default();
        let truncated = total > frames.len() as u64 || locals.len() >= stop::MAX_LOCALS;
        self.publish(Payload::BreakpointSnapshot(
            stepd_proto::v1::BreakpointSnapshot {
                breakpoint_id: id.to_owned(),
                thread_id,
                frames,
                locals,
                truncated,
                extra: None,
            },
        ));
    }
}

/// What the adapter does itself for one breakpoint.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Delegated {
    /// Its condition is on the adapter's entry.
    pub condition: bool,
    /// The adapter carries out its log message.
    pub log: bool,
}

/// Items grouped by key, in the order the keys first appear.
fn group_by<'a, T, K: PartialEq>(items: &[&'a T], key: impl Fn(&T) -> K) -> Vec<(K, Vec<&'a T>)> {
    let mut groups: Vec<(K, Vec<&'a T>)> = Vec::new();
    for item in items {
        let k = key(item);
        match groups.iter_mut().find(|(g, _)| *g == k) {
            Some((_, members)) => members.push(item),
            None => groups.push((k, vec![item])),
        }
    }
    groups
}

/// Whether an evaluation result reads as true: false, zero, null pointers
/// and empty results are false in every adapter's spelling.
fn truthy(result: &str) -> bool {
    let r = result.trim();
    let r = r.rsplit(") ").next().unwrap_or(r); // "(bool) false" from lldb's repl
    !(r.is_empty()
        || matches!(
            r,
            "false" | "False" | "None" | "nil" | "null" | "NULL" | "'\\0'"
        )
        || r.parse::<f64>().is_ok_and(|n| n == 0.0)
        || r.strip_prefix("0x")
            .is_some_and(|h| !h.is_empty() && h.bytes().all(|b| b == b'0')))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_read_as_each_language_spells_truth() {
        for yes in ["True", "true", "1", "(bool) true", "0x1", "'a'", "[1]"] {
            assert!(truthy(yes), "{yes}");
        }
        for no in [
            "False",
            "false",
            "0",
            "0.0",
            "None",
            "nil",
            "",
            "0x0000",
            "(bool) false",
        ] {
            assert!(!truthy(no), "{no}");
        }
    }
}
