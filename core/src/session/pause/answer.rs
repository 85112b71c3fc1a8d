//! What a debug input asks of a session, decided once for both kinds.
//!
//! [`answer`] reads a debug input for one of a session's pauses, handles
//! what is the same everywhere (EXPRESSION prompts, the re-prompt after
//! EVAL, INSPECT or STACKTRACE, errors that leave the pause re-prompted) and
//! asks the session's kind, through [`PauseOwner`], only for what differs:
//! how to move the program, evaluate, render or list the stack.

use stepd_proto::v1::{
    Cause, CommandKind, ErrorReason, Frame, HereCommand, JumpCommand, Rendering,
    SendDebugInputResponse, debug_command::Command as Cmd, inject_command::Replacement,
};
use tokio::sync::oneshot;

use super::{
    Answer,
    book::{Awaiting, PauseBook, response},
};
use crate::{
    error::{ApiError, ApiResult},
    session::PauseTarget,
};

/// Where the answer to a debug input goes.
pub type Reply = oneshot::Sender<ApiResult<SendDebugInputResponse>>;

/// A command that lets the program move on, and so resolves its pause.
#[derive(Debug, Clone)]
pub enum Go {
    /// NEXT.
    Next,
    /// IN.
    In,
    /// OUT; `force` also skips breakpoints on the way.
    Out {
        /// Skip breakpoints too.
        force: bool,
    },
    /// HERE: run to a location or coordinate.
    Here(HereCommand),
    /// CONTINUE.
    Continue,
    /// CONTINUE_SCOPE.
    ContinueScope,
    /// CONTINUE_ALL.
    ContinueAll,
    /// TRACE, at most `max_steps` steps (0 = the kind's default).
    Trace {
        /// Steps allowed.
        max_steps: u32,
    },
    /// SKIP the held call.
    Skip,
    /// QUIT.
    Quit,
    /// INJECT a replacement, then go on.
    Inject(Option<Replacement>),
    /// JUMP to another line of the paused frame (DAP `goto`).
    Jump(JumpCommand),
}

/// The commands every pause offers, whatever its kind; each kind adds what
/// it can do at that pause (EVAL, INJECT, SKIP, LOCALS, QUIT …).
pub fn common_commands() -> Vec<CommandKind> {
    vec![
        CommandKind::Next,
        CommandKind::In,
        CommandKind::Out,
        CommandKind::Here,
        CommandKind::Continue,
        CommandKind::ContinueScope,
        CommandKind::ContinueAll,
        CommandKind::Trace,
        CommandKind::Stacktrace,
    ]
}

/// What only a session's kind knows how to do at one of its pauses.
// Its owners are the two session actors, each awaited on its own task, so
// no caller needs the futures to be `Send` by name.
#[allow(async_fn_in_trait)]
pub trait PauseOwner {
    /// What the kind keeps beside each pause.
    type Data;
    /// The prompt of an EXPRESSION round trip.
    const PROMPT: &'static str;

    /// The session's pauses.
    fn book(&mut self) -> &mut PauseBook<Self::Data>;

    /// Moves the program as `go` says. `Ok` means the program moved and the
    /// pause may be resolved; an error must leave everything as it was.
    async fn go(&mut self, key: &str, go: Go, command: CommandKind, by: &str) -> ApiResult<()>;

    /// Evaluates `code` at the pause for `by` and answers `reply`, now
    /// (through [`PauseBook::evaluated`]) or when the result arrives.
    async fn eval(&mut self, key: &str, code: String, by: &str, reply: Reply);

    /// Renders `target` at the pause in a new inspector.
    async fn render(&mut self, key: &str, target: PauseTarget) -> ApiResult<Rendering>;

    /// The frames at the pause, and the causes of its exception if any.
    async fn stack(&mut self, key: &str) -> (Vec<Frame>, Vec<Cause>);
}

/// What a decoded input asks for.
enum Request {
    Go(Go),
    Eval(String),
    Inspect(PauseTarget),
    Stacktrace,
    /// Answered by the book alone (an EXPRESSION prompt).
    Done(Box<ApiResult<SendDebugInputResponse>>),
}

/// Answers one debug input for a pause of `owner`.
pub async fn answer<O: PauseOwner>(owner: &mut O, answer: Answer) {
    let Answer {
        input,
        kind,
        by,
        reply,
    } = answer;
    let key = input.key;
    let client = input.client_name;
    if owner.book().get(&key).is_none() {
        let _ = reply.send(Err(owner.book().gone(&key)));
        return;
    }
    let whole = input.command;
    let command = whole.clone().and_then(|c| c.command);
    let result = match decode::<O>(owner.book(), &key, kind, command) {
        Request::Done(result) => *result,
        Request::Go(go) => {
            let injecting = matches!(go, Go::Inject(_));
            // On record before the session moves: the pause may resolve
            // inside `go` (a probe's release, a DAP resume).
            owner.book().deciding(&key, whole.map(|w| (w, client)));
            let moved = owner.go(&key, go, kind, &by).await;
            if moved.is_err() {
                owner.book().deciding(&key, None);
            }
            match moved {
                Ok(()) => {
                    owner.book().resolve(&key, kind, &by);
                    Ok(response(kind, None))
                }
                // A refused value is an eval_error, and the pause is re-prompted;
                // an answer the probe could not be sent changed nothing.
                Err(error) if injecting && error.reason() != ErrorReason::ProbeNotReading => {
                    Err(owner.book().failed(&key, error))
                }
                Err(error) => Err(error.with("key", key.as_str())),
            }
        }
        Request::Eval(code) => return owner.eval(&key, code, &by, reply).await,
        Request::Inspect(target) => {
            let rendering = owner.render(&key, target).await;
            owner.book().inspected(&key, kind, rendering)
        }
        Request::Stacktrace => {
            let (frames, causes) = owner.stack(&key).await;
            Ok(owner.book().stacked(&key, frames, causes))
        }
    };
    let _ = reply.send(result);
}

fn decode<O: PauseOwner>(
    book: &mut PauseBook<O::Data>,
    key: &str,
    kind: CommandKind,
    command: Option<Cmd>,
) -> Request {
    let ask = |book: &mut PauseBook<O::Data>, awaiting| {
        Request::Done(Box::new(Ok(response(
            kind,
            book.ask_expression(key, awaiting, O::PROMPT),
        ))))
    };
    match command {
        Some(Cmd::Next(_)) => Request::Go(Go::Next),
        Some(Cmd::StepIn(_)) => Request::Go(Go::In),
        Some(Cmd::StepOut(out)) => Request::Go(Go::Out { force: out.force }),
        Some(Cmd::Here(here)) => Request::Go(Go::Here(here)),
        Some(Cmd::Resume(_) | Cmd::Continue(_)) => Request::Go(Go::Continue),
        Some(Cmd::ContinueScope(_)) => Request::Go(Go::ContinueScope),
        Some(Cmd::ContinueAll(_)) => Request::Go(Go::ContinueAll),
        Some(Cmd::Trace(trace)) => Request::Go(Go::Trace {
            max_steps: trace.max_steps,
        }),
        Some(Cmd::Skip(_)) => Request::Go(Go::Skip),
        Some(Cmd::Quit(_)) => Request::Go(Go::Quit),
        Some(Cmd::Inject(inject)) => Request::Go(Go::Inject(inject.replacement)),
        Some(Cmd::Jump(jump)) => Request::Go(Go::Jump(jump)),
        Some(Cmd::Eval(eval)) if eval.code.trim().is_empty() => ask(book, Awaiting::Eval),
        Some(Cmd::Eval(eval)) => Request::Eval(eval.code),
        Some(Cmd::InspectPrompt(prompt)) if prompt.code.trim().is_empty() => {
            ask(book, Awaiting::Inspect)
        }
        Some(Cmd::InspectPrompt(prompt)) => Request::Inspect(PauseTarget::Expression(prompt.code)),
        Some(Cmd::Inspect(_)) => Request::Inspect(PauseTarget::Value),
        Some(Cmd::Locals(_)) => Request::Inspect(PauseTarget::Locals),
        Some(Cmd::Stacktrace(_)) => Request::Stacktrace,
        Some(Cmd::Expression(expression)) => match book.take_prompt(key) {
            Some(Awaiting::Eval) => Request::Eval(expression.code),
            Some(Awaiting::Inspect) => Request::Inspect(PauseTarget::Expression(expression.code)),
            None => Request::Done(Box::new(Err(ApiError::new(
                ErrorReason::InvalidCommand,
                "this pause is not waiting for an expression",
            )
            .with("key", key)))),
        },
        None => Request::Done(Box::new(Err(ApiError::invalid_field(
            "command",
            "a command is required",
        )))),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use stepd_proto::v1::{
        DebugCommand, DebugInput, EvalCommand, ExpressionCommand, HereCommand, NextCommand, Pause,
        StacktraceCommand, debug_command::Command,
    };
    use tokio::sync::mpsc;

    use super::*;
    use crate::{events::EventBus, session::pause::PauseRegistry};

    /// A kind whose every capability can be told to fail.
    struct Owner {
        book: PauseBook<()>,
        refuse: bool,
        moved: Vec<String>,
    }

    impl PauseOwner for Owner {
        type Data = ();
        const PROMPT: &'static str = "expression?";

        fn book(&mut self) -> &mut PauseBook<()> {
            &mut self.book
        }

        async fn go(&mut self, _: &str, go: Go, _: CommandKind, _: &str) -> ApiResult<()> {
            if self.refuse {
                return Err(ApiError::invalid_field("command", "refused"));
            }
            self.moved.push(format!("{go:?}"));
            Ok(())
        }

        async fn eval(&mut self, key: &str, code: String, by: &str, reply: Reply) {
            let result = if self.refuse {
                Err(ApiError::new(ErrorReason::AdapterError, "no such name"))
            } else {
                Ok(stepd_proto::v1::DisplayValue {
                    text: code.clone(),
                    ..Default::default()
                })
            };
            let _ = reply.send(self.book.evaluated(key, &code, by, result));
        }

        async fn render(&mut self, _: &str, _: PauseTarget) -> ApiResult<Rendering> {
            if self.refuse {
                Err(ApiError::new(ErrorReason::AdapterError, "cannot render"))
            } else {
                Ok(Rendering::default())
            }
        }

        async fn stack(&mut self, _: &str) -> (Vec<Frame>, Vec<Cause>) {
            (Vec::new(), Vec::new())
        }
    }

    fn owner(
        refuse: bool,
    ) -> (
        Owner,
        mpsc::Receiver<crate::session::pause::Answer>,
        Arc<PauseRegistry>,
    ) {
        let bus = Arc::new(EventBus::new("i".into(), 1, 64, 64));
        let registry = Arc::new(PauseRegistry::new(bus.clone()));
        let (mut book, inbox) =
            PauseBook::new("s".into(), registry.clone(), bus, Default::default());
        book.open(
            Pause {
                key: "k".into(),
                session_id: "s".into(),
                input_type: [
                    CommandKind::Next,
                    CommandKind::Here,
                    CommandKind::Eval,
                    CommandKind::Inspect,
                    CommandKind::Stacktrace,
                ]
                .into_iter()
                .map(i32::from)
                .collect(),
                ..Default::default()
            },
            (),
            false,
        );
        let owner = Owner {
            book,
            refuse,
            moved: Vec::new(),
        };
        (owner, inbox, registry)
    }

    fn input(command: Command) -> DebugInput {
        DebugInput {
            key: "k".into(),
            command: Some(DebugCommand {
                command: Some(command),
            }),
            client_name: String::new(),
        }
    }

    /// Sends `command` through the registry and lets the owner answer it.
    async fn send(
        owner: &mut Owner,
        inbox: &mut mpsc::Receiver<crate::session::pause::Answer>,
        registry: &PauseRegistry,
        command: Command,
    ) -> ApiResult<SendDebugInputResponse> {
        let asked = registry.answer(input(command), "t".into());
        tokio::pin!(asked);
        loop {
            tokio::select! {
                result = &mut asked => return result,
                Some(a) = inbox.recv() => super::answer(owner, a).await,
            }
        }
    }

    #[tokio::test]
    async fn refused_answers_leave_the_pause_as_it_was() {
        // (command, whether the pause stays, whether the revision moves)
        let cases: Vec<(Command, bool, bool)> = vec![
            (Command::Next(NextCommand {}), true, false),
            (Command::Here(HereCommand::default()), true, false),
            (Command::Eval(EvalCommand { code: "x".into() }), true, true),
            (Command::Inspect(Default::default()), true, true),
        ];
        for (command, stays, revised) in cases {
            let (mut owner, mut inbox, registry) = owner(true);
            let before = registry.get("k").unwrap();
            let what = format!("{command:?}");
            let result = send(&mut owner, &mut inbox, &registry, command).await;
            assert!(result.is_err(), "{what}");
            let after = registry.get("k");
            assert_eq!(after.is_some(), stays, "{what}");
            let after = after.unwrap();
            assert_eq!(after.input_type, before.input_type, "{what}");
            assert_eq!(after.revision > before.revision, revised, "{what}");
            // And the next answer is taken as if nothing had happened.
            owner.refuse = false;
            send(
                &mut owner,
                &mut inbox,
                &registry,
                Command::Next(NextCommand {}),
            )
            .await
            .unwrap();
            assert_eq!(owner.moved, ["Next"], "{what}");
            assert!(registry.get("k").is_none());
        }
    }

    #[tokio::test]
    async fn the_first_moving_answer_wins_and_later_ones_are_told_so() {
        let (mut owner, mut inbox, registry) = owner(false);
        send(
            &mut owner,
            &mut inbox,
            &registry,
            Command::Next(NextCommand {}),
        )
        .await
        .unwrap();
        let err = send(
            &mut owner,
            &mut inbox,
            &registry,
            Command::Next(NextCommand {}),
        )
        .await
        .unwrap_err();
        assert_eq!(err.reason(), ErrorReason::AlreadyAnswered);
    }

    #[tokio::test]
    async fn an_expression_prompt_gives_the_commands_back() {
        let (mut owner, mut inbox, registry) = owner(false);
        let asked = send(
            &mut owner,
            &mut inbox,
            &registry,
            Command::Eval(EvalCommand::default()),
        )
        .await
        .unwrap()
        .pause
        .unwrap();
        assert_eq!(asked.input_type, [CommandKind::Expression as i32]);
        assert_eq!(asked.prompt, "expression?");
        let err = send(
            &mut owner,
            &mut inbox,
            &registry,
            Command::Next(NextCommand {}),
        )
        .await
        .unwrap_err();
        assert_eq!(err.reason(), ErrorReason::InvalidCommand);
        let done = send(
            &mut owner,
            &mut inbox,
            &registry,
            Command::Expression(ExpressionCommand { code: "1+1".into() }),
        )
        .await
        .unwrap()
        .pause
        .unwrap();
        assert_eq!(done.debug_value.unwrap().text, "1+1");
        assert!(done.input_type.contains(&(CommandKind::Next as i32)));
        assert!(done.prompt.is_empty());
        let stacked = send(
            &mut owner,
            &mut inbox,
            &registry,
            Command::Stacktrace(StacktraceCommand {}),
        )
        .await
        .unwrap()
        .pause
        .unwrap();
        assert!(stacked.revision > done.revision);
    }
}
