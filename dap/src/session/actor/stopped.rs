//! A stop and a resume: what a stop becomes (observe, decide, act) and
//! how a resume ends the pauses it moves.

use std::sync::atomic::Ordering;

use serde_json::{Value, json};
use stepd_proto::v1::{
    CommandKind, Continued, Location, Pause, PauseReason, SessionState, StableState, event::Payload,
};

use super::{
    Actor, PauseCtx, judge, locals,
    steering::{self, Steering, StopHere},
};
use crate::{
    messages,
    session::{handles, stop},
};
use stepd_core::{session::pause::book, time::now_timestamp};

/// What the actor gathered about a stop before it judges it.
struct Observed {
    event: messages::StoppedEvent,
    /// The adapter's own word for the stop.
    raw_reason: String,
    /// Why it stopped, as stepd reads the adapter's reason.
    reason: PauseReason,
    thread_id: i64,
    top: Top,
    /// The stepd breakpoints the stop names.
    named: Vec<String>,
    /// The named breakpoints whose verdict stops.
    stops: Vec<String>,
}

/// The stopped thread's top frame, as `stackTrace` told it.
#[derive(Default)]
struct Top {
    frame_id: Option<i64>,
    location: Option<Location>,
    name: String,
    hint: String,
    /// Stack depth, when the adapter told.
    depth: Option<u32>,
}

impl Actor {
    /// Records a stop: a new epoch, the pause with its location and locals,
    /// the `stopped` event. Returns the stable state it makes, or None when
    /// the stop was not shown (a breakpoint that does not stop, a step going
    /// on through one, a mode's silent step). It observes (the stop's thread,
    /// top frame, the breakpoints it names and their verdicts), asks
    /// `judge` what the stop is, and acts on the answer.
    pub(super) async fn on_stopped(&mut self, body: &Value) -> Option<StableState> {
        let seen = self.observe_stop(body).await?;
        let step = self.exec.take_step();
        let judged = judge::judge(judge::StopFacts {
            reason: seen.reason,
            named: seen.named.clone(),
            stops: seen.stops.clone(),
            // A hit that raced its breakpoints' removal (an expiry, a
            // change) applies nowhere.
            only_retired_named: self.placed.only_retired(&seen.event.hit_breakpoint_ids),
            expect_pause: self.exec.pause_out(),
        });
        let (reason, breakpoint_ids) = self.carry_out(judged, &seen, step).await?;
        Some(self.show_stop(seen, reason, breakpoint_ids).await)
    }

    /// The facts of a stop: its thread, its top frame, the breakpoints it
    /// names, and the verdicts of those (carried out here: LOG and
    /// SNAPSHOT act whatever the stop turns out to be). None for a stop that
    /// is no news.
    async fn observe_stop(&mut self, body: &Value) -> Option<Observed> {
        // The program did stop, whatever the adapter got wrong in saying so:
        // the stop is shown, and the fault said.
        let event = match messages::parse::<messages::StoppedEvent>("stopped event", body.clone()) {
            Ok(event) => event,
            Err(problem) => {
                self.adapter_fault(&problem);
                messages::StoppedEvent::default()
            }
        };
        let raw_reason = event.reason.clone().unwrap_or_else(|| {
            self.adapter_fault("the adapter sent a stopped event without a reason");
            String::new()
        });
        // debugpy answers a Pause request that reached it while it was
        // already stopped with a second stop: nothing new happened.
        if raw_reason == "pause"
            && event
                .thread_id
                .is_some_and(|t| self.book.entries().any(|e| e.pause.thread_id == t))
        {
            return None;
        }
        self.shared.epoch.fetch_add(1, Ordering::AcqRel);
        let reason = stop::reason(&raw_reason, self.life.take_entry());
        let thread_id = self.stopped_thread(event.thread_id.unwrap_or(0)).await;
        let top = self.top_of_stack(thread_id).await;
        // A step that lands on a breakpoint's line executes it: lldb reports
        // that as a breakpoint stop, debugpy as the step's end; both count.
        // Not when back on the starting line after stepd stepped out of a
        // frame for a NEXT: that line's breakpoints were met already.
        let landed = reason == PauseReason::Step && self.exec.step().is_some_and(|s| !s.returning);
        let exception = reason == PauseReason::Exception && !self.exception_breakpoints.is_empty();
        let named = if exception {
            self.caught_by(thread_id).await
        } else {
            self.placed.named_by(
                &event.hit_breakpoint_ids,
                top.location.as_ref().map(|at| (at.path.as_str(), at.line)),
                reason == PauseReason::Breakpoint || landed,
            )
        };
        // The breakpoints' verdicts come first: LOG and SNAPSHOT are carried
        // out whatever the stop turns out to be, and one that stops ends any
        // step, trace or run-to in flight. Modes that skip breakpoints (OUT
        // with force, HERE with force) neither count nor carry them out.
        let named_stop = matches!(
            reason,
            PauseReason::Breakpoint | PauseReason::DataBreakpoint
        );
        let stops = if (named_stop || landed || exception)
            && !named.is_empty()
            && self.mode.honours_breakpoints()
        {
            // After a step the adapter may report a breakpoint whose line the
            // step ended on without evaluating its condition: stepd does.
            let by_adapter = self.exec.step().is_none();
            self.act_on_hit(&named, thread_id, top.frame_id, by_adapter)
                .await
        } else {
            Vec::new()
        };
        Some(Observed {
            event,
            raw_reason,
            reason,
            thread_id,
            top,
            named,
            stops,
        })
    }

    /// The thread a stop is about: the adapter's, or its first thread when
    /// it named none.
    async fn stopped_thread(&mut self, thread_id: i64) -> i64 {
        if thread_id != 0 {
            return thread_id;
        }
        let threads = self.client.call("threads", json!({})).await;
        self.reported::<messages::ThreadsResponse>(threads)
            .and_then(|t| t.threads.first().map(|t| t.id))
            .unwrap_or(thread_id)
    }

    /// The top frame of a stopped thread; the last stop's locals are asked
    /// for ahead meanwhile, where the adapter allows (`locals`).
    async fn top_of_stack(&mut self, thread_id: i64) -> Top {
        let stack = self.client.send(
            "stackTrace",
            json!({"threadId": thread_id, "startFrame": 0, "levels": 1}),
        );
        let last = self.last_top.take();
        self.guess = if self.adapter.kind.quiet_on_stale_handles() {
            locals::Guess::send(&self.client, last, thread_id)
        } else {
            None
        };
        let stack = self.client.answer_as("stackTrace", stack).await;
        let stack: Option<messages::StackTraceResponse> = self.reported(stack);
        let top = stack.as_ref().and_then(|s| s.stack_frames.first());
        Top {
            frame_id: top.map(|f| f.id),
            location: top.map(|f| stop::location(self.adapter.kind, f)),
            name: top
                .map(|f| crate::names::readable(self.adapter.kind, &f.name).0)
                .unwrap_or_default(),
            hint: top
                .and_then(|f| f.presentation_hint.clone())
                .unwrap_or_default(),
            depth: stack
                .as_ref()
                .and_then(|s| s.total_frames)
                .and_then(|d| u32::try_from(d).ok()),
        }
    }

    /// Carries out what the stop was judged to be: the reason it is shown
    /// with and the breakpoints it names, or None when the program went on
    /// without showing it.
    async fn carry_out(
        &mut self,
        judged: judge::Judged,
        seen: &Observed,
        step: Option<steering::StepInFlight>,
    ) -> Option<(PauseReason, Vec<String>)> {
        match judged {
            judge::Judged::Breakpoint(stops) => {
                self.exec.pause_answered();
                self.say_run_cut_short(seen.thread_id);
                self.end_mode().await;
                // An exception or data breakpoint's stop keeps its reason.
                let reason = match seen.reason {
                    PauseReason::Exception | PauseReason::DataBreakpoint => seen.reason,
                    _ => PauseReason::Breakpoint,
                };
                Some((reason, stops))
            }
            judge::Judged::AnswersPause => {
                self.exec.pause_answered();
                self.say_run_cut_short(seen.thread_id);
                self.end_mode().await;
                Some((PauseReason::PauseRequest, Vec::new()))
            }
            judge::Judged::Steer {
                reason,
                breakpoints,
                silent,
            } => {
                let here = StopHere {
                    reason,
                    thread_id: seen.thread_id,
                    depth: seen.top.depth,
                    silent,
                };
                let location = seen.top.location.as_ref();
                match self.steer(&here, step, location, seen.top.frame_id).await {
                    Steering::Resumed => None,
                    Steering::Pause(Some(steered)) => {
                        let named = if steered == PauseReason::Breakpoint {
                            breakpoints
                        } else {
                            Vec::new()
                        };
                        Some((steered, named))
                    }
                    Steering::Normal if silent => {
                        // Nothing to pause for: go on without a word.
                        self.resume_silently("continue", seen.thread_id).await;
                        None
                    }
                    Steering::Pause(None) | Steering::Normal => Some((seen.reason, breakpoints)),
                }
            }
        }
    }

    /// Shows a stop as a pause: its locals, its exception, the notes of
    /// CONTINUE_ALL, the pause opened in the book; returns the stable state.
    async fn show_stop(
        &mut self,
        seen: Observed,
        reason: PauseReason,
        breakpoint_ids: Vec<String>,
    ) -> StableState {
        let Observed {
            event,
            raw_reason,
            thread_id,
            top,
            ..
        } = seen;
        let frame_id = top.frame_id;
        // Whatever the pause shown now, it answers a Pause request that is out.
        self.exec.pause_answered();
        self.hot.stopped();
        if let Some(d) = top.depth {
            self.depths.insert(thread_id, d);
        }
        let top_locals = self.top_locals(thread_id, frame_id).await;
        let locals_available = top_locals.is_some();
        let locals = top_locals.map(|v| stop::locals(&v)).unwrap_or_default();
        let caught_msg = if reason == PauseReason::Exception {
            self.exception_message(thread_id, &event).await
        } else {
            String::new()
        };
        let input_type = self.input_type(frame_id.is_some(), locals_available);
        let notes = self.continue_all_notes(reason).await;
        let depth = top.depth.unwrap_or(1);
        let key = book::new_key();
        let pause = Pause {
            key: key.clone(),
            session_id: self.shared.id.clone(),
            thread_id,
            reason: reason.into(),
            raw_reason: raw_reason.clone(),
            input_type,
            notes,
            debug_value: (!caught_msg.is_empty()).then(|| stop::display(&caught_msg, "exception")),
            coor: top
                .location
                .as_ref()
                .map(|l| vec![depth as i32, l.line as i32])
                .unwrap_or_default(),
            location: top.location.clone(),
            locals,
            locals_available,
            original_id: self.request.request_id.clone(),
            caught_msg,
            breakpoint_ids: breakpoint_ids.clone(),
            created_at: Some(now_timestamp()),
            ..Default::default()
        };
        self.open_pause(
            pause,
            PauseCtx { frame_id, depth },
            event.all_threads_stopped,
        );
        self.place_pending_data().await;
        // The reply carries the book's copy: masked, with its trace ids.
        let pause = self.book.kept(&key);
        StableState {
            state: SessionState::Stopped.into(),
            waited: true,
            timed_out: false,
            stop_reason: reason.into(),
            thread_id,
            top_frame: frame_id.map(|id| stepd_proto::v1::Frame {
                id: handles::make(self.shared.epoch(), id),
                name: top.name,
                location: pause.as_ref().and_then(|p| p.location.clone()),
                presentation_hint: top.hint,
            }),
            hit_breakpoint_ids: breakpoint_ids,
            pause,
            ..Default::default()
        }
    }

    /// Under CONTINUE_ALL, what a pause says of it; a Pause request's stop
    /// ends it, and the breakpoints are placed again.
    async fn continue_all_notes(&mut self, reason: PauseReason) -> Vec<String> {
        if !self.breakpoints_off {
            return Vec::new();
        }
        if reason != PauseReason::PauseRequest {
            return vec![
                "CONTINUE_ALL is in force: breakpoints are off for this session until the next \
                 Pause request"
                    .to_owned(),
            ];
        }
        self.breakpoints_off = false;
        let placements = self.apply_breakpoints().await;
        for placement in &placements {
            self.publish_status(placement);
        }
        vec!["CONTINUE_ALL ended with this Pause request: breakpoints apply again".to_owned()]
    }

    /// Opens the pause of a stopped thread, replacing the thread's earlier one.
    fn open_pause(&mut self, pause: Pause, ctx: PauseCtx, all_threads_stopped: bool) {
        let (thread_id, key) = (pause.thread_id, pause.key.clone());
        let frame_id = ctx.frame_id;
        // A thread that stops again replaces its earlier pause.
        self.book.resolve_where(
            |e| e.pause.thread_id == thread_id,
            CommandKind::Unspecified,
            "stopped again",
        );
        self.shared
            .stopped
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(thread_id, key);
        *self
            .shared
            .latest_frame
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = frame_id.map(|f| (thread_id, f));
        if all_threads_stopped {
            let epoch = self.shared.epoch.load(Ordering::Acquire);
            self.shared.all_stopped_at.store(epoch, Ordering::Release);
        }
        self.session.state = self.life.stopped().into();
        self.book.open(pause, ctx, all_threads_stopped);
    }

    /// The program moves on: pauses of `thread` (0 = all) resolve, handles expire.
    pub(super) fn resumed(&mut self, thread: i64, command: CommandKind, by: &str) {
        self.shared.epoch.fetch_add(1, Ordering::AcqRel);
        let resolved =
            self.book
                .resolve_where(|e| thread == 0 || e.pause.thread_id == thread, command, by);
        {
            let mut stopped = self
                .shared
                .stopped
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if thread == 0 {
                stopped.clear();
            } else {
                stopped.remove(&thread);
            }
            let mut latest = self
                .shared
                .latest_frame
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            if latest.is_some_and(|(t, _)| thread == 0 || t == thread) {
                *latest = None;
            }
        }
        if let Some(state) = self.life.resumed(!self.book.is_empty()) {
            self.session.state = state.into();
        }
        // One `continued` per resume: the adapter's own event after stepd's
        // request, and resumes after stops never shown, move no pause.
        if !resolved.is_empty() {
            self.publish(Payload::Continued(Continued { thread_id: thread }));
        }
    }
}
