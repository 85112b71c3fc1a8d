//! The execution queue of a DAP session: clients' Continue, Step and Pause
//! requests, one waited for at a time and the rest in order behind it, and
//! what is out at the adapter meanwhile (the step in flight, a Pause
//! request the next stop answers). No I/O: the actor asks it what to do
//! with a request, sends what it says, and answers the replies it hands
//! back. `R` is how a request is answered (a channel in the actor).

use std::collections::VecDeque;

use stepd_proto::v1::{ErrorReason, StepKind};
use tokio::time::Instant;

use super::steering::StepInFlight;
use stepd_core::{
    error::ApiError,
    session::{ExecOp, WaitMode},
};

/// An execution request as it arrived.
pub(super) struct Request<R> {
    pub op: ExecOp,
    pub wait: WaitMode,
    pub reply: R,
}

/// The request whose caller waits for the session to be stable.
pub(super) struct Waited<R> {
    pub reply: R,
    /// When it is answered as timed out, if ever.
    pub deadline: Option<Instant>,
    pub started: std::time::Instant,
    /// The output offset when it started: its answer carries what followed.
    pub output_from: u64,
}

/// What becomes of a request that arrives.
pub(super) enum Arrival<R> {
    /// Nothing is waited for: send it now.
    Start(Request<R>),
    /// Behind the one waited for, in order.
    Queued,
    /// Refused: as many as the queue takes already wait.
    Full(Request<R>),
}

/// Where the program is, as an execution request needs to know.
#[derive(Debug, Clone, Default)]
pub(super) struct Program {
    /// The session has ended.
    pub ended: bool,
    /// The threads with a pause, in any order.
    pub stopped: Vec<i64>,
    /// The thread of the latest pause.
    pub latest: Option<i64>,
}

/// What an execution request does to the adapter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Plan {
    /// Refused; nothing is sent.
    Refuse(Refusal),
    /// `continue` for `target`; `all`: every thread resumes.
    Continue { target: i64, all: bool },
    /// A `next`, `stepIn` or `stepOut` for `target`.
    Step { target: i64, kind: StepKind },
    /// A Pause while something is stopped: answered with the stop there is.
    AlreadyStopped,
    /// A Pause while the program runs (thread 0: any).
    Interrupt(i64),
}

/// Why an execution request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Refusal {
    /// The session has ended.
    Ended,
    /// Continue while nothing is stopped (some adapters, debugpy, never
    /// answer a `continue` while running).
    Running,
    /// Step a thread that has no pause.
    NotStopped(i64),
}

impl Refusal {
    /// The error the caller gets.
    pub(super) fn error(self) -> ApiError {
        match self {
            Refusal::Ended => ApiError::new(ErrorReason::SessionEnded, "the session has ended"),
            Refusal::Running => ApiError::new(
                ErrorReason::NotStopped,
                "the program is running; nothing to continue",
            ),
            Refusal::NotStopped(thread) => ApiError::new(
                ErrorReason::NotStopped,
                format!("thread {thread} is not stopped"),
            )
            .with("thread_id", thread.to_string()),
        }
    }
}

/// What `op` does where the program is. Thread 0 is the latest pause's
/// thread for a Continue or Step, and every thread for Continue's resume.
pub(super) fn plan(op: ExecOp, at: &Program) -> Plan {
    if at.ended {
        return Plan::Refuse(Refusal::Ended);
    }
    let target = |thread: i64| {
        if thread != 0 {
            thread
        } else {
            at.latest.unwrap_or(0)
        }
    };
    match op {
        ExecOp::Continue(_) if at.stopped.is_empty() => Plan::Refuse(Refusal::Running),
        ExecOp::Continue(thread) => Plan::Continue {
            target: target(thread),
            all: thread == 0,
        },
        ExecOp::Step(thread, kind) => {
            let target = target(thread);
            if at.stopped.contains(&target) {
                Plan::Step { target, kind }
            } else {
                Plan::Refuse(Refusal::NotStopped(target))
            }
        }
        ExecOp::Pause(_) if !at.stopped.is_empty() => Plan::AlreadyStopped,
        ExecOp::Pause(thread) => Plan::Interrupt(thread),
    }
}

/// The queue. Invariants: at most one request is waited for; requests wait
/// in the queue only behind one that is waited for (`next` hands them out
/// once none is), and at most `limit` of them.
pub(super) struct ExecQueue<R> {
    waiting: VecDeque<Request<R>>,
    waited: Option<Waited<R>>,
    limit: usize,
    /// The NEXT / IN / OUT sent last: the stop after it is its end.
    step: Option<StepInFlight>,
    /// A Pause request is out: the next stop shown answers it.
    pause_out: bool,
}

impl<R> ExecQueue<R> {
    /// An empty queue taking at most `limit` requests behind the waited one.
    pub(super) fn new(limit: usize) -> Self {
        Self {
            waiting: VecDeque::new(),
            waited: None,
            limit,
            step: None,
            pause_out: false,
        }
    }

    /// A request arrives.
    pub(super) fn arrive(&mut self, request: Request<R>) -> Arrival<R> {
        if self.waited.is_none() {
            Arrival::Start(request)
        } else if self.waiting.len() >= self.limit {
            Arrival::Full(request)
        } else {
            self.waiting.push_back(request);
            Arrival::Queued
        }
    }

    /// The request just sent waits for the session to be stable.
    pub(super) fn wait_for_stable(&mut self, waited: Waited<R>) {
        debug_assert!(self.waited.is_none(), "one request is waited for at a time");
        self.waited = Some(waited);
    }

    /// When the waited request times out.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.waited.as_ref().and_then(|w| w.deadline)
    }

    /// The waited request, to answer now (a stop, a timeout, the end).
    pub(super) fn take_waited(&mut self) -> Option<Waited<R>> {
        self.waited.take()
    }

    /// The next request to send, once none is waited for.
    pub(super) fn next(&mut self) -> Option<Request<R>> {
        if self.waited.is_some() {
            return None;
        }
        self.waiting.pop_front()
    }

    /// At the end: the requests still queued, in order, to refuse.
    pub(super) fn drain(&mut self) -> impl Iterator<Item = Request<R>> + '_ {
        self.waiting.drain(..)
    }

    /// The step in flight.
    pub(super) fn step(&self) -> Option<StepInFlight> {
        self.step
    }

    /// A stop ends the step in flight, unless steering sends it on.
    pub(super) fn take_step(&mut self) -> Option<StepInFlight> {
        self.step.take()
    }

    /// A step was sent (by a client, or by steering).
    pub(super) fn stepping(&mut self, step: StepInFlight) {
        self.step = Some(step);
    }

    /// A `continue` was sent: it ends any step the adapter still had.
    pub(super) fn continued(&mut self) {
        self.step = None;
    }

    /// Whether a Pause request is out.
    pub(super) fn pause_out(&self) -> bool {
        self.pause_out
    }

    /// A Pause request goes out; returns whether one was out before, for
    /// `pause_refused`.
    pub(super) fn pause_asked(&mut self) -> bool {
        std::mem::replace(&mut self.pause_out, true)
    }

    /// The adapter refused the Pause request: as it was before.
    pub(super) fn pause_refused(&mut self, before: bool) {
        self.pause_out = before;
    }

    /// A stop was shown: it answers the Pause request out, if any.
    pub(super) fn pause_answered(&mut self) {
        self.pause_out = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(reply: &'static str) -> Request<&'static str> {
        Request {
            op: ExecOp::Continue(0),
            wait: WaitMode::UntilStable(None),
            reply,
        }
    }

    fn waited(reply: &'static str) -> Waited<&'static str> {
        Waited {
            reply,
            deadline: None,
            started: std::time::Instant::now(),
            output_from: 0,
        }
    }

    fn outcome(arrival: Arrival<&'static str>) -> String {
        match arrival {
            Arrival::Start(r) => format!("start {}", r.reply),
            Arrival::Queued => "queued".into(),
            Arrival::Full(r) => format!("full {}", r.reply),
        }
    }

    #[test]
    fn requests_start_queue_or_are_refused_by_what_is_waited_for() {
        let mut queue = ExecQueue::new(2);
        assert_eq!(outcome(queue.arrive(request("a"))), "start a");
        assert_eq!(
            outcome(queue.arrive(request("b"))),
            "start b",
            "a request answered at once leaves nothing waited for"
        );
        queue.wait_for_stable(waited("b"));
        assert_eq!(outcome(queue.arrive(request("c"))), "queued");
        assert_eq!(outcome(queue.arrive(request("d"))), "queued");
        assert_eq!(
            outcome(queue.arrive(request("e"))),
            "full e",
            "the limit counts those behind the waited one"
        );
        assert!(
            queue.next().is_none(),
            "nothing starts while one is waited for"
        );
        assert_eq!(queue.take_waited().map(|w| w.reply), Some("b"));
        assert_eq!(queue.next().map(|r| r.reply), Some("c"));
        queue.wait_for_stable(waited("c"));
        assert!(queue.next().is_none());
        assert_eq!(queue.take_waited().map(|w| w.reply), Some("c"));
        assert_eq!(queue.next().map(|r| r.reply), Some("d"), "in order");
        assert!(queue.next().is_none());
    }

    #[test]
    fn at_the_end_the_waited_one_and_every_queued_one_are_handed_back_in_order() {
        let mut queue = ExecQueue::new(8);
        queue.wait_for_stable(waited("w"));
        for r in ["x", "y", "z"] {
            assert_eq!(outcome(queue.arrive(request(r))), "queued");
        }
        assert_eq!(queue.take_waited().map(|w| w.reply), Some("w"));
        let left: Vec<_> = queue.drain().map(|r| r.reply).collect();
        assert_eq!(left, ["x", "y", "z"]);
        assert!(queue.next().is_none());
        assert!(queue.deadline().is_none());
    }

    #[test]
    fn the_plan_of_each_request_where_the_program_is() {
        let running = Program::default();
        let stopped = Program {
            stopped: vec![1, 3],
            latest: Some(3),
            ..Program::default()
        };
        let ended = Program {
            ended: true,
            ..stopped.clone()
        };
        let cases: &[(&str, ExecOp, &Program, Plan)] = &[
            (
                "nothing is sent once the session ended",
                ExecOp::Pause(0),
                &ended,
                Plan::Refuse(Refusal::Ended),
            ),
            (
                "continue while running is refused",
                ExecOp::Continue(1),
                &running,
                Plan::Refuse(Refusal::Running),
            ),
            (
                "continue of every thread targets the latest pause",
                ExecOp::Continue(0),
                &stopped,
                Plan::Continue {
                    target: 3,
                    all: true,
                },
            ),
            (
                "continue of one thread",
                ExecOp::Continue(1),
                &stopped,
                Plan::Continue {
                    target: 1,
                    all: false,
                },
            ),
            (
                "step of thread 0 is the latest pause's thread",
                ExecOp::Step(0, StepKind::In),
                &stopped,
                Plan::Step {
                    target: 3,
                    kind: StepKind::In,
                },
            ),
            (
                "step of a thread with no pause",
                ExecOp::Step(2, StepKind::Over),
                &stopped,
                Plan::Refuse(Refusal::NotStopped(2)),
            ),
            (
                "step while running",
                ExecOp::Step(0, StepKind::Over),
                &running,
                Plan::Refuse(Refusal::NotStopped(0)),
            ),
            (
                "pause while stopped is answered with the stop there is",
                ExecOp::Pause(2),
                &stopped,
                Plan::AlreadyStopped,
            ),
            (
                "pause while running interrupts",
                ExecOp::Pause(2),
                &running,
                Plan::Interrupt(2),
            ),
        ];
        for (what, op, at, want) in cases {
            assert_eq!(plan(*op, at), *want, "{what}");
        }
    }

    #[test]
    fn a_pause_request_is_out_until_a_stop_answers_it_or_the_adapter_refuses_it() {
        let mut queue: ExecQueue<()> = ExecQueue::new(1);
        assert!(!queue.pause_out());
        let before = queue.pause_asked();
        assert!(!before && queue.pause_out());
        queue.pause_refused(before);
        assert!(!queue.pause_out(), "refused: as it was");
        queue.pause_asked();
        let again = queue.pause_asked();
        queue.pause_refused(again);
        assert!(
            queue.pause_out(),
            "a second refused one leaves the first out"
        );
        queue.pause_answered();
        assert!(!queue.pause_out());
    }

    #[test]
    fn a_continue_ends_the_step_in_flight_and_a_stop_takes_it() {
        let mut queue: ExecQueue<()> = ExecQueue::new(1);
        let step = StepInFlight {
            kind: StepKind::Over,
            thread: 1,
            depth: Some(2),
            returning: false,
        };
        queue.stepping(step);
        assert_eq!(queue.step().map(|s| s.thread), Some(1));
        queue.continued();
        assert!(queue.step().is_none());
        queue.stepping(step);
        assert!(queue.take_step().is_some());
        assert!(queue.step().is_none(), "taken by the stop");
    }
}
