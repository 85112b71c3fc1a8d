//! What `stepctl debug` does with each event of its stream: pauses shown
//! and kept, answers noted, output and stops in the order they happened, the
//! session's end.

use std::{collections::HashSet, time::Instant};

use stepd_proto::v1::{BreakpointChange, Event, Pause, SessionEnded, SessionState, event::Payload};

use super::{Debugger, Flow, STOP_GRACE, Waiting, expects_expression, merge_part};
use crate::{
    colour,
    render::{
        events,
        pauses::{display, inspect_lines, where_text},
    },
};

impl Debugger {
    pub(super) fn on_event(&mut self, event: Event) -> Flow {
        if event.seq != 0 {
            if event.seq <= self.stream.cursor {
                return Flow::Go;
            }
            self.stream.cursor = event.seq;
        }
        let ours = event.session_id == self.session_id;
        let output = matches!(event.payload, Some(Payload::Output(_)));
        let new_stop = matches!(
            &event.payload,
            Some(Payload::Stopped(s)) if s.pause.as_ref().is_some_and(|p| {
                !self.pending.iter().any(|q| q.key == p.key)
            })
        );
        if ours && new_stop && self.deferred.is_none() {
            // The program's output can reach the daemon after the stop that
            // followed it (debugpy sends it on another channel): output that
            // comes within STOP_GRACE is shown before the stop.
            self.deferred = Some((event, Instant::now() + STOP_GRACE));
            return Flow::Go;
        }
        if !(ours && output)
            && let Flow::End(last) = self.show_deferred()
        {
            return Flow::End(last);
        }
        self.handle(event)
    }

    /// The stop held back for late output, shown now.
    pub(super) fn show_deferred(&mut self) -> Flow {
        match self.deferred.take() {
            Some((event, _)) => self.handle(event),
            None => Flow::Go,
        }
    }

    pub(super) fn handle(&mut self, event: Event) -> Flow {
        let ours = event.session_id == self.session_id;
        if ours
            && let Some(Waiting {
                held_since: Some(since),
                ..
            }) = &mut self.waiting
        {
            // Something happened in the program: it is not held (yet).
            *since = Instant::now();
        }
        match event.payload {
            Some(Payload::Snapshot(part)) => {
                let Some(snapshot) = merge_part(&mut self.snapshot_parts, part) else {
                    return Flow::Go;
                };
                self.stream.cursor = snapshot.seq;
                if let Some(session) = snapshot.sessions.iter().find(|s| s.id == self.session_id)
                    && session.state == SessionState::Ended as i32
                {
                    return self.ended(&SessionEnded {
                        reason: session.end_reason,
                        detail: String::new(),
                        exit_code: session.exit_code,
                        signal: session.signal.clone(),
                    });
                }
                let pauses: Vec<Pause> = snapshot
                    .pauses
                    .into_iter()
                    .filter(|p| p.session_id == self.session_id)
                    .collect();
                // What is no longer pending was resolved meanwhile.
                let keys: HashSet<&str> = pauses.iter().map(|p| p.key.as_str()).collect();
                // What happened while the stream was away is not known.
                self.waiting = None;
                self.pending.retain(|p| keys.contains(p.key.as_str()));
                for pause in pauses {
                    self.on_pause(pause);
                }
                self.fix_current();
            }
            Some(Payload::Stopped(stopped)) if ours => {
                if let Some(pause) = stopped.pause {
                    self.scope.hit(&pause.breakpoint_ids);
                    // A moving command's outcome is a stop after its own
                    // pause resolved, not one that was on its way before.
                    let pending = |key: &str| self.pending.iter().any(|p| p.key == key);
                    if self.waiting.as_ref().is_some_and(|w| {
                        (w.key == pause.key && !w.failed && w.refused.is_none())
                            || (w.moves && !pending(&pause.key) && !pending(&w.key))
                    }) {
                        self.waiting = None;
                    }
                    self.on_pause(pause);
                }
            }
            Some(Payload::PauseResolved(resolved)) if ours => {
                let was_current = self.current.as_deref() == Some(resolved.key.as_str());
                self.pending.retain(|p| p.key != resolved.key);
                if let Some(waiting) = &mut self.waiting {
                    if waiting.moves && waiting.key == resolved.key && !self.pending.is_empty() {
                        waiting.held_since = Some(Instant::now());
                    } else if self.pending.is_empty() {
                        waiting.held_since = None;
                    }
                }
                self.evals.remove(&resolved.key);
                if self.expression_for.as_deref() == Some(resolved.key.as_str()) {
                    self.expression_for = None;
                }
                // `by` is who the daemon authenticated, so our own answers
                // are told apart by key.
                if !self.answered.remove(&resolved.key) {
                    self.print(events::resolved_line(&resolved));
                }
                if was_current {
                    self.current = None;
                    self.fix_current();
                    if let Some(pause) = self.current_pause() {
                        let text = format!(
                            "commands now go to pause {} (thread {}, {})",
                            pause.key,
                            pause.thread_id,
                            colour::location(
                                &pause.location.as_ref().map(where_text).unwrap_or_default()
                            )
                        );
                        self.print(text);
                    }
                }
            }
            Some(Payload::SessionEnded(end)) if ours => return self.ended(&end),
            Some(Payload::Output(output)) if ours => {
                if let Some(chunk) = output.chunk
                    && chunk.category != "telemetry"
                    && !events::adapter_banner(&chunk)
                {
                    self.terminal.output(&chunk.text);
                }
            }
            Some(Payload::Trace(trace)) if ours => self.print(events::trace_line(&trace)),
            Some(Payload::Stack(stack)) if ours => {
                let selected = self.view.selected(self.current.as_deref());
                let lines = events::stack_lines(&stack, Some(selected));
                self.view.keep_stack(&stack.key, stack.frames);
                self.say(lines);
            }
            Some(Payload::EvalError(error)) if ours => {
                if let Some(waiting) = &mut self.waiting
                    && waiting.key == error.key
                    && waiting.evaluates
                {
                    waiting.failed = true;
                    if waiting.refused.is_some() {
                        self.waiting = None;
                    }
                }
                self.evals.remove(&error.key);
                self.say(events::eval_error_lines(&error));
            }
            Some(Payload::Notification(note)) if ours || event.session_id.is_empty() => {
                self.print(events::notification_line(&note));
            }
            Some(Payload::BreakpointUpdated(update))
                if ours
                    && update.change == BreakpointChange::Status as i32
                    && update
                        .breakpoint
                        .as_ref()
                        .is_some_and(|b| self.added.contains(&b.id)) =>
            {
                let id = update.breakpoint.map(|b| b.id).unwrap_or_default();
                let status = update.status.unwrap_or_default();
                if status.verified && status.actual_line == 0 {
                    // A function, exception or data breakpoint has no line.
                    self.print(format!("breakpoint {id} placed"));
                } else if status.verified {
                    self.print(format!(
                        "breakpoint {id} placed on line {}",
                        status.actual_line
                    ));
                } else {
                    self.error(&format!("breakpoint {id} not placed: {}", status.message));
                }
            }
            Some(Payload::Error(error)) => {
                // An evaluation's failure is shown once, from its eval_error.
                if let Some(waiting) = &mut self.waiting
                    && waiting.key == error.key
                    && waiting.evaluates
                    && (waiting.failed
                        || error.reason == stepd_proto::v1::ErrorReason::AdapterError as i32)
                {
                    if waiting.failed {
                        self.waiting = None;
                    } else {
                        waiting.refused = Some(events::stream_error_line(&error));
                        waiting.held_since = Some(Instant::now());
                    }
                    return Flow::Go;
                }
                self.done_waiting(&error.key);
                if self.expression_for.as_deref() == Some(error.key.as_str()) {
                    self.expression_for = None;
                }
                self.print(events::stream_error_line(&error));
            }
            Some(Payload::Gap(gap)) => {
                self.print(format!("{}; catching up", events::gap_line(&gap)));
            }
            _ => {}
        }
        Flow::Go
    }

    /// The outcome of the command sent to `key` (any command for no key).
    pub(super) fn done_waiting(&mut self, key: &str) {
        if key.is_empty() || self.waiting.as_ref().is_some_and(|w| w.key == key) {
            self.waiting = None;
        }
    }

    /// A moving command's pause resolved, but the program shows no progress
    /// while other pauses are pending: say so, and take the next command.
    /// (Also: an evaluation's error whose eval_error never came.)
    pub(super) fn held(&mut self) {
        let Some(waiting) = self.waiting.take() else {
            return;
        };
        if let Some(line) = waiting.refused {
            // The eval_error that would have said it never came.
            return self.print(line);
        }
        let holders: Vec<String> = self
            .pending
            .iter()
            .map(|p| format!("{} (thread {})", p.key, p.thread_id))
            .collect();
        if holders.is_empty() {
            return;
        }
        self.error(&format!(
            "pause {} was answered, but the program cannot go on while {} {} pending: \
             answer {} (pauses lists them)",
            waiting.key,
            holders.join(", "),
            if holders.len() == 1 { "is" } else { "are" },
            if holders.len() == 1 { "it" } else { "them" },
        ));
    }

    pub(super) fn ended(&mut self, end: &SessionEnded) -> Flow {
        Flow::End(events::ended_line(&self.session_id, end))
    }

    /// Makes a pending pause current when none is.
    pub(super) fn fix_current(&mut self) {
        let valid = self
            .current
            .as_ref()
            .is_some_and(|k| self.pending.iter().any(|p| &p.key == k));
        if !valid {
            self.current = self.pending.last().map(|p| p.key.clone());
            if let Some(key) = self.current.clone() {
                self.view.display_due = Some(key);
            }
        }
        self.refresh_names();
    }

    /// Tab completes the locals of the current pause.
    pub(super) fn refresh_names(&self) {
        let locals = self
            .current_pause()
            .map(|p| p.locals.iter().map(|l| l.name.clone()).collect())
            .unwrap_or_default();
        if let Ok(mut names) = self.names.lock() {
            *names = locals;
        }
    }

    /// A stopped pause: new ones in full, re-sent ones by what changed.
    pub(super) fn on_pause(&mut self, pause: Pause) {
        let Some(index) = self.pending.iter().position(|p| p.key == pause.key) else {
            let mut lines = events::pause_text(&pause);
            let others = self.current.clone().filter(|k| *k != pause.key);
            self.pending.push(pause.clone());
            match others {
                Some(current) if self.pending.iter().any(|p| p.key == current) => {
                    lines.push(format!(
                        "({} pauses pending; commands still go to {current}: pauses lists them, sw {} switches)",
                        self.pending.len(),
                        pause.key
                    ));
                }
                _ => {
                    self.current = Some(pause.key.clone());
                    self.view.display_due = Some(pause.key.clone());
                    self.refresh_names();
                }
            }
            self.say(lines);
            return;
        };
        let before = &self.pending[index];
        if pause.revision <= before.revision {
            return;
        }
        let mut lines = Vec::new();
        if expects_expression(&pause) {
            if !expects_expression(before) {
                lines.push(format!(
                    "{}:",
                    if pause.prompt.is_empty() {
                        "expression"
                    } else {
                        pause.prompt.as_str()
                    }
                ));
            }
        } else {
            let ours = self.evals.remove(&pause.key);
            if let Some(value) = &pause.debug_value
                && (ours || before.debug_value.as_ref() != Some(value))
            {
                lines.push(format!("= {}", colour::value(&display(value))));
            }
            if let Some(rendering) = pause
                .inspect
                .as_ref()
                .filter(|_| pause.inspect != before.inspect)
            {
                // The rendering alone: the locals were shown with the stop.
                lines.extend(inspect_lines(rendering));
            } else if pause.notes != before.notes {
                lines.extend(pause.notes.iter().map(|n| format!("note: {n}")));
            }
        }
        self.pending[index] = pause;
        self.refresh_names();
        self.say(lines);
    }
}
