//! What the probe sends its session: points that hold (`Hit`), evaluation
//! results, reports, and holds it gives up. The actor decides with `hits`,
//! `holds`, `evals` and `reports`, and acts.

use std::{collections::HashMap, time::Duration};

use stepd_proto::v1::{
    BaggageEntry, CommandKind, ConnectRequest, EvalResult, Hit, NotificationLevel, PointInfo,
    Reports, ResumeDecision, SessionState, TraceReport, connect_request::Message as In,
    event::Payload,
};
use tokio::time::Instant;

use super::{Held, ProbeSession};
use crate::hits::{self, AtHit, Stops};
use crate::{evals, holds, reports, request_scope};
use stepd_core::{
    breakpoints::{
        Action, Known, Verdict,
        condition::{self},
        verdict,
    },
    error::ApiError,
    session::pause::book,
    time::{now_us, us_from_timestamp},
};

impl ProbeSession {
    pub(super) async fn on_probe(&mut self, request: ConnectRequest) {
        match request.message {
            Some(In::Hit(hit)) => self.on_hit(hit).await,
            Some(In::EvalResult(result)) => self.on_eval_result(result),
            Some(In::Reports(reports)) => self.on_reports(reports).await,
            Some(In::Withdraw(withdraw)) => self.withdraw(&withdraw.hit_id),
            // Keeps proxies from cutting a quiet stream; nothing to answer.
            Some(In::Heartbeat(_)) => {}
            Some(In::Hello(_)) => {
                self.notify(
                    NotificationLevel::Warning,
                    "the probe said Hello twice; ignored",
                );
            }
            None => {}
        }
    }

    async fn on_hit(&mut self, hit: Hit) {
        // Refused before anything counts it: the earlier hold with this id
        // and every breakpoint's hit count stay as they were.
        if let Err(error) = stepd_core::limits::hit(&hit) {
            return self.refuse(&hit.hit_id, &error);
        }
        if self.holds.key_of(&hit.hit_id).is_some() {
            let error = ApiError::invalid_field(
                "hit.hit_id",
                format!(
                    "hit {} is already held; a Hit needs an id no pending hold has",
                    stepd_core::error::quote(&hit.hit_id)
                ),
            );
            return self.refuse(&hit.hit_id, &error);
        }
        if let Some(since) = hit.held_since {
            return self.rehold(hit, since);
        }
        let point = hit.point.clone().unwrap_or_default();
        let depth = u32::try_from(point.scope_path.len()).unwrap_or(u32::MAX);
        let at = self.mode.at(hit.outside_request_scope, &hit.coor, depth);
        let named = !hit.breakpoint_ids.is_empty();
        let stops = if named {
            self.count_hit(&hit, &point).await
        } else {
            Stops::default()
        };
        match hits::decide(at, named, &stops, self.hold_limit) {
            AtHit::Hold { limit, scope } => self.hold(hit, point, limit, None, scope),
            AtHit::Continue => self.resume(&hit.hit_id, ResumeDecision::Continue, None, None, None),
        }
    }

    /// Counts the hit on each breakpoint the probe named, and does what
    /// those that do not stop say (LOG, SNAPSHOT); returns what those that
    /// stop require.
    async fn count_hit(&mut self, hit: &Hit, point: &PointInfo) -> Stops {
        // The probe evaluated each matcher's condition before naming it.
        let labels: HashMap<String, String> = self.hello.labels.clone();
        let known = Known {
            labels: &labels,
            condition_holds: true,
            adapter_logs: false,
        };
        let mut stops = Stops::default();
        for id in &hit.breakpoint_ids {
            let now = now_us();
            let mut scope = None;
            let decided = self
                .ctx
                .breakpoints
                .hit_with(id, |bp| {
                    scope = bp.and_then(request_scope::of_breakpoint);
                    verdict::verdict(bp, now, &known)
                })
                .await;
            match decided {
                Verdict::Act(Action::Stop { hold_limit }) => stops.stop(scope, hold_limit),
                Verdict::Act(Action::Log { message }) => self.log(&message, point),
                Verdict::Act(Action::Snapshot) => self.snapshot(id, hit),
                _ => {}
            }
        }
        stops
    }

    /// A hold the program kept across a lost stream, re-reported after
    /// Welcome: not a new breakpoint hit (it was counted when it began, and
    /// a breakpoint spent by it still holds it), and its limit, the same as
    /// a fresh hold's, runs from when the program began to wait.
    fn rehold(&mut self, hit: Hit, since: prost_types::Timestamp) {
        let breakpoints: Vec<_> = hit
            .breakpoint_ids
            .iter()
            .filter_map(|id| self.ctx.bus.with_view(|v| v.breakpoint(id)))
            .collect();
        let set = breakpoints
            .iter()
            .filter_map(|bp| bp.spec.as_ref()?.hold_limit)
            .filter_map(|d| Duration::try_from(d).ok());
        let limit = holds::limit(set, self.hold_limit);
        // The mode it was held under belonged to the old session: the
        // request it is in is known only from its breakpoints.
        let stops: Vec<_> = breakpoints
            .iter()
            .map(request_scope::of_breakpoint)
            .collect();
        let scope = request_scope::of_stops(&stops);
        let waited = now_us().saturating_sub(us_from_timestamp(&since));
        let waited = Duration::from_micros(u64::try_from(waited).unwrap_or(0));
        let Some(left) = holds::left(limit, waited) else {
            self.notify(
                NotificationLevel::Warning,
                &format!(
                    "hold {} was re-reported past its limit and continues",
                    stepd_core::error::quote(&hit.hit_id)
                ),
            );
            return self.resume(&hit.hit_id, ResumeDecision::Continue, None, None, None);
        };
        let point = hit.point.clone().unwrap_or_default();
        self.hold(hit, point, left, Some(since), scope);
    }

    /// A LOG breakpoint at a point: the line (`hits::log_line`) becomes the
    /// session's output.
    fn log(&self, message: &str, point: &PointInfo) {
        // The line leaves the daemon: it reads the point as clients see it.
        let mut shown = point.payload.clone();
        if let Some(payload) = &mut shown {
            self.ctx.redactor.value(payload);
        }
        let value = shown
            .as_ref()
            .map(stepd_core::json::from_value)
            .unwrap_or(serde_json::Value::Null);
        let labels = self
            .ctx
            .redactor
            .labels_of(&self.hello.labels)
            .into_iter()
            .collect();
        let at = condition::Point {
            kind: &point.kind,
            name: &point.name,
            value: &value,
            labels: &labels,
        };
        let text = hits::log_line(message, &at);
        let chunk = self
            .output
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push("console", &text);
        self.publish(Payload::Output(stepd_proto::v1::Output {
            chunk: Some(chunk),
        }));
    }

    /// A SNAPSHOT breakpoint at a point: the stack and locals the probe
    /// reported, as an event; the program does not wait.
    fn snapshot(&self, id: &str, hit: &Hit) {
        self.publish(Payload::BreakpointSnapshot(
            stepd_proto::v1::BreakpointSnapshot {
                breakpoint_id: id.to_owned(),
                thread_id: 0,
                frames: if hit.stack.is_empty() {
                    hit.location.iter().cloned().collect()
                } else {
                    hit.stack.clone()
                },
                locals: hit.locals.clone(),
                truncated: false,
                extra: None,
            },
        ));
    }

    /// Opens the pause of a hold lasting at most `limit`; `since` is when a
    /// re-reported hold began, `scope` the request it is known to be in.
    fn hold(
        &mut self,
        hit: Hit,
        point: PointInfo,
        limit: Duration,
        since: Option<prost_types::Timestamp>,
        scope: Vec<BaggageEntry>,
    ) {
        let key = book::new_key();
        let caps = self.hello.capabilities.unwrap_or_default();
        let input_type = hits::input_type(caps, &point, hit.evaluable, !hit.locals.is_empty());
        let pause = hits::pause_of(&self.id, key.clone(), &hit, point, input_type, since);
        let deadline = Instant::now() + limit;
        let hit_id = hit.hit_id.clone();
        // Copied only with export on: nothing on the hold's path otherwise.
        let (traceparent, tracestate) = if stepd_core::trace::enabled() {
            (hit.traceparent.clone(), hit.tracestate.clone())
        } else {
            Default::default()
        };
        let remote = stepd_core::trace::Remote {
            traceparent: &traceparent,
            tracestate: &tracestate,
        };
        let held = Held {
            hit,
            deadline,
            scope,
        };
        if let Err(error) = self.book.try_open(pause, held, self.max_pauses, remote) {
            return self.refuse(&hit_id, &error);
        }
        // Waiters get the book's copy: masked, with its trace ids (copied
        // only when someone waits: a hold's path pays nothing otherwise).
        let kept = (!self.waiters.is_empty())
            .then(|| self.book.kept(&key))
            .flatten();
        self.holds.hold(hit_id, key, deadline);
        self.session.state = SessionState::Stopped.into();
        if let Some(pause) = kept {
            self.waiters.held(&pause);
        }
    }

    fn on_eval_result(&mut self, result: EvalResult) {
        let Some(pending) = self.evals.answered(&result.eval_id) else {
            return;
        };
        if self.book.get(&pending.key).is_none() {
            let gone = self.book.gone(&pending.key);
            return pending.fail(gone);
        }
        let evaluated = evals::outcome(result);
        let _ = pending.reply.send(self.book.evaluated(
            &pending.key,
            &pending.code,
            &pending.by,
            evaluated,
        ));
    }

    async fn on_reports(&mut self, mut batch: Reports) {
        if let Some(warning) = reports::drop_oversized(&mut batch) {
            self.notify(NotificationLevel::Warning, &warning);
        }
        self.publish_all(reports::payloads(&mut batch));
        self.on_trace(std::mem::take(&mut batch.trace)).await;
        if batch.dropped > 0 {
            self.dropped_reports += batch.dropped;
            self.publish(reports::dropped(batch.dropped, self.dropped_reports));
        }
    }

    /// Trace records of a TRACE run, numbered across batches. At the step
    /// limit the probe is put in step mode, so it holds at its next point;
    /// records the probe sent before it heard that are not shown as steps.
    async fn on_trace(&mut self, records: Vec<TraceReport>) {
        let mut spent = 0usize;
        for record in records {
            let Some(step) = self.mode.trace_step() else {
                spent += 1;
                continue;
            };
            self.publish(reports::trace_step(step.key, step.step, record));
            if step.last {
                self.push_armed().await;
            }
        }
        if spent > 0 {
            // Never silent: the program passed these before it heard to hold.
            self.notify(
                NotificationLevel::Info,
                &format!(
                    "the probe passed {spent} more points before its TRACE step limit reached it"
                ),
            );
        }
    }

    /// The probe gave up a hold (its context ended, its task was cancelled):
    /// the pause resolves like a release, but nobody is waiting for a Resume.
    fn withdraw(&mut self, hit_id: &str) {
        let Some(key) = self.holds.key_of(hit_id).map(str::to_owned) else {
            // Usually a hold that was answered while the probe gave up on it.
            tracing::debug!(hit_id, "withdraw for a hit that is not held; ignored");
            return;
        };
        if let Some(entry) = self
            .book
            .resolve(&key, CommandKind::Unspecified, "withdrawn")
        {
            self.forget(&entry);
        }
        // An evaluation in flight at this hold can no longer be answered.
        let book = &self.book;
        self.evals.hold_ended(&key, || book.gone(&key));
        self.after_release();
    }
}
