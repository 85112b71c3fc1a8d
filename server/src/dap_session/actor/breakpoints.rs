//! Breakpoints in a DAP session: sending the project's breakpoints to the
//! adapter, and what a hit does (count, log, snapshot, pause).

use std::collections::HashMap;

use serde_json::{Value, json};
use stepd_proto::v1::{
    BreakpointAction, BreakpointChange, BreakpointPlacement, BreakpointStatus, BreakpointUpdated,
    breakpoint_spec::Location, event::Payload,
};

use super::{Actor, commands::HERE_BREAKPOINT};
use crate::dap_session::{log_message, stop};
use crate::{breakpoints::HitCondition, dap::client::DapError};

/// Frames a snapshot breakpoint captures at most.
const SNAPSHOT_FRAMES: u32 = 20;

impl Actor {
    pub(super) async fn apply_breakpoints(&mut self) -> Vec<BreakpointPlacement> {
        let breakpoints = match self.ctx.breakpoints.list(&self.request.labels).await {
            Ok(b) => b,
            Err(err) => {
                tracing::warn!(%err, "could not read breakpoints for a new session");
                return Vec::new();
            }
        };
        let mut live: Vec<_> = breakpoints
            .into_iter()
            .filter(|b| !b.spent && b.spec.as_ref().is_some_and(|s| s.enabled != Some(false)))
            .filter(|_| !self.breakpoints_off)
            .collect();
        if let Some((path, line)) = &self.temp_breakpoint {
            live.push(stepd_proto::v1::Breakpoint {
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
        let mut placements = Vec::new();
        let log_points = self.shared.supports("supportsLogPoints");
        let conditions = self.shared.supports("supportsConditionalBreakpoints");

        let mut by_file: HashMap<String, Vec<&stepd_proto::v1::Breakpoint>> = HashMap::new();
        let mut functions = Vec::new();
        let mut filters: Vec<(String, &stepd_proto::v1::Breakpoint)> = Vec::new();
        for bp in &live {
            match bp.spec.as_ref().and_then(|s| s.location.as_ref()) {
                Some(Location::Source(src)) => {
                    by_file.entry(src.path.clone()).or_default().push(bp)
                }
                Some(Location::Function(_)) => functions.push(bp),
                Some(Location::Exception(e)) => {
                    filters.extend(e.filter_ids.iter().map(|f| (f.clone(), bp)));
                }
                _ => {}
            }
        }
        self.dap_breakpoints.clear();
        self.placed_lines.clear();
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
        if functions.is_empty() && self.applied_functions {
            let _ = self
                .client
                .request("setFunctionBreakpoints", json!({"breakpoints": []}))
                .await;
        }
        self.applied_functions = !functions.is_empty();
        if filters.is_empty() && self.applied_exceptions {
            let _ = self
                .client
                .request("setExceptionBreakpoints", json!({"filters": []}))
                .await;
        }
        self.applied_exceptions = !filters.is_empty();
        for (path, bps) in by_file {
            let requested: Vec<Value> = bps
                .iter()
                .map(|bp| {
                    let spec = bp.spec.clone().unwrap_or_default();
                    let mut entry = json!({});
                    if let Some(Location::Source(src)) = &spec.location {
                        entry["line"] = json!(src.line);
                        if src.column > 0 {
                            entry["column"] = json!(src.column);
                        }
                    }
                    if conditions && !spec.condition.is_empty() {
                        entry["condition"] = json!(spec.condition);
                    }
                    if log_points && spec.action == stepd_proto::v1::BreakpointAction::Log as i32 {
                        entry["logMessage"] = json!(spec.log_message);
                    }
                    entry
                })
                .collect();
            let result = self
                .client
                .request(
                    "setBreakpoints",
                    json!({"source": {"path": path}, "breakpoints": requested}),
                )
                .await;
            for (i, bp) in bps.iter().enumerate() {
                let requested_line = match bp.spec.as_ref().and_then(|s| s.location.as_ref()) {
                    Some(Location::Source(src)) => src.line,
                    _ => 0,
                };
                let placed = result
                    .as_ref()
                    .ok()
                    .and_then(|b| b["breakpoints"].get(i).cloned());
                placements.push(self.placement(bp, requested_line, placed, result.as_ref().err()));
            }
        }
        if !functions.is_empty() {
            let result = if self.shared.supports("supportsFunctionBreakpoints") {
                let requested: Vec<Value> = functions
                    .iter()
                    .map(|bp| {
                        let spec = bp.spec.clone().unwrap_or_default();
                        let name = match spec.location {
                            Some(Location::Function(f)) => f.name,
                            _ => String::new(),
                        };
                        let mut entry = json!({"name": name});
                        if conditions && !spec.condition.is_empty() {
                            entry["condition"] = json!(spec.condition);
                        }
                        entry
                    })
                    .collect();
                self.client
                    .request("setFunctionBreakpoints", json!({"breakpoints": requested}))
                    .await
            } else {
                Err(DapError::Failed(format!(
                    "{} does not support function breakpoints",
                    self.adapter.name()
                )))
            };
            for (i, bp) in functions.iter().enumerate() {
                let placed = result
                    .as_ref()
                    .ok()
                    .and_then(|b| b["breakpoints"].get(i).cloned());
                placements.push(self.placement(bp, 0, placed, result.as_ref().err()));
            }
        }
        if !filters.is_empty() {
            let offered: Vec<String> = self
                .session
                .exception_filters
                .iter()
                .map(|f| f.id.clone())
                .collect();
            let (known, unknown): (Vec<_>, Vec<_>) =
                filters.iter().partition(|(f, _)| offered.contains(f));
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
                    Some(json!({"verified": error.is_none()})),
                    error.as_ref(),
                ));
            }
        }
        placements
    }

    pub(super) fn placement(
        &mut self,
        bp: &stepd_proto::v1::Breakpoint,
        requested_line: u32,
        placed: Option<Value>,
        error: Option<&DapError>,
    ) -> BreakpointPlacement {
        let placed = placed.unwrap_or(Value::Null);
        if let Some(id) = placed["id"].as_i64() {
            self.dap_breakpoints.insert(id, bp.id.clone());
        }
        if let Some(Location::Source(src)) = bp.spec.as_ref().and_then(|s| s.location.as_ref()) {
            let line = placed["line"]
                .as_u64()
                .and_then(|l| u32::try_from(l).ok())
                .unwrap_or(src.line);
            self.placed_lines
                .entry((src.path.clone(), line))
                .or_default()
                .push(bp.id.clone());
        }
        let message = match error {
            Some(err) => err.to_string(),
            None => placed["message"].as_str().unwrap_or_default().to_owned(),
        };
        BreakpointPlacement {
            breakpoint_id: bp.id.clone(),
            requested_line,
            status: Some(BreakpointStatus {
                session_id: self.shared.id.clone(),
                verified: error.is_none() && placed["verified"].as_bool().unwrap_or(false),
                actual_line: u32::try_from(placed["line"].as_u64().unwrap_or(0)).unwrap_or(0),
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
        self.publish(Payload::BreakpointUpdated(BreakpointUpdated {
            change: BreakpointChange::Status.into(),
            breakpoint: Some(breakpoint),
            status: placement.status.clone(),
        }));
    }

    /// Counts a hit on each matched breakpoint and runs their actions.
    /// Returns whether the program should pause: some matched STOP
    /// breakpoint's hit condition holds. LOG and SNAPSHOT breakpoints are
    /// carried out here (emulated where the adapter lacks log points).
    pub(super) async fn act_on_hit(
        &mut self,
        ids: &[String],
        thread_id: i64,
        frame_id: Option<i64>,
    ) -> bool {
        let mut pause = false;
        for id in ids {
            let Ok(Some(bp)) = self.ctx.breakpoints.hit(id).await else {
                // Removed or expired meanwhile: the adapter still had it; do
                // not pause for it.
                continue;
            };
            let spec = bp.spec.clone().unwrap_or_default();
            let hits = bp.hit_count;
            let passes = spec.hit_condition.trim().is_empty()
                || HitCondition::parse(&spec.hit_condition).is_ok_and(|c| c.passes(hits));
            let within_max = spec.max_hits == 0 || hits <= u64::from(spec.max_hits);
            if !passes || !within_max {
                continue;
            }
            match BreakpointAction::try_from(spec.action).unwrap_or(BreakpointAction::Stop) {
                BreakpointAction::Log => self.emulate_log(&spec.log_message, frame_id).await,
                BreakpointAction::Snapshot => self.snapshot(id, thread_id, frame_id).await,
                BreakpointAction::Stop | BreakpointAction::Unspecified => pause = true,
            }
        }
        pause
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
                    match self.client.request("evaluate", args).await {
                        Ok(body) => text.push_str(body["result"].as_str().unwrap_or_default()),
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
            .request(
                "stackTrace",
                json!({"threadId": thread_id, "startFrame": 0, "levels": SNAPSHOT_FRAMES}),
            )
            .await
            .unwrap_or(Value::Null);
        let frames: Vec<_> = stack["stackFrames"]
            .as_array()
            .map(|f| f.iter().map(stop::location).collect())
            .unwrap_or_default();
        let total = stack["totalFrames"].as_u64().unwrap_or(frames.len() as u64);
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
