//! Evaluations sent to the probe and waiting for its result, each with the
//! client that waits for it. Every one is answered once: with the probe's
//! result, or an error when its hold ends, its deadline passes or the
//! session ends. No I/O: the session sends the `Eval` and the result, and
//! this says who is answered with what.

use std::{collections::HashMap, time::Duration};

use stepd_proto::v1::{DisplayValue, ErrorReason, EvalResult, SendDebugInputResponse};
use tokio::{sync::oneshot, time::Instant};

use stepd_core::{
    error::{ApiError, ApiResult},
    session::pause::display::display,
};

/// How long an EVAL may wait for the probe.
pub(crate) const EVAL_DEADLINE: Duration = Duration::from_secs(30);

/// An EVAL sent to the probe, waiting for its result.
pub(crate) struct PendingEval {
    /// The pause it was asked at.
    pub key: String,
    /// The expression, which decides whether its value is masked.
    pub code: String,
    /// Who asked, recorded with the result.
    pub by: String,
    /// The client waiting for the result.
    pub reply: oneshot::Sender<ApiResult<SendDebugInputResponse>>,
    deadline: Instant,
}

impl PendingEval {
    /// Answers the client with `error`.
    pub fn fail(self, error: ApiError) {
        let _ = self.reply.send(Err(error));
    }
}

/// The evaluations in flight, by eval id.
#[derive(Default)]
pub(crate) struct Evals {
    pending: HashMap<String, PendingEval>,
}

impl Evals {
    /// An evaluation of `code` at pause `key`, asked by `by` at `now`, was
    /// sent to the probe as `eval_id`.
    pub fn sent(
        &mut self,
        eval_id: String,
        key: &str,
        code: String,
        by: &str,
        reply: oneshot::Sender<ApiResult<SendDebugInputResponse>>,
        now: Instant,
    ) {
        let pending = PendingEval {
            key: key.to_owned(),
            code,
            by: by.to_owned(),
            reply,
            deadline: now + EVAL_DEADLINE,
        };
        self.pending.insert(eval_id, pending);
    }

    /// The evaluation the probe answered with `eval_id`, if one waits.
    pub fn answered(&mut self, eval_id: &str) -> Option<PendingEval> {
        self.pending.remove(eval_id)
    }

    /// The hold of pause `key` ended: its evaluations can no longer be
    /// answered, and are failed with `gone`.
    pub fn hold_ended(&mut self, key: &str, gone: impl Fn() -> ApiError) {
        self.take(|e| e.key == key)
            .into_iter()
            .for_each(|e| e.fail(gone()));
    }

    /// The evaluations whose deadline has come by `now` are failed.
    pub fn expire(&mut self, now: Instant) {
        for late in self.take(|e| e.deadline <= now) {
            late.fail(ApiError::new(
                ErrorReason::ProtocolError,
                "the probe did not answer the evaluation in time",
            ));
        }
    }

    /// The session ended: every evaluation is failed.
    pub fn end(&mut self) {
        for (_, e) in self.pending.drain() {
            e.fail(ApiError::new(
                ErrorReason::SessionEnded,
                "the probe went away",
            ));
        }
    }

    /// When the next evaluation reaches its deadline.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.pending.values().map(|e| e.deadline).min()
    }

    fn take(&mut self, which: impl Fn(&PendingEval) -> bool) -> Vec<PendingEval> {
        let ids: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, e)| which(e))
            .map(|(id, _)| id.clone())
            .collect();
        ids.iter()
            .filter_map(|id| self.pending.remove(id))
            .collect()
    }
}

/// What the probe's result of an evaluation is: its value as shown, or why
/// there is none (over a size limit, or the probe's error).
pub(crate) fn outcome(result: EvalResult) -> ApiResult<DisplayValue> {
    stepd_core::limits::eval_result(&result)?;
    if result.error.is_empty() {
        Ok(display(&result.value, ""))
    } else {
        Err(ApiError::new(ErrorReason::AdapterError, result.error))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Reply = oneshot::Receiver<ApiResult<SendDebugInputResponse>>;

    fn send(evals: &mut Evals, id: &str, key: &str, now: Instant) -> Reply {
        let (tx, rx) = oneshot::channel();
        evals.sent(id.into(), key, "x".into(), "ana", tx, now);
        rx
    }

    fn failed(rx: &mut Reply) -> Option<ErrorReason> {
        rx.try_recv()
            .ok()
            .map(|r| r.map(drop).expect_err("an error").reason())
    }

    #[test]
    fn each_evaluation_is_answered_once() {
        let now = Instant::now();
        let mut evals = Evals::default();
        let mut a = send(&mut evals, "e1", "p1", now);
        let mut b = send(&mut evals, "e2", "p1", now + Duration::from_secs(10));
        let mut c = send(&mut evals, "e3", "p2", now + Duration::from_secs(20));
        assert_eq!(evals.next_deadline(), Some(now + EVAL_DEADLINE));
        // The probe answers e1: the session takes it, and no one else does.
        let answered = evals.answered("e1").expect("e1 waits");
        assert_eq!((answered.key.as_str(), answered.by.as_str()), ("p1", "ana"));
        assert!(evals.answered("e1").is_none(), "once");
        // p1's hold ends: e2 fails as the hold's, e3 still waits.
        evals.hold_ended("p1", || ApiError::new(ErrorReason::PauseNotFound, "gone"));
        assert_eq!(failed(&mut b), Some(ErrorReason::PauseNotFound));
        assert_eq!(failed(&mut c), None);
        // e3's deadline passes.
        evals.expire(now + Duration::from_secs(20) + EVAL_DEADLINE - Duration::from_millis(1));
        assert_eq!(failed(&mut c), None);
        evals.expire(now + Duration::from_secs(20) + EVAL_DEADLINE);
        assert_eq!(failed(&mut c), Some(ErrorReason::ProtocolError));
        assert_eq!(evals.next_deadline(), None);
        drop(answered);
        assert!(a.try_recv().is_err(), "e1 was the session's to answer");
    }

    #[test]
    fn the_session_ending_fails_what_waits() {
        let now = Instant::now();
        let mut evals = Evals::default();
        let mut a = send(&mut evals, "e1", "p1", now);
        evals.end();
        assert_eq!(failed(&mut a), Some(ErrorReason::SessionEnded));
        assert!(evals.answered("e1").is_none());
    }

    #[test]
    fn the_outcome_of_a_result() {
        let value = EvalResult {
            value: "42".into(),
            ..Default::default()
        };
        assert_eq!(outcome(value).ok(), Some(display("42", "")));
        let error = EvalResult {
            error: "no such name".into(),
            ..Default::default()
        };
        assert_eq!(
            outcome(error).map_err(|e| e.reason()).err(),
            Some(ErrorReason::AdapterError)
        );
        let huge = EvalResult {
            error: "e".repeat(1 << 20),
            ..Default::default()
        };
        assert!(outcome(huge).is_err());
    }
}
